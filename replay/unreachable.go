package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// A wrong broker address fails fast. librdkafka retries a bootstrap broker
// that refuses the connection or whose name does not resolve for as long as
// it is asked to, and a request then fails only at the stall timeout with
// "Local: Timed out", which names neither the broker nor the cause. The one
// place it says why is its log: a "FAIL" line per broker, for example
//
//	127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)
//	nonexistent.invalid:9092/bootstrap: Failed to resolve 'nonexistent.invalid:9092': Name or service not known (after 2ms in state CONNECT)
//
// delivered on the logs channel (go.logs.channel.enable, always on: see
// ClientConfig), which a goroutine drains whatever the caller is doing. Its
// error events carry the same text under the broader codes ErrTransport and
// ErrResolve (the latter also for a temporary DNS failure), and only to a
// caller that polls. So a BootstrapWatch reads the log lines, and matching
// their text is the only classification librdkafka allows here.
//
// The rule, shared by replay and the copier: before any broker answered,
// every bootstrap broker refused the connection or its name does not
// resolve ("no such host": a temporary DNS failure, EAI_AGAIN, is not), and
// that for UnreachableWindow (at most the stall timeout) since the client
// was made: the request waiting on them ends at once with an *Error of
// kind ErrUnavailable wrapping an *UnreachableError.

// UnreachableWindow is how long every bootstrap broker must have failed so
// before a request fails fast (or the stall timeout, when shorter).
const UnreachableWindow = 5 * time.Second

// Causes of a bootstrap broker's failure that make it unreachable.
const (
	CauseRefused = "connection refused"
	CauseNoHost  = "no such host (the name does not resolve)"
)

// BrokerFailure is one bootstrap broker and why it cannot be reached.
type BrokerFailure struct {
	Broker string
	Cause  string // CauseRefused or CauseNoHost
}

// UnreachableError says that no bootstrap broker could be reached: each
// refused the connection or has a name that does not resolve, for For,
// before any broker answered.
type UnreachableError struct {
	Brokers []BrokerFailure // in the order bootstrap.servers lists them
	For     time.Duration
}

func (e *UnreachableError) Error() string {
	parts := make([]string, len(e.Brokers))
	for i, b := range e.Brokers {
		parts[i] = b.Broker + ": " + b.Cause
	}
	return fmt.Sprintf("no bootstrap broker reachable for %s: %s", e.For, strings.Join(parts, "; "))
}

// BootstrapWatch applies the rule above to one client's log lines (feed it
// with ForwardLogs). Safe for concurrent use; a watch serves one client.
type BootstrapWatch struct {
	order  []string // bootstrap brokers, normalized (bootstrapName)
	window time.Duration
	start  time.Time

	mu      sync.Mutex
	cause   map[string]string // broker -> its last failure's cause; "" for any other failure
	reached bool              // a broker answered: the rule no longer applies
	fire    context.CancelCauseFunc
	timer   *time.Timer
}

// NewBootstrapWatch watches the brokers of bootstrap (a bootstrap.servers
// value) with the window min(UnreachableWindow, stall); stall <= 0 is
// UnreachableWindow. Make it when the client is made: the window counts
// from then.
func NewBootstrapWatch(bootstrap string, stall time.Duration) *BootstrapWatch {
	w := &BootstrapWatch{window: UnreachableWindow, start: time.Now(), cause: map[string]string{}}
	if stall > 0 && stall < w.window {
		w.window = stall
	}
	seen := map[string]bool{}
	for _, b := range strings.Split(bootstrap, ",") {
		if n := bootstrapName(b); n != "" && !seen[n] {
			seen[n] = true
			w.order = append(w.order, n)
		}
	}
	return w
}

// bootstrapName is a bootstrap.servers entry as librdkafka names its
// broker: no security protocol prefix, the default port 9092 added.
func bootstrapName(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
	}
	if s == "" {
		return ""
	}
	if i := strings.LastIndex(s, ":"); i < 0 || strings.HasSuffix(s, "]") {
		s += ":9092"
	}
	return s
}

// Observe takes one librdkafka log line.
func (w *BootstrapWatch) Observe(ev kafka.LogEvent) {
	name, rest, ok := failLine(ev)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	bootstrap, isBootstrap := strings.CutSuffix(name, "/bootstrap")
	if !isBootstrap {
		// A broker the cluster's metadata named: something answered.
		w.reached = true
		return
	}
	w.cause[bootstrapName(bootstrap)] = failCause(rest)
	w.checkLocked()
}

// failLine splits a librdkafka "FAIL" log line into the broker's name and
// the rest: "[thrd:NAME]: NAME: rest".
func failLine(ev kafka.LogEvent) (name, rest string, ok bool) {
	if ev.Tag != "FAIL" {
		return "", "", false
	}
	msg := ev.Message
	if strings.HasPrefix(msg, "[thrd:") {
		if i := strings.Index(msg, "]: "); i >= 0 {
			msg = msg[i+3:]
		}
	}
	return strings.Cut(msg, ": ")
}

// failCause is CauseRefused or CauseNoHost for a failure that makes a
// broker unreachable, "" for any other (the connection was made and broke,
// TLS failed, or DNS failed for now).
func failCause(rest string) string {
	switch {
	case strings.Contains(rest, "Connection refused"):
		return CauseRefused
	case strings.Contains(rest, "Failed to resolve"):
		// getaddrinfo's EAI_NONAME and EAI_NODATA as glibc, musl and
		// macOS word them; EAI_AGAIN ("Temporary failure in name
		// resolution") may pass.
		for _, s := range []string{"Name or service not known", "No address associated with hostname",
			"Name does not resolve", "nodename nor servname provided"} {
			if strings.Contains(rest, s) {
				return CauseNoHost
			}
		}
	}
	return ""
}

// Reached tells the watch that a broker answered (a request succeeded):
// from now on it never fires.
func (w *BootstrapWatch) Reached() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reached = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

// Bind returns ctx that the watch cancels, with an *UnreachableError as
// its cause (see Err), once the rule holds; stop releases it. One Bind at
// a time.
func (w *BootstrapWatch) Bind(ctx context.Context) (context.Context, func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	w.mu.Lock()
	w.fire = cancel
	w.timer = time.AfterFunc(time.Until(w.start.Add(w.window)), func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.checkLocked()
	})
	w.checkLocked()
	w.mu.Unlock()
	return wctx, func() {
		w.mu.Lock()
		w.fire = nil
		if w.timer != nil {
			w.timer.Stop()
		}
		w.mu.Unlock()
		cancel(nil)
	}
}

// checkLocked fires the bound context when the rule holds. Call with w.mu
// held.
func (w *BootstrapWatch) checkLocked() {
	if w.fire == nil || w.reached || len(w.order) == 0 || time.Since(w.start) < w.window {
		return
	}
	ue := &UnreachableError{For: w.window}
	for _, b := range w.order {
		c := w.cause[b]
		if c == "" {
			return
		}
		ue.Brokers = append(ue.Brokers, BrokerFailure{Broker: b, Cause: c})
	}
	w.fire(ue)
	w.fire = nil
}

// Err is err, the result of a request made under Bind's ctx, or the
// *Error (op, topic) that says every bootstrap broker is unreachable when
// the watch ended the request. Call it before stop.
func (w *BootstrapWatch) Err(ctx context.Context, op, topic string, err error) error {
	var ue *UnreachableError
	if err == nil || !errors.As(context.Cause(ctx), &ue) {
		return err
	}
	return &Error{Op: op, Topic: topic, Partition: -1, Offset: -1, Kind: ErrUnavailable,
		Detail: "Kafka unreachable", Err: ue}
}
