package localkafka

import (
	"errors"
	"testing"

	"github.com/kmaterialize/kmaterialize/internal/kafkatest"
)

// TestStartRefusedOnRealPass: in a test process whose environment names a
// real Kafka, starting an in-process kfake is an error (a test must not pass
// the real pass on a kfake of its own), and KfakeOnly skips with the one
// reason. It runs on both passes: it sets the variable itself.
func TestStartRefusedOnRealPass(t *testing.T) {
	t.Setenv(kafkatest.EnvAddr, "127.0.0.1:1")
	b, err := Start()
	if !errors.Is(err, ErrKfakeOnRealPass) {
		if b != nil {
			b.Close()
		}
		t.Fatalf("Start under %s = %v, want ErrKfakeOnRealPass", kafkatest.EnvAddr, err)
	}
	var skip skipSpy
	KfakeOnly(&skip)
	if skip.reason != KfakeOnlyReason {
		t.Fatalf("KfakeOnly skipped with %q, want %q", skip.reason, KfakeOnlyReason)
	}

	t.Setenv(kafkatest.EnvAddr, "")
	b, err = Start()
	if err != nil {
		t.Fatalf("Start without %s: %v", kafkatest.EnvAddr, err)
	}
	b.Close()
	skip = skipSpy{}
	KfakeOnly(&skip)
	if skip.skipped {
		t.Fatal("KfakeOnly skipped without a real Kafka")
	}
}

// skipSpy records a Skip instead of ending the test.
type skipSpy struct {
	skipped bool
	reason  string
}

func (s *skipSpy) Helper() {}
func (s *skipSpy) Skip(args ...any) {
	s.skipped = true
	if len(args) == 1 {
		s.reason, _ = args[0].(string)
	}
}
