package materialize_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

var broker *localkafka.Broker

func TestMain(m *testing.M) {
	b, err := localkafka.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	broker = b
	code := m.Run()
	b.Close()
	os.Exit(code)
}
