package client_test

// Tests of ListThenWatch's recoveries (listwatch.go): after a daemon
// restart (its shutting_down line, an unreachable socket, then a 410 of
// the new epoch) it resets the sink and lists again; cut off as too slow
// it resumes from its last commit's cursor without a list. At every
// Commit, before and after each recovery, the sink equals the oracle fold
// of the records below the commit's positions.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/serve"
)

// recoverLog is every record a test produced, with its offset.
type recoverLog struct {
	mu   sync.Mutex
	recs []recoverRec
}

type recoverRec struct {
	part       int32
	off        int64
	key, value string // value "": a tombstone
}

// write produces n records of round over parts partitions, keys of their
// own partition, every fourth a tombstone, values of pad bytes more; it
// returns the positions after every record produced so far.
func (l *recoverLog) write(t *testing.T, topic string, round, n int, parts int32, pad int) client.Positions {
	t.Helper()
	recs := make([]localkafka.Record, n)
	for i := range recs {
		p := int32(i) % parts
		recs[i] = localkafka.Record{Partition: p, Key: []byte(fmt.Sprintf("p%d-k%02d", p, (i*7+round)%17))}
		if i%4 != 1 {
			recs[i].Value = []byte(fmt.Sprintf("r%d-%d%s", round, i, strings.Repeat("x", pad)))
		}
	}
	offs, err := broker.Produce(context.Background(), topic, recs)
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, r := range recs {
		l.recs = append(l.recs, recoverRec{r.Partition, offs[i], string(r.Key), string(r.Value)})
	}
	ends := client.Positions{}
	for _, r := range l.recs {
		ends[r.part] = max(ends[r.part], r.off+1)
	}
	return ends
}

// foldAt is the latest fold of the records below pos. Keys belong to one
// partition, so the order across partitions does not matter.
func (l *recoverLog) foldAt(pos client.Positions) map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	o := map[string]string{}
	for _, r := range l.recs {
		switch {
		case r.off >= pos[r.part]:
		case r.value == "":
			delete(o, r.key)
		default:
			o[r.key] = r.value
		}
	}
	return o
}

// recSink is a client.Sink in a map. Each Commit sends the copy, its
// positions and the number of Resets so far on commits. A Put after
// hold is set blocks (once) until release is closed, after saying so on
// blocked.
type recSink struct {
	rows    map[string]string
	resets  int
	commits chan recCommit
	hold    atomic.Bool
	blocked chan struct{}
	release chan struct{}
}

type recCommit struct {
	positions client.Positions
	rows      map[string]string
	resets    int
}

func newRecSink() *recSink {
	return &recSink{commits: make(chan recCommit, 10000), blocked: make(chan struct{}, 1), release: make(chan struct{})}
}

func (s *recSink) Reset() error { s.rows = map[string]string{}; s.resets++; return nil }
func (s *recSink) Put(k, v []byte) error {
	if s.hold.CompareAndSwap(true, false) {
		s.blocked <- struct{}{}
		<-s.release
	}
	s.rows[string(k)] = string(v)
	return nil
}
func (s *recSink) Delete(k []byte) error { delete(s.rows, string(k)); return nil }
func (s *recSink) Commit(p client.Positions) error {
	s.commits <- recCommit{p.Clone(), maps.Clone(s.rows), s.resets}
	return nil
}

// runLTW runs ListThenWatch of table "t" into sink until the test ends;
// next returns the sink's next Commit, after checking it against the
// oracle at its positions.
func runLTW(t *testing.T, cl *client.Client, sink *recSink, l *recoverLog, tap *feedTap) (next func(what string) recCommit) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cl.ListThenWatch(ctx, "t", sink) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("ListThenWatch after its ctx ended: %v", err)
		}
	})
	return func(what string) recCommit {
		t.Helper()
		select {
		case c := <-sink.commits:
			if want := l.foldAt(c.positions); !maps.Equal(c.rows, want) {
				t.Fatalf("%s: at %v the sink holds %d rows, the oracle %d:\nsink   %v\noracle %v", what, c.positions, len(c.rows), len(want), c.rows, want)
			}
			return c
		case err := <-done:
			t.Fatalf("%s: ListThenWatch ended: %v", what, err)
		case <-time.After(90 * time.Second):
			tb, err := cl.Table(context.Background(), "t")
			t.Fatalf("%s: no commit in 90s; %d watches, error lines %v; the table: %+v (%v)", what, tap.watches.Load(), tap.codes(), tb.Partitions, err)
		}
		return recCommit{}
	}
}

