package bench

import (
	"os"
	"testing"
)

// TestMain runs the benchmarks, or, when a benchmark re-executes this
// binary as a child, that child: the serve benchmark's reader process (see
// readerMain) or the rebuild benchmark's raw consume (see rawMain). The
// broker process the benchmarks share is stopped at the end.
func TestMain(m *testing.M) {
	if os.Getenv(readerEnv) != "" {
		os.Exit(readerMain())
	}
	if addr := os.Getenv(envRaw); addr != "" {
		os.Exit(rawMain(addr, os.Getenv(envRawTopic)))
	}
	code := m.Run()
	if fix != nil {
		fix.close()
	}
	os.Exit(code)
}
