package partition

import (
	"os"
	"strings"
	"testing"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// broker is the producers' broker (producers_test.go): a kfake, or the
// Apache Kafka that KMATERIALIZE_TEST_KAFKA names (scripts/test-kafka).
var broker *localkafka.Broker

func TestMain(m *testing.M) {
	// A fuzzing run (.ci/fuzz: -run '^$' -fuzz FuzzPartition), in the
	// coordinator and in each worker, and -list need no broker.
	for _, a := range os.Args[1:] {
		if strings.HasPrefix(a, "-test.fuzzworker") || strings.HasPrefix(a, "-test.list=") ||
			(strings.HasPrefix(a, "-test.fuzz=") && a != "-test.fuzz=") {
			os.Exit(m.Run())
		}
	}
	os.Exit(localkafka.RunTests(m, &broker))
}
