package progressview_test

import (
	"bytes"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/internal/progressview"
	"github.com/kmaterialize/kmaterialize/replay"
)

// syncBuffer is a bytes.Buffer safe for mpb's goroutine and the test's.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls cond (a "did not hang" bound, not a timing assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBars draws three partitions, one reading (rate and ETA shown), one
// waiting on an open transaction, one done, with a log line written while
// the bars are drawn; then finishes with the first two incomplete.
func TestBars(t *testing.T) {
	var out syncBuffer
	var logTo io.Writer
	restored := false
	v := progressview.New(progressview.Options{
		Mode: progressview.Bars, Out: &out, Width: 120, RefreshRate: 20 * time.Millisecond,
		Redirect: func(w io.Writer) func() { logTo = w; return func() { restored = true } },
	})
	snap := replay.Progress{Topic: "orders", Records: 50, Elapsed: time.Second, Partitions: []replay.PartitionProgress{
		{Partition: 0, Start: 10, Position: 60, End: 110, State: replay.StateReading},
		{Partition: 1, Start: 0, Position: 7, End: 9, State: replay.StateWaiting},
		{Partition: 2, Start: 5, Position: 5, End: 5, State: replay.StateDone},
	}}
	v.Update(snap)
	if logTo == nil {
		t.Fatal("the bars started without redirecting the log")
	}
	log := zerolog.New(logTo)
	log.Info().Msg("a line above the bars")
	reading := regexp.MustCompile(`(?m)^orders p0 +\[=+>?-+\] +60/110 +\d+ offsets/s +\S+s`)
	waitFor(t, "frame with p0 at 60/110 with rate and ETA", func() bool { return reading.MatchString(out.String()) })
	// The waiting partition is not moving: no rate, no ETA, only why.
	waiting := regexp.MustCompile(`(?m)^orders p1 +\[[^\]]*\] +7/9 +waiting: an open transaction holds the LSO at 7$`)
	waitFor(t, "frame with p1 waiting without rate or ETA", func() bool { return waiting.MatchString(out.String()) })
	v.Finish()
	if !restored {
		t.Fatal("Finish did not restore the log's writer")
	}
	text := out.String()
	for _, re := range []string{
		`(?m)^orders p1 +\[.*\] +7/9 .*waiting: an open transaction holds the LSO at 7$`,
		`(?m)^orders p2 +\[.*\] +5/5 +done`,
		`(?m)^orders p0 +\[.*\] +60/110 .*stopped`,
		`(?m)^\{"level":"info","message":"a line above the bars"\}$`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("no line matching %s in:\n%s", re, text)
		}
	}
	// Nothing is drawn after Finish.
	n := len(text)
	v.Update(snap)
	if len(out.String()) != n {
		t.Fatal("an Update after Finish drew")
	}
}

// TestBarsDone: a run that stops cleanly with a partition short of its
// end (a copy at --max-records) draws that bar done where it stopped,
// never stopped.
func TestBarsDone(t *testing.T) {
	var out syncBuffer
	v := progressview.New(progressview.Options{Mode: progressview.Bars, Out: &out, Width: 120, RefreshRate: 20 * time.Millisecond})
	v.Update(replay.Progress{Topic: "orders", Records: 50, Partitions: []replay.PartitionProgress{
		{Partition: 0, Start: 10, Position: 60, End: 110, State: replay.StateReading},
		{Partition: 1, Start: 0, Position: 9, End: 9, State: replay.StateDone},
	}})
	v.Done()
	v.Finish() // a deferred Finish after Done changes nothing
	text := out.String()
	lines := strings.Split(strings.TrimSpace(text), "\n")
	last := map[string]string{}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 1 {
			last[f[1]] = l
		}
	}
	for p, re := range map[string]string{"p0": `^orders p0 +\[.*\] +60/110 .*done`, "p1": `^orders p1 +\[.*\] +9/9 .*done`} {
		if !regexp.MustCompile(re).MatchString(last[p]) {
			t.Errorf("last frame of %s %q does not match %s\n%s", p, last[p], re, text)
		}
	}
	if strings.Contains(text, "stopped") {
		t.Fatalf("a clean stop drew a bar stopped:\n%s", text)
	}
}

// TestLines logs per-partition lines every Interval, leaving out done
// partitions, and every partition of the last snapshot of each topic.
func TestLines(t *testing.T) {
	var buf syncBuffer
	v := progressview.New(progressview.Options{Mode: progressview.Lines, Interval: time.Hour, Log: zerolog.New(&buf)})
	src := func(pos int64, st replay.PartitionState) replay.Progress {
		return replay.Progress{Topic: "src", Records: pos, Partitions: []replay.PartitionProgress{
			{Partition: 0, Position: pos, End: 10, State: st}, {Partition: 1, Position: 4, End: 4, State: replay.StateDone}}}
	}
	v.Update(src(3, replay.StateReading)) // within the interval: not logged
	if buf.String() != "" {
		t.Fatalf("logged within the interval: %s", buf.String())
	}
	v.Update(src(10, replay.StateDone))
	v.Update(replay.Progress{Topic: "dst", Records: 1, Partitions: []replay.PartitionProgress{{Partition: 0, Position: 1, End: 1, State: replay.StateDone}}})
	v.Finish()
	want := strings.Join([]string{
		`{"level":"info","topic":"src","partition":0,"position":10,"end":10,"state":"done","message":"progress"}`,
		`{"level":"info","topic":"src","partition":1,"position":4,"end":4,"state":"done","message":"progress"}`,
		`{"level":"info","topic":"src","records":10,"partitions_done":2,"partitions":2,"message":"progress"}`,
		`{"level":"info","topic":"dst","partition":0,"position":1,"end":1,"state":"done","message":"progress"}`,
		`{"level":"info","topic":"dst","records":1,"partitions_done":1,"partitions":1,"message":"progress"}`,
	}, "\n") + "\n"
	if buf.String() != want {
		t.Fatalf("lines:\n%s\nwant:\n%s", buf.String(), want)
	}
}
