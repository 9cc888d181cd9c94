package serve

import (
	"os"
	"testing"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

var broker *localkafka.Broker

func TestMain(m *testing.M) { os.Exit(localkafka.RunTests(m, &broker)) }
