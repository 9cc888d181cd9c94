package feed

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// testSpool is a Spool whose changes are in memory and whose file is a
// real one (its contents unused): Open fails once it is removed, as a
// store spool's would, so that a watcher reading a removed one shows.
type testSpool struct {
	path    string
	changes []Change
	size    int64
}

func (s *testSpool) Open() (ChangeReader, error) {
	f, err := os.Open(s.path)
	if err != nil {
		return nil, err
	}
	return &testReader{f: f, changes: s.changes}, nil
}
func (s *testSpool) Count() int64  { return int64(len(s.changes)) }
func (s *testSpool) Size() int64   { return s.size }
func (s *testSpool) Path() string  { return s.path }
func (s *testSpool) Remove() error { return os.Remove(s.path) }

type testReader struct {
	f       *os.File
	changes []Change
}

func (r *testReader) Next() (Change, error) {
	if len(r.changes) == 0 {
		return Change{}, io.EOF
	}
	ch := r.changes[0]
	r.changes = r.changes[1:]
	return ch, nil
}
func (r *testReader) Close() error { return r.f.Close() }

// spooled moves the changes of h's commits into spool files in dir, each
// said to be size bytes.
func spooled(t *testing.T, h *history, dir string, size int64) []*testSpool {
	t.Helper()
	var out []*testSpool
	for i := range h.commits {
		p := filepath.Join(dir, strconv.Itoa(i)+".changes")
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		sp := &testSpool{path: p, changes: h.commits[i].Changes, size: size}
		h.commits[i].Changes, h.commits[i].Spool = nil, sp
		out = append(out, sp)
	}
	return out
}

