package feed

import (
	"context"
	"errors"
	"math/rand"
	"testing"
)

func isCut(w *Watcher) bool {
	select {
	case <-w.Cut():
		return true
	default:
		return false
	}
}

// TestCutWhileNotReading: a watcher that never reads is cut (Cut closed)
// at exactly the append that puts the commits after the next it would
// read over SlowBytes, counted by the test from the commits' sizes; one that reads
// every commit never is; one resumed from an old cursor is cut only once
// it falls SlowBytes further behind than it started; a cut watcher that
// reads again ends with ErrTooSlow.
func TestCutWhileNotReading(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	h := makeHistory(rng, 200, 40, 2)
	var total int64
	for _, c := range h.commits[:20] {
		total += c.size()
	}
	slowBytes := total / 2
	f := New(Config{SlowBytes: slowBytes, RetainBytes: 1 << 30})
	f.Start("t", h.start)
	stuck, err := f.Watch("t", h.start)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := f.Watch("t", h.start)
	if err != nil {
		t.Fatal(err)
	}
	var unread int64 // bytes of commits the stuck watcher has not read
	cutAt := -1
	var resumed *Watcher
	var resumedFrom int64 // what the resumed one had unread at its start
	var resumedUnread int64
	resumedCutAt := -1
	for i, c := range h.commits {
		f.Append("t", c)
		unread += c.size()
		if resumed != nil {
			resumedUnread += c.size()
		}
		// As take counts it: the bytes after the next commit to read.
		if want := unread-h.commits[0].size() > slowBytes; isCut(stuck) != want {
			t.Fatalf("after commit %d (%d bytes unread, bound %d): cut %v, want %v", i, unread, slowBytes, isCut(stuck), want)
		}
		if cutAt < 0 && isCut(stuck) {
			cutAt = i
		}
		if _, ok, _, err := reader.Next(context.Background(), 0); err != nil || !ok {
			t.Fatalf("reader at %d: %v %v", i, ok, err)
		}
		if isCut(reader) {
			t.Fatalf("the reader was cut at commit %d", i)
		}
		if i == 100 {
			// From the cursor after commit 9: 90 commits behind at once.
			if resumed, err = f.Watch("t", h.commits[9].Cursor()); err != nil {
				t.Fatal(err)
			}
			for _, o := range h.commits[10 : i+1] {
				resumedFrom += o.size()
			}
			resumedUnread = resumedFrom
		}
		if resumed != nil && resumedCutAt < 0 && isCut(resumed) {
			resumedCutAt = i
			if resumedUnread <= resumedFrom+slowBytes {
				t.Fatalf("the resumed watcher cut at %d with %d unread: it started %d behind, bound %d", i, resumedUnread, resumedFrom, slowBytes)
			}
		}
		if resumed != nil && resumedCutAt < 0 && resumedUnread > resumedFrom+slowBytes {
			t.Fatalf("the resumed watcher not cut at %d with %d unread (started %d behind, bound %d)", i, resumedUnread, resumedFrom, slowBytes)
		}
	}
	if cutAt < 0 || resumedCutAt < 0 {
		t.Fatalf("cut at %d, resumed cut at %d: want both cut", cutAt, resumedCutAt)
	}
	if _, _, _, err := stuck.Next(context.Background(), 0); err == nil || !isTooSlow(err) {
		t.Fatalf("the cut watcher's next read: %v, want ErrTooSlow", err)
	}
	for _, w := range []*Watcher{stuck, reader, resumed} {
		w.Close()
	}
	if n := f.Watchers(); n != 0 {
		t.Fatalf("%d watchers after closing all", n)
	}
}

func isTooSlow(err error) bool { return errors.Is(err, ErrTooSlow) }
