package replay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// failLog is a librdkafka FAIL log line for broker, as it writes them.
func failLog(broker, what string) kafka.LogEvent {
	return kafka.LogEvent{Tag: "FAIL", Level: 3, Message: "[thrd:" + broker + "]: " + broker + ": " + what + " (after 0ms in state CONNECT)"}
}

const (
	logRefused = "Connect to ipv4#127.0.0.1:1 failed: Connection refused"
	logNoHost  = "Failed to resolve 'nonexistent.invalid:9092': Name or service not known"
	logTempDNS = "Failed to resolve 'flaky.example:9092': Temporary failure in name resolution"
	logBroke   = "Disconnected while requesting ApiVersion: might be caused by incorrect security.protocol configuration"
)

// TestBootstrapWatch: the rule "every bootstrap broker refused or does not
// resolve, before any answered, for the window" on librdkafka's own log
// lines. The lines real clients write are in TestUnreachableBrokers
// (cmd/kmaterialize); here the cases a test broker cannot stage: a
// temporary DNS failure, a broker that accepted and broke the connection,
// one that answered. The window has passed in every case (the watch's
// start is moved back), so the decision is made in Bind, synchronously.
func TestBootstrapWatch(t *testing.T) {
	for _, tc := range []struct {
		name      string
		bootstrap string
		lines     []kafka.LogEvent
		reached   bool
		want      []BrokerFailure // nil: the watch must not fire
	}{
		{name: "refused and no such host", bootstrap: "127.0.0.1:1, PLAINTEXT://nonexistent.invalid",
			lines: []kafka.LogEvent{failLog("127.0.0.1:1/bootstrap", logRefused), failLog("nonexistent.invalid:9092/bootstrap", logNoHost)},
			want:  []BrokerFailure{{"127.0.0.1:1", CauseRefused}, {"nonexistent.invalid:9092", CauseNoHost}}},
		{name: "one broker not heard of", bootstrap: "127.0.0.1:1,127.0.0.1:2",
			lines: []kafka.LogEvent{failLog("127.0.0.1:1/bootstrap", logRefused)}},
		{name: "temporary DNS failure", bootstrap: "127.0.0.1:1,flaky.example:9092",
			lines: []kafka.LogEvent{failLog("127.0.0.1:1/bootstrap", logRefused), failLog("flaky.example:9092/bootstrap", logTempDNS)}},
		{name: "connection made, then broken", bootstrap: "127.0.0.1:1",
			lines: []kafka.LogEvent{failLog("127.0.0.1:1/bootstrap", logRefused), failLog("127.0.0.1:1/bootstrap", logBroke)}},
		{name: "a learned broker failed: the cluster answered", bootstrap: "127.0.0.1:1",
			lines: []kafka.LogEvent{failLog("127.0.0.1:1/bootstrap", logRefused), failLog("localhost:9093/2", logRefused)}},
		{name: "a request succeeded", bootstrap: "127.0.0.1:1", reached: true,
			lines: []kafka.LogEvent{failLog("127.0.0.1:1/bootstrap", logRefused)}},
		{name: "other tags are not failures", bootstrap: "127.0.0.1:1",
			lines: []kafka.LogEvent{{Tag: "ERROR", Message: "1/1 brokers are down"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewBootstrapWatch(tc.bootstrap, time.Minute)
			if w.window != UnreachableWindow {
				t.Fatalf("window %s with a 1m stall timeout, want %s", w.window, UnreachableWindow)
			}
			w.start = time.Now().Add(-time.Hour)
			for _, l := range tc.lines {
				w.Observe(l)
			}
			if tc.reached {
				w.Reached()
			}
			ctx, stop := w.Bind(context.Background())
			defer stop()
			err := w.Err(ctx, "metadata", "t", ctx.Err())
			if tc.want == nil {
				if err != nil {
					t.Fatalf("the watch fired: %v", err)
				}
				return
			}
			var ue *UnreachableError
			if !errors.As(err, &ue) || !errors.Is(err, ErrUnavailable) {
				t.Fatalf("error %v, want an ErrUnavailable wrapping an *UnreachableError", err)
			}
			if len(ue.Brokers) != len(tc.want) {
				t.Fatalf("brokers %+v, want %+v", ue.Brokers, tc.want)
			}
			for i := range tc.want {
				if ue.Brokers[i] != tc.want[i] {
					t.Fatalf("brokers %+v, want %+v", ue.Brokers, tc.want)
				}
			}
		})
	}
	if w := NewBootstrapWatch("b:1", 2*time.Second); w.window != 2*time.Second {
		t.Fatalf("window %s with a 2s stall timeout, want 2s", w.window)
	}
}