// untilAt reads commits (each checked) until one is at or past want.
func untilAt(t *testing.T, next func(string) recCommit, what string, want client.Positions) recCommit {
	t.Helper()
	for {
		c := next(what)
		if reached, _ := c.positions.Reached(want); reached {
			return c
		}
	}
}

// restartable is a daemon (serve.Server in this process) of cfg that a
// test stops and starts again on the same file and socket.
type restartable struct {
	cfg    serve.Config
	cancel context.CancelFunc
	errc   chan error
}

func recoverConfig(t *testing.T, topic string) serve.Config {
	sockDir, err := os.MkdirTemp("", "kmr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	return serve.Config{
		DBPath: filepath.Join(t.TempDir(), "t.db"),
		Socket: filepath.Join(sockDir, "api.sock"),
		Tables: []serve.Table{followedTable(topic)},
		ExitCode: func(err error) int {
			if err != nil {
				return 1
			}
			return 0
		},
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	}
}

func (d *restartable) start(t *testing.T) {
	t.Helper()
	s, err := serve.New(d.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, errc := make(chan struct{}), make(chan error, 1)
	go func() { errc <- s.Run(ctx, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-errc:
		cancel()
		t.Fatalf("Run: %v", err)
	}
	d.cancel, d.errc = cancel, errc
}

func (d *restartable) stop(t *testing.T) {
	t.Helper()
	if d.cancel == nil {
		return
	}
	d.cancel()
	if err := <-d.errc; err != nil {
		t.Errorf("Run: %v", err)
	}
	d.cancel = nil
}

// feedTap counts the change feed requests a client makes and the error
// lines of their streams, by code.
type feedTap struct {
	rt       http.RoundTripper
	watches  atomic.Int64 // answered, any status
	gone     atomic.Int64 // answered 410
	mu       sync.Mutex
	endCodes map[string]int
}

func (ft *feedTap) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := ft.rt.RoundTrip(req)
	if err != nil || !strings.HasSuffix(req.URL.Path, "/changes") {
		return resp, err
	}
	ft.watches.Add(1)
	if resp.StatusCode == http.StatusGone {
		ft.gone.Add(1)
	}
	if resp.StatusCode == http.StatusOK {
		resp.Body = &tapBody{ReadCloser: resp.Body, ft: ft}
	}
	return resp, nil
}

func (ft *feedTap) ended(code string) int {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return ft.endCodes[code]
}

// codes are the error lines' codes so far, with their counts.
func (ft *feedTap) codes() map[string]int {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return maps.Clone(ft.endCodes)
}

// await polls cond (a "did not hang" bound, not a timing assertion).
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 60s waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tapBody passes a stream through, noting its error line's code.
type tapBody struct {
	io.ReadCloser
	ft   *feedTap
	line []byte
}

func (b *tapBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	data := p[:n]
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			b.line = append(b.line, data...)
			break
		}
		b.line = append(b.line, data[:i]...)
		var el struct {
			Error *struct{ Code string }
		}
		if bytes.HasPrefix(b.line, []byte(`{"error":`)) && json.Unmarshal(b.line, &el) == nil && el.Error != nil {
			b.ft.mu.Lock()
			if b.ft.endCodes == nil {
				b.ft.endCodes = map[string]int{}
			}
			b.ft.endCodes[el.Error.Code]++
			b.ft.mu.Unlock()
		}
		b.line, data = b.line[:0], data[i+1:]
	}
	return n, err
}

