package client_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/serve"
)

// TestWatch: an independent consumer lists a followed table with Rows
// (the first page's cursor from OnPage), then Watches from that cursor
// while a producer writes keys and tombstones: after every Commit its
// copy equals the oracle fold of the records below the commit's
// positions, until it holds every record. Watch ends with ctx's error
// when ctx ends; a cursor of another epoch is an *Error 410 matching
// ErrCursorGone with the table's cursor, from which a watch starts; a
// bad cursor is CodeBadCursor.
func TestWatch(t *testing.T) {
	topic := fmt.Sprintf("client-watch-%d-%d", os.Getpid(), seq.Add(1))
	broker.TestTopic(t, topic, 1, nil)
	type rec struct {
		off        int64
		key, value string // value "": a tombstone
	}
	var log []rec
	write := func(round, n int) int64 {
		t.Helper()
		var recs []localkafka.Record
		for i := range n {
			r := localkafka.Record{Key: []byte(fmt.Sprintf("k%02d", (i*7+round)%15))}
			if i%4 != 1 {
				r.Value = []byte(fmt.Sprintf("r%d-%d", round, i))
			}
			recs = append(recs, r)
		}
		offs, err := broker.Produce(context.Background(), topic, recs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range recs {
			log = append(log, rec{offs[i], string(r.Key), string(r.Value)})
		}
		return offs[len(offs)-1] + 1
	}
	foldTo := func(log []rec, pos int64) map[string]string {
		o := map[string]string{}
		for _, r := range log {
			switch {
			case r.off >= pos:
			case r.value == "":
				delete(o, r.key)
			default:
				o[r.key] = r.value
			}
		}
		return o
	}
	write(0, 30)
	f := newFixtureWith(t, false, "", "", func(cfg *serve.Config) { cfg.Tables = []serve.Table{followedTable(topic)} })
	f.producedOnce.Do(func() { close(f.produced) })
	cl := f.cl
	awaitReady(t, cl)

	copyOf := map[string]string{}
	var first client.ReadInfo
	if _, err := cl.Rows(ctx(t), "t", client.RowsOptions{PageSize: 4, OnPage: func(ri client.ReadInfo) {
		if first.Cursor == "" {
			first = ri
		}
	}}, func(r client.Row) error { copyOf[string(r.Key)] = string(r.Value); return nil }); err != nil {
		t.Fatal(err)
	}
	if first.Cursor == "" {
		t.Fatal("the first page has no cursor")
	}

	type seen struct {
		commit client.Commit
		copy   map[string]string // the copy at the commit
	}
	commits := make(chan seen, 1000)
	wctx, cancel := context.WithCancel(ctx(t))
	done := make(chan error, 1)
	go func() {
		done <- cl.Watch(wctx, "t", first.Cursor, func(ev client.Event) error {
			switch {
			case ev.Change != nil && ev.Change.Deleted:
				delete(copyOf, string(ev.Change.Key))
			case ev.Change != nil:
				copyOf[string(ev.Change.Key)] = string(ev.Change.Value)
			case ev.Commit != nil:
				commits <- seen{*ev.Commit, maps.Clone(copyOf)}
			}
			return nil
		})
	}()
	var last client.Commit
	for round := 1; round <= 6; round++ {
		end := write(round, 12)
		for {
			var sn seen
			select {
			case sn = <-commits:
			case err := <-done:
				t.Fatalf("Watch ended: %v", err)
			case <-time.After(60 * time.Second):
				t.Fatal("no commit in 60s")
			}
			c := sn.commit
			if want := foldTo(log, c.Positions[0]); !maps.Equal(sn.copy, want) {
				t.Fatalf("round %d: at %v the copy is %v, the oracle %v", round, c.Positions, sn.copy, want)
			}
			last = c
			if c.Positions[0] >= end {
				break
			}
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch after its ctx ended: %v", err)
	}

	cur, err := api.ParseCursor(last.Cursor)
	if err != nil {
		t.Fatal(err)
	}
	cur.Epoch += 1000
	err = cl.Watch(ctx(t), "t", cur.String(), func(client.Event) error { return nil })
	var e *client.Error
	if !errors.Is(err, client.ErrCursorGone) || !errors.As(err, &e) || e.Status != http.StatusGone || e.Read.Cursor != last.Cursor {
		t.Fatalf("a cursor of another epoch: %v (%+v), want 410 with cursor %s", err, e, last.Cursor)
	}
	if err := cl.Watch(ctx(t), "t", "bogus!", func(client.Event) error { return nil }); !client.IsCode(err, client.CodeBadCursor) {
		t.Fatalf("a bad cursor: %v", err)
	}
	// From the 410's cursor, an error fn returns ends the watch as is.
	stop := errors.New("stop")
	write(7, 3)
	if err := cl.Watch(ctx(t), "t", e.Read.Cursor, func(ev client.Event) error {
		if ev.Commit != nil {
			return stop
		}
		return nil
	}); err != stop {
		t.Fatalf("Watch from the 410's cursor: %v", err)
	}
}

// TestWatchErrorLines: a stream's error line is a *FeedError matching
// its sentinel; a stream that ends without one is io.ErrUnexpectedEOF.
func TestWatchErrorLines(t *testing.T) {
	for _, tc := range []struct {
		code string
		want error
	}{
		{api.CodeWatcherTooSlow, client.ErrWatcherTooSlow},
		{api.CodeShuttingDown, client.ErrFeedShuttingDown},
		{api.CodeCursorGone, client.ErrCursorGone},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/x-ndjson")
			fmt.Fprintf(w, "{\"key\":\"aw==\",\"value\":null}\n{\"commit\":{\"positions\":{\"0\":3},\"generation\":1,\"cursor\":\"AQ\"}}\n{\"error\":{\"code\":%q,\"message\":\"m\"}}\n", tc.code)
		}))
		cl, err := client.DialURL(srv.URL, "")
		if err != nil {
			t.Fatal(err)
		}
		var evs []client.Event
		err = cl.Watch(ctx(t), "t", "now", func(ev client.Event) error { evs = append(evs, ev); return nil })
		var fe *client.FeedError
		if !errors.Is(err, tc.want) || !errors.As(err, &fe) || fe.Code != tc.code || len(evs) != 2 ||
			evs[0].Change == nil || string(evs[0].Change.Key) != "k" || !evs[0].Change.Deleted || evs[1].Commit == nil || evs[1].Commit.Positions[0] != 3 {
			t.Fatalf("%s: %v, events %+v", tc.code, err, evs)
		}
		srv.Close()
	}
}