func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Stat(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// applySpooled applies c, spooled or not, to copy.
func applySpooled(t *testing.T, copy map[string]string, c Commit) {
	t.Helper()
	if c.Spool == nil {
		apply(copy, c)
		return
	}
	r, err := c.Spool.Open()
	if err != nil {
		t.Fatalf("open the spool of commit %s: %v", c.Cursor(), err)
	}
	defer r.Close()
	for {
		ch, err := r.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		apply(copy, Commit{Changes: []Change{ch}})
	}
}

// TestSpooledRetention: spooled commits count in memory only their fixed
// cost (RetainBytes and MaxBytes do not drop them), and on disk their
// files' bytes, at most SpoolMaxBytes for all tables: past it, the oldest
// spooled commits of the feed with the most go, and so do their files. A
// watcher reads a spooled commit's changes from its file, and its copy is
// the oracle's; a watcher whose next commit went is cut off. A restart or
// stop of a feed removes the files it retained, and an Append without a
// feed removes the commit's.
func TestSpooledRetention(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	h := makeHistory(rng, 12, 40, 1)
	const size = 1000
	spools := spooled(t, h, t.TempDir(), size)
	// Retention would drop nothing (an hour), RetainBytes and MaxBytes
	// are far below the spooled bytes: only SpoolMaxBytes drops.
	f := New(Config{RetainBytes: 2000, MaxBytes: 4000, RetainFor: time.Hour, SpoolMaxBytes: 5 * size, SlowBytes: 100 * size})
	f.Start("t", h.start)
	slow, err := f.Watch("t", h.start)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	for i, c := range h.commits {
		f.Append("t", c)
		if f.spooled > 5*size {
			t.Fatalf("after commit %d the feeds retain %d spooled bytes, over SpoolMaxBytes", i, f.spooled)
		}
		if f.total > 4000 {
			t.Fatalf("after commit %d the feeds hold %d bytes in memory", i, f.total)
		}
	}
	for i, sp := range spools {
		if want := i >= len(spools)-5; exists(t, sp.path) != want {
			t.Errorf("commit %d's spool file exists %v, want %v (the last 5 retained)", i, !want, want)
		}
	}
	if _, _, _, err := slow.Next(context.Background(), 0); !errors.Is(err, ErrTooSlow) {
		t.Fatalf("a watcher whose next commit went: %v, want ErrTooSlow", err)
	}
	from := len(h.commits) - 6
	w, err := f.Watch("t", h.commits[from].Cursor())
	if err != nil {
		t.Fatal(err)
	}
	copyOf := maps.Clone(h.tables[from])
	for i := from + 1; i < len(h.commits); i++ {
		c, ok, _, err := w.Next(context.Background(), 0)
		if err != nil || !ok || c.Spool == nil {
			t.Fatalf("commit %d: %+v, %v, %v", i, c, ok, err)
		}
		applySpooled(t, copyOf, c)
		if !maps.Equal(copyOf, h.tables[i]) {
			t.Fatalf("after commit %d: copy %v, oracle %v", i, copyOf, h.tables[i])
		}
	}
	w.Close()

	// A restart of the feed lets its files go.
	f.Start("t", h.commits[len(h.commits)-1].Cursor())
	for i, sp := range spools {
		if exists(t, sp.path) {
			t.Errorf("commit %d's spool file outlived its feed's restart", i)
		}
	}
	if f.spooled != 0 || f.total != 0 {
		t.Errorf("after the restart the feeds retain %d spooled bytes and %d in memory", f.spooled, f.total)
	}
	// An Append to no feed removes the commit's file.
	h2 := makeHistory(rng, 1, 10, 2)
	sp2 := spooled(t, h2, t.TempDir(), size)
	if f.Append("none", h2.commits[0]) || exists(t, sp2[0].path) {
		t.Error("an append to a table without a feed kept its spool file")
	}
	// A stop lets them go too.
	h3 := makeHistory(rng, 2, 10, 3)
	sp3 := spooled(t, h3, t.TempDir(), size)
	f.Start("u", h3.start)
	for _, c := range h3.commits {
		f.Append("u", c)
	}
	f.Stop("u")
	for _, sp := range sp3 {
		if exists(t, sp.path) {
			t.Error("a spool file outlived its feed's stop")
		}
	}
}

// TestSpooledWatcherMidStream: a watcher that was handed a spooled commit
// reads it to the end though the feed drops it meanwhile (its file is
// removed only when the watcher lets go of it, at its next Next or
// Close); a feed's Close lets its files go once their watchers are done.
func TestSpooledWatcherMidStream(t *testing.T) {
	rng := rand.New(rand.NewSource(6))
	h := makeHistory(rng, 4, 40, 1)
	const size = 1000
	spools := spooled(t, h, t.TempDir(), size)
	f := New(Config{RetainFor: time.Hour, SpoolMaxBytes: size, SlowBytes: 100 * size})
	f.Start("t", h.start)
	w, err := f.Watch("t", h.start)
	if err != nil {
		t.Fatal(err)
	}
	f.Append("t", h.commits[0])
	c, ok, _, err := w.Next(context.Background(), 0)
	if err != nil || !ok || c.Spool != spools[0] {
		t.Fatalf("the first commit: %+v, %v, %v", c, ok, err)
	}
	r, err := c.Spool.Open()
	if err != nil {
		t.Fatal(err)
	}
	first, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	// The next append passes SpoolMaxBytes: the first commit goes from
	// the log, but its watcher still holds it.
	f.Append("t", h.commits[1])
	if !exists(t, spools[0].path) {
		t.Fatal("the spool file of a commit a watcher reads was removed")
	}
	copyOf := maps.Clone(h.base)
	apply(copyOf, Commit{Changes: []Change{first}})
	for {
		ch, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		apply(copyOf, Commit{Changes: []Change{ch}})
	}
	r.Close()
	if !maps.Equal(copyOf, h.tables[0]) {
		t.Fatalf("the copy after the dropped commit: %v, oracle %v", copyOf, h.tables[0])
	}
	// A second watcher of the first commit's cursor can also be handed
	// a file at the same time.
	w2, err := f.Watch("t", h.commits[0].Cursor())
	if err != nil {
		t.Fatal(err)
	}
	c2, ok, _, err := w2.Next(context.Background(), 0)
	if err != nil || !ok || c2.Spool != spools[1] {
		t.Fatalf("the second commit: %+v, %v, %v", c2, ok, err)
	}
	// The first watcher's next Next lets go of the first file; the log
	// kept the second commit, which it then reads.
	c, ok, _, err = w.Next(context.Background(), 0)
	if err != nil || !ok || c.Spool != spools[1] {
		t.Fatalf("the second commit to the first watcher: %+v, %v, %v", c, ok, err)
	}
	if exists(t, spools[0].path) {
		t.Fatal("the dropped commit's spool file outlived its last reader")
	}
	// The feeds close: the second file stays while both watchers hold it.
	f.Close()
	if !exists(t, spools[1].path) {
		t.Fatal("a spool file two watchers hold was removed at Close")
	}
	w.Close()
	if !exists(t, spools[1].path) {
		t.Fatal("a spool file a watcher holds was removed at another's Close")
	}
	w2.Close()
	if exists(t, spools[1].path) {
		t.Fatal("a spool file outlived its feed's close and its watchers")
	}
}

// TestSpooledSlowWatcher: a watcher falls behind by the bytes of the
// spooled changes after it, though they take no memory: past SlowBytes of
// them it is cut off, while the feeds' memory stays at the commits' fixed
// cost.
func TestSpooledSlowWatcher(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	h := makeHistory(rng, 5, 40, 1)
	const size = 1000
	spooled(t, h, t.TempDir(), size)
	f := New(Config{RetainFor: time.Hour, SlowBytes: 5 * size / 2})
	f.Start("t", h.start)
	w, err := f.Watch("t", h.start)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	f.Append("t", h.commits[0])
	if _, ok, _, err := w.Next(context.Background(), 0); err != nil || !ok {
		t.Fatalf("the first commit: %v, %v", ok, err)
	}
	for _, c := range h.commits[1:] {
		f.Append("t", c)
	}
	if f.total > 5*200 {
		t.Fatalf("the feeds hold %d bytes in memory for 5 spooled commits", f.total)
	}
	if _, _, _, err := w.Next(context.Background(), 0); !errors.Is(err, ErrTooSlow) {
		t.Fatalf("a watcher 3 spooled commits (%d bytes) behind, SlowBytes %d: %v, want ErrTooSlow", 3*size, 5*size/2, err)
	}
}
