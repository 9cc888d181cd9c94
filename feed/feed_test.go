package feed

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/api"
)

// history is an oracle: a sequence of commits made from random writes to
// a few partitions, with the table (a plain map) after each.
type history struct {
	commits []Commit
	tables  []map[string]string // tables[i]: the table after commits[i]
	start   api.Cursor
	base    map[string]string
}

func makeHistory(rng *rand.Rand, n, keys int, epoch uint64) *history {
	h := &history{base: map[string]string{}}
	pos := api.Positions{0: 0, 1: 0, 2: 0}
	gen := uint64(1)
	h.start = api.Cursor{Epoch: epoch, Generation: gen, Positions: maps.Clone(pos)}
	table := map[string]string{}
	for i := 0; i < n; i++ {
		// A commit folds a few records: the latest per key wins, as the
		// follower's apply.
		last := map[string]*string{}
		var order []string
		for j := 0; j < 1+rng.Intn(5); j++ {
			p := int32(rng.Intn(3))
			pos[p]++
			k := fmt.Sprintf("k%d", rng.Intn(keys))
			if _, seen := last[k]; !seen {
				order = append(order, k)
			}
			if rng.Intn(5) == 0 {
				last[k] = nil
			} else {
				v := fmt.Sprintf("v%d-%d", i, j)
				last[k] = &v
			}
		}
		c := Commit{Epoch: epoch, Generation: gen, Positions: maps.Clone(pos)}
		for _, k := range order {
			if v := last[k]; v == nil {
				c.Changes = append(c.Changes, Change{Key: []byte(k), Deleted: true})
				delete(table, k)
			} else {
				c.Changes = append(c.Changes, Change{Key: []byte(k), Value: []byte(*v)})
				table[k] = *v
			}
		}
		h.commits = append(h.commits, c)
		h.tables = append(h.tables, maps.Clone(table))
	}
	return h
}

// apply applies c to copy, as a client of the feed does.
func apply(copy map[string]string, c Commit) {
	for _, ch := range c.Changes {
		if ch.Deleted {
			delete(copy, string(ch.Key))
		} else {
			copy[string(ch.Key)] = string(ch.Value)
		}
	}
}

