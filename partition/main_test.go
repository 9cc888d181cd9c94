package partition

import (
	"os"
	"testing"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// broker is the producers' broker (producers_test.go): a kfake, or the
// Apache Kafka that KMATERIALIZE_TEST_KAFKA names (scripts/test-kafka).
var broker *localkafka.Broker

func TestMain(m *testing.M) { os.Exit(localkafka.RunTests(m, &broker)) }