// memSink is a client.Sink in a map; each Commit sends the copy and its
// positions on commits.
type memSink struct {
	rows    map[string]string
	resets  int
	commits chan sinkCommit
}

type sinkCommit struct {
	positions client.Positions
	rows      map[string]string
}

func (s *memSink) Reset() error          { s.rows = map[string]string{}; s.resets++; return nil }
func (s *memSink) Put(k, v []byte) error { s.rows[string(k)] = string(v); return nil }
func (s *memSink) Delete(k []byte) error { delete(s.rows, string(k)); return nil }
func (s *memSink) Commit(p client.Positions) error {
	s.commits <- sinkCommit{p.Clone(), maps.Clone(s.rows)}
	return nil
}

// TestListThenWatch: ListThenWatch keeps a sink a copy of a followed
// table while a producer writes keys and tombstones: every Commit's copy
// equals the oracle fold of the records below its positions, up to the
// last record; an error of the sink ends it as is, and ctx's end with
// ctx's error.
func TestListThenWatch(t *testing.T) {
	topic := fmt.Sprintf("client-ltw-%d-%d", os.Getpid(), seq.Add(1))
	broker.TestTopic(t, topic, 1, nil)
	type rec struct {
		off        int64
		key, value string
	}
	var log []rec
	write := func(round, n int) int64 {
		t.Helper()
		var recs []localkafka.Record
		for i := range n {
			r := localkafka.Record{Key: []byte(fmt.Sprintf("k%02d", (i*5+round)%13))}
			if i%3 != 1 {
				r.Value = []byte(fmt.Sprintf("r%d-%d", round, i))
			}
			recs = append(recs, r)
		}
		offs, err := broker.Produce(context.Background(), topic, recs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range recs {
			log = append(log, rec{offs[i], string(r.Key), string(r.Value)})
		}
		return offs[len(offs)-1] + 1
	}
	foldTo := func(pos int64) map[string]string {
		o := map[string]string{}
		for _, r := range log {
			switch {
			case r.off >= pos:
			case r.value == "":
				delete(o, r.key)
			default:
				o[r.key] = r.value
			}
		}
		return o
	}
	end := write(0, 25)
	f := newFixtureWith(t, false, "", "", func(cfg *serve.Config) { cfg.Tables = []serve.Table{followedTable(topic)} })
	f.producedOnce.Do(func() { close(f.produced) })
	awaitReady(t, f.cl)

	sink := &memSink{commits: make(chan sinkCommit, 1000)}
	wctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.cl.ListThenWatch(wctx, "t", sink) }()
	next := func() sinkCommit {
		t.Helper()
		select {
		case c := <-sink.commits:
			return c
		case err := <-done:
			t.Fatalf("ListThenWatch ended: %v", err)
		case <-time.After(60 * time.Second):
			t.Fatal("no commit in 60s")
		}
		return sinkCommit{}
	}
	for round := 1; round <= 6; round++ {
		for {
			c := next()
			if want := foldTo(c.positions[0]); !maps.Equal(c.rows, want) {
				t.Fatalf("round %d: at %v the sink holds %v, the oracle %v", round, c.positions, c.rows, want)
			}
			if c.positions[0] >= end {
				break
			}
		}
		end = write(round, 10)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("ListThenWatch after its ctx ended: %v", err)
	}
	if sink.resets != 1 {
		t.Fatalf("%d lists, want 1", sink.resets)
	}
	stop := errors.New("sink full")
	if err := f.cl.ListThenWatch(ctx(t), "t", failingSink{memSink: &memSink{commits: make(chan sinkCommit, 10)}, err: stop}); err != stop {
		t.Fatalf("ListThenWatch with a failing sink: %v, want its error as is", err)
	}
}

// failingSink fails every Put.
type failingSink struct {
	*memSink
	err error
}

func (s failingSink) Put(k, v []byte) error { return s.err }
