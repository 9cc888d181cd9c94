package bench

import (
	"os"
	"testing"
)

// TestMain runs the benchmarks, or, when the serve benchmark re-executes
// this binary as its reader process, that process (see readerMain).
func TestMain(m *testing.M) {
	if os.Getenv(readerEnv) != "" {
		os.Exit(readerMain())
	}
	os.Exit(m.Run())
}