// TestListThenWatchRecoversFromRestart: ListThenWatch keeps a copy of a
// followed table; the daemon shuts down (the stream ends with
// shutting_down, then the socket is gone) while records are produced, and
// starts again on the same file with a new epoch: the watch from the last
// commit's cursor is 410, so ListThenWatch resets the sink and lists
// again. Its next Commit, and every one after it, equals the oracle.
func TestListThenWatchRecoversFromRestart(t *testing.T) {
	topic := fmt.Sprintf("client-ltw-restart-%d-%d", os.Getpid(), seq.Add(1))
	broker.TestTopic(t, topic, 2, nil)
	var l recoverLog
	end := l.write(t, topic, 0, 30, 2, 0)
	d := &restartable{cfg: recoverConfig(t, topic)}
	d.start(t)
	t.Cleanup(func() { d.stop(t) })
	tap := &feedTap{}
	cl := client.Dial(d.cfg.Socket)
	client.WrapTransport(cl, func(rt http.RoundTripper) http.RoundTripper { tap.rt = rt; return tap })
	t.Cleanup(cl.Close)
	awaitReady(t, cl)

	sink := newRecSink()
	next := runLTW(t, cl, sink, &l, tap)
	untilAt(t, next, "the first list", end)
	for round := 1; round <= 3; round++ {
		end = l.write(t, topic, round, 12, 2, 0)
		if c := untilAt(t, next, fmt.Sprintf("round %d", round), end); c.resets != 1 {
			t.Fatalf("round %d: %d lists, want 1", round, c.resets)
		}
	}

	d.stop(t)
	await(t, "the stream's shutting_down line", func() bool { return tap.ended(client.CodeShuttingDown) == 1 })
	end = l.write(t, topic, 4, 12, 2, 0)
	d.start(t)
	c := next("the first commit after the restart")
	if c.resets != 2 {
		t.Fatalf("the first commit after the restart follows %d lists, want 2 (a 410 lists again)", c.resets)
	}
	if n := tap.gone.Load(); n != 1 {
		t.Fatalf("%d watches answered 410 before the new list, want 1 (the old cursor's, of the old epoch)", n)
	}
	// The list may already hold round 4 (the follower applied it first).
	if reached, _ := c.positions.Reached(end); !reached {
		untilAt(t, next, "after the restart", end)
	}
	for round := 5; round <= 7; round++ {
		end = l.write(t, topic, round, 12, 2, 0)
		if c := untilAt(t, next, fmt.Sprintf("round %d", round), end); c.resets != 2 {
			t.Fatalf("round %d: %d lists, want 2", round, c.resets)
		}
	}
}

// TestListThenWatchRecoversFromTooSlow: with a small slow-watcher bound,
// a sink that blocks while some 3 MiB of changes are applied makes the
// daemon cut the watcher off (watcher_too_slow) once it reads again;
// ListThenWatch then watches again from its last commit's cursor, with no
// new list, and its next Commit and every one after it equal the oracle.
func TestListThenWatchRecoversFromTooSlow(t *testing.T) {
	topic := fmt.Sprintf("client-ltw-slow-%d-%d", os.Getpid(), seq.Add(1))
	broker.TestTopic(t, topic, 1, nil)
	var l recoverLog
	end := l.write(t, topic, 0, 20, 1, 0)
	d := &restartable{cfg: recoverConfig(t, topic)}
	d.cfg.FeedSlowBytes = 32 << 10
	d.start(t)
	t.Cleanup(func() { d.stop(t) })
	tap := &feedTap{}
	cl := client.Dial(d.cfg.Socket)
	client.WrapTransport(cl, func(rt http.RoundTripper) http.RoundTripper { tap.rt = rt; return tap })
	t.Cleanup(cl.Close)
	awaitReady(t, cl)

	sink := newRecSink()
	next := runLTW(t, cl, sink, &l, tap)
	untilAt(t, next, "the first list", end)

	sink.hold.Store(true)
	end = l.write(t, topic, 1, 10, 1, 0)
	select {
	case <-sink.blocked:
	case <-time.After(90 * time.Second):
		t.Fatal("the sink was not handed a change in 90s")
	}
	// Some 24 commits of 128 KiB each (each round awaited: one apply
	// each, within the capture bound), far more than the socket holds.
	for round := 2; round <= 25; round++ {
		end = l.write(t, topic, round, 32, 1, 4<<10)
		if _, _, err := cl.CountWith(ctx(t), "t", client.CountOptions{MinPositions: end, Wait: 30 * time.Second}); err != nil {
			t.Fatalf("round %d: awaiting its apply: %v", round, err)
		}
	}
	close(sink.release)
	c := untilAt(t, next, "after the resume", end)
	if n := tap.ended(client.CodeWatcherTooSlow); n != 1 {
		t.Fatalf("%d streams ended with %s, want 1 (ends %v)", n, client.CodeWatcherTooSlow, tap.codes())
	}
	if w := tap.watches.Load(); w != 2 || c.resets != 1 || tap.gone.Load() != 0 {
		t.Fatalf("%d watches and %d lists, want 2 and 1: a watcher too slow resumes from its cursor", w, c.resets)
	}
	end = l.write(t, topic, 26, 10, 1, 0)
	untilAt(t, next, "after more records", end)
}