// TestWatchFromEveryCursor: a watcher from the cursor after commit i (or
// the start) that held the oracle's table there holds, after each later
// commit, the oracle's table at that commit, while the commits are
// appended concurrently.
func TestWatchFromEveryCursor(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	h := makeHistory(rng, 200, 20, 7)
	f := New(Config{})
	f.Start("t", h.start)
	half := len(h.commits) / 2
	for _, c := range h.commits[:half] {
		f.Append("t", c)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(h.commits))
	for from := -1; from < half; from += 7 {
		cur, table := h.start, map[string]string{}
		if from >= 0 {
			cur, table = h.commits[from].Cursor(), maps.Clone(h.tables[from])
		}
		w, err := f.Watch("t", cur)
		if err != nil {
			t.Fatalf("watch from commit %d: %v", from, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Close()
			for i := from + 1; i < len(h.commits); i++ {
				c, ok, _, err := w.Next(context.Background(), 0)
				if err != nil || !ok {
					errs <- fmt.Errorf("from %d: commit %d: %v, %v", from, i, ok, err)
					return
				}
				apply(table, c)
				if !maps.Equal(table, h.tables[i]) || !maps.Equal(c.Positions, h.commits[i].Positions) {
					errs <- fmt.Errorf("from %d: after commit %d (positions %v, want %v): copy %v, oracle %v", from, i, c.Positions, h.commits[i].Positions, table, h.tables[i])
					return
				}
			}
		}()
	}
	for _, c := range h.commits[half:] {
		f.Append("t", c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := f.Watchers(); n != 0 {
		t.Errorf("%d watchers after every one closed", n)
	}
}

// TestRetention: with RetainBytes small and RetainFor passed, the oldest
// commits go; a cursor before them is ErrCursorGone, one kept still works;
// within RetainFor nothing goes however many bytes; MaxBytes is a hard
// bound.
func TestRetention(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	h := makeHistory(rng, 100, 50, 3)
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	size := h.commits[0].size()

	t.Run("both bounds", func(t *testing.T) {
		f := New(Config{RetainBytes: 10 * size, RetainFor: time.Minute, MaxBytes: 1 << 40, Now: clock})
		f.Start("t", h.start)
		for _, c := range h.commits {
			f.Append("t", c)
		}
		// All within RetainFor: all kept.
		if _, err := f.Watch("t", h.start); err != nil {
			t.Fatalf("start cursor within RetainFor: %v", err)
		}
		now = now.Add(2 * time.Minute)
		f.Append("t", Commit{Epoch: 3, Generation: 1, Positions: api.Positions{0: 1e6, 1: 1e6, 2: 1e6}})
		if _, err := f.Watch("t", h.start); !errors.Is(err, ErrCursorGone) {
			t.Fatalf("start cursor past RetainFor and RetainBytes: %v, want ErrCursorGone", err)
		}
		l := f.tables["t"]
		if l.bytes < 10*size-size || l.bytes > 10*size+4*size {
			t.Errorf("retained %d bytes, want about RetainBytes %d", l.bytes, 10*size)
		}
		// The oldest kept commit's predecessor (the base) resumes; the
		// watcher then gets exactly the kept commits.
		w, err := f.Watch("t", l.base)
		if err != nil {
			t.Fatalf("base cursor: %v", err)
		}
		c, ok, _, err := w.Next(context.Background(), time.Millisecond)
		if err != nil || !ok || c.Cursor().String() != l.entries[0].c.Cursor().String() {
			t.Fatalf("first commit from the base: %v %v", ok, err)
		}
	})
	t.Run("max bytes", func(t *testing.T) {
		f := New(Config{RetainBytes: 5 * size, RetainFor: time.Hour, MaxBytes: 20 * size, Now: clock})
		f.Start("t", h.start)
		for _, c := range h.commits {
			f.Append("t", c)
			if b := f.tables["t"].bytes; b > 20*size+4*size {
				t.Fatalf("retained %d bytes over MaxBytes %d", b, 20*size)
			}
		}
	})
}

// TestSlowWatcher: a watcher that does not read is cut off with ErrTooSlow
// once more than SlowBytes of commits came after its next one, and its
// last commit's cursor resumes it; another watcher reading along is not
// affected.
func TestSlowWatcher(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	h := makeHistory(rng, 300, 50, 5)
	size := h.commits[0].size()
	f := New(Config{SlowBytes: 20 * size, RetainBytes: 1 << 30})
	f.Start("t", h.start)
	slow, err := f.Watch("t", h.start)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := f.Watch("t", h.start)
	if err != nil {
		t.Fatal(err)
	}
	fastCopy, slowCopy := map[string]string{}, map[string]string{}
	var last api.Cursor = h.start
	for i, c := range h.commits {
		f.Append("t", c)
		if i == 0 {
			// The slow watcher reads the first commit as it comes, then
			// stops reading.
			got, ok, _, err := slow.Next(context.Background(), 0)
			if err != nil || !ok {
				t.Fatalf("slow watcher's first commit: %v %v", ok, err)
			}
			apply(slowCopy, got)
			last = got.Cursor()
		}
		got, ok, _, err := fast.Next(context.Background(), 0)
		if err != nil || !ok {
			t.Fatalf("fast watcher at %d: %v %v", i, ok, err)
		}
		apply(fastCopy, got)
		if !maps.Equal(fastCopy, h.tables[i]) {
			t.Fatalf("fast watcher's copy after %d differs", i)
		}
	}
	read := 0
	for {
		c, ok, _, err := slow.Next(context.Background(), 0)
		if errors.Is(err, ErrTooSlow) {
			break
		}
		if err != nil || !ok {
			t.Fatalf("slow watcher: %v %v", ok, err)
		}
		apply(slowCopy, c)
		last = c.Cursor()
		read++
	}
	if behindAt := int64(len(h.commits)-1-read) * size; read == len(h.commits)-1 || behindAt < 20*size {
		t.Errorf("the slow watcher read %d more commits before its cut: cut too late", read)
	}
	slow.Close()
	w, err := f.Watch("t", last)
	if err != nil {
		t.Fatalf("resume from the cut watcher's last cursor: %v", err)
	}
	defer w.Close()
	// Resumed from an old cursor, it may catch up from as far behind as it
	// starts.
	for i := 1 + read; i < len(h.commits); i++ {
		c, ok, _, err := w.Next(context.Background(), 0)
		if err != nil || !ok {
			t.Fatalf("resumed watcher at %d: %v %v", i, ok, err)
		}
		apply(slowCopy, c)
	}
	if !maps.Equal(slowCopy, h.tables[len(h.tables)-1]) {
		t.Errorf("resumed copy differs from the oracle")
	}
}

// TestEpochAndPending: a commit of a new epoch keeps connected watchers
// going but makes earlier cursors gone; a cursor ahead of the head in the
// head's epoch waits for its commit and skips to it; one never reached is
// ErrCursorGone after PendingWait; MaxWatchers and Close.
func TestEpochAndPending(t *testing.T) {
	start := api.Cursor{Epoch: 1, Generation: 1, Positions: api.Positions{0: 0}}
	c1 := Commit{Epoch: 1, Generation: 1, Positions: api.Positions{0: 1}, Changes: []Change{{Key: []byte("a"), Value: []byte("1")}}}
	c2 := Commit{Epoch: 1, Generation: 1, Positions: api.Positions{0: 2}, Changes: []Change{{Key: []byte("a"), Value: []byte("2")}}}
	c3 := Commit{Epoch: 2, Generation: 2, Positions: api.Positions{0: 1}, Changes: []Change{{Key: []byte("a"), Value: []byte("1")}}}
	f := New(Config{MaxWatchers: 3, PendingWait: 50 * time.Millisecond})
	f.Start("t", start)
	f.Append("t", c1)

	// Pending: the list read c2's state before c2 was handed over.
	pend, err := f.Watch("t", c2.Cursor())
	if err != nil {
		t.Fatalf("cursor ahead of the head: %v", err)
	}
	live, err := f.Watch("t", start)
	if err != nil {
		t.Fatal(err)
	}
	third, err := f.Watch("t", start)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Watch("t", start); !errors.Is(err, ErrTooManyWatchers) {
		t.Fatalf("a fourth watcher with MaxWatchers 3: %v", err)
	}
	f.Append("t", c2)
	f.Append("t", c3)
	got, ok, _, err := pend.Next(context.Background(), 0)
	if err != nil || !ok || got.Cursor().String() != c3.Cursor().String() {
		t.Fatalf("pending watcher: first commit %v %v %v, want c3 (c2 was in its list)", got.Positions, ok, err)
	}
	for _, want := range []Commit{c1, c2, c3} {
		got, ok, _, err := live.Next(context.Background(), 0)
		if err != nil || !ok || got.Cursor().String() != want.Cursor().String() {
			t.Fatalf("live watcher across the epoch: %v %v %v, want %v", got.Cursor(), ok, err, want.Cursor())
		}
	}
	third.Close()
	if _, err := f.Watch("t", c1.Cursor()); !errors.Is(err, ErrCursorGone) {
		t.Fatalf("a cursor of the earlier epoch: %v, want ErrCursorGone", err)
	}
	pend.Close()
	never, err := f.Watch("t", api.Cursor{Epoch: 2, Generation: 2, Positions: api.Positions{0: 9}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := never.Next(context.Background(), 0); !errors.Is(err, ErrCursorGone) {
		t.Fatalf("a cursor never reached: %v, want ErrCursorGone after PendingWait", err)
	}
	never.Close()
	// A heartbeat: no commit within it.
	_, ok, head, err := live.Next(context.Background(), 10*time.Millisecond)
	if err != nil || ok || head.String() != c3.Cursor().String() {
		t.Fatalf("heartbeat: %v %v, head %v", ok, err, head)
	}
	f.Close()
	if _, _, _, err := live.Next(context.Background(), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
	if _, err := f.Watch("t", c3.Cursor()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Watch after Close: %v", err)
	}
}

// TestMaxBytesAcrossTables: the feeds of all tables hold at most MaxBytes
// together, the largest giving up its oldest commits first; a watcher
// whose next commit went is cut off (ErrTooSlow), and resumes from the
// cursor its feed still keeps.
func TestMaxBytesAcrossTables(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	a, b := makeHistory(rng, 200, 30, 1), makeHistory(rng, 20, 30, 2)
	size := a.commits[0].size()
	f := New(Config{RetainBytes: 10 * size, RetainFor: time.Hour, MaxBytes: 60 * size})
	f.Start("a", a.start)
	f.Start("b", b.start)
	w, err := f.Watch("a", a.start)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, c := range b.commits {
		f.Append("b", c)
	}
	for _, c := range a.commits {
		f.Append("a", c)
		if f.total > 60*size+4*size {
			t.Fatalf("the feeds hold %d bytes, over MaxBytes %d", f.total, 60*size)
		}
	}
	if got := f.tables["a"].bytes + f.tables["b"].bytes; got != f.total {
		t.Fatalf("total %d, the logs hold %d", f.total, got)
	}
	// b, the smaller, kept all its commits.
	if _, err := f.Watch("b", b.start); err != nil {
		t.Errorf("the smaller feed lost its oldest commits: %v", err)
	}
	if _, _, _, err := w.Next(context.Background(), 0); !errors.Is(err, ErrTooSlow) {
		t.Fatalf("a watcher whose next commit went: %v, want ErrTooSlow", err)
	}
	if _, err := f.Watch("a", a.start); !errors.Is(err, ErrCursorGone) {
		t.Fatalf("a cursor before the kept commits: %v, want ErrCursorGone", err)
	}
}

// TestWatched: a feed is watched while a watcher is open and for
// RetainFor after the last one closed.
func TestWatched(t *testing.T) {
	now := time.Unix(1000, 0)
	f := New(Config{RetainFor: time.Minute, Now: func() time.Time { return now }})
	start := api.Cursor{Epoch: 1, Generation: 1, Positions: api.Positions{0: 0}}
	f.Start("t", start)
	if f.Watched("t") || f.Watched("none") {
		t.Fatal("watched before any watcher")
	}
	w, err := f.Watch("t", start)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Watched("t") {
		t.Fatal("not watched with a watcher open")
	}
	now = now.Add(time.Hour)
	w.Close()
	now = now.Add(59 * time.Second)
	if !f.Watched("t") {
		t.Fatal("not watched within RetainFor of the last close")
	}
	now = now.Add(2 * time.Second)
	if f.Watched("t") {
		t.Fatal("watched past RetainFor")
	}
}
