package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
)

// TestObserverCommits: a copy of the table that applies every Commit the
// observer is handed equals the table read back after each commit (Apply,
// a first and a later Publish, Rollback), with the commit's positions the
// checkpoint committed with it; a DropTable is a CommitDrop; a commit over
// the byte bound comes without changes (Complete false); nothing is
// handed over for another DB's writes or a failed Apply.
func TestObserverCommits(t *testing.T) {
	db := openTemp(t)
	var got []Commit
	db.SetObserver(func(c Commit) { got = append(got, c) }, func(CommitKind, string) CaptureBound { return CaptureBound{Memory: 1 << 20} })
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(int64(seed)))
	copyOf := map[string]string{}
	check := func(what string, kind CommitKind) {
		t.Helper()
		if len(got) != 1 {
			t.Fatalf("%s: %d commits handed over, want 1", what, len(got))
		}
		c := got[0]
		got = nil
		if c.Kind != kind || c.Table != "t" || !c.Complete {
			t.Fatalf("%s: commit %+v, want kind %d of t, complete", what, c, kind)
		}
		for _, ch := range c.Changes {
			if ch.Deleted {
				delete(copyOf, string(ch.Key))
			} else {
				copyOf[string(ch.Key)] = string(ch.Value)
			}
		}
		_, rows := scanAll(t, db, "t")
		if !maps.Equal(copyOf, map[string]string(rows)) {
			t.Fatalf("%s: the copy from the commits (%d keys) differs from the table (%d keys)", what, len(copyOf), len(rows))
		}
		meta, err := db.Table("t")
		if err != nil {
			t.Fatal(err)
		}
		if c.Generation != meta.Generation {
			t.Fatalf("%s: commit generation %d, table %d", what, c.Generation, meta.Generation)
		}
		if err := db.ReadTable("t", func(s *Snapshot) error {
			pos, _, err := s.Positions()
			if !maps.Equal(pos, c.Positions) {
				t.Errorf("%s: commit positions %v, the table's %v", what, c.Positions, pos)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}

	// A first publish: every row is a change. Kept generations allow the
	// rollback below.
	g, err := db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	writeOps(t, g, oracle{}, randomOps(t, seed, 300), 100)
	if err := g.Publish(TableMeta{Topic: "events", Fold: "latest"}, nil); err != nil {
		t.Fatal(err)
	}
	check("first publish", CommitPublish)
	first := g.ID()

	gen := first
	for i := 0; i < 5; i++ {
		end := int64(10 * (i + 1))
		_, err := db.Apply("t", gen, func(r Rows) error {
			for j := 0; j < 40; j++ {
				k := []byte(fmt.Sprintf("key-%03d", rng.Intn(400)))
				if rng.Intn(3) == 0 {
					if err := r.Delete(k); err != nil {
						return err
					}
				} else if err := r.Put(k, []byte(fmt.Sprintf("v%d-%d", i, j))); err != nil {
					return err
				}
			}
			return nil
		}, nil, func(tx *bolt.Tx) error {
			return checkpoint.Save(tx, "t", checkpoint.Checkpoint{Topic: "events", EndMark: checkpoint.EndHigh,
				Partitions: []checkpoint.Partition{{Partition: 0, End: end, High: end}}})
		})
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("apply %d", i), CommitApply)
	}

	// A failed Apply hands nothing over.
	if _, err := db.Apply("t", gen, func(r Rows) error {
		_ = r.Put([]byte("key-new"), []byte("x"))
		return fmt.Errorf("refused")
	}, nil, nil); err == nil {
		t.Fatal("the failing Apply succeeded")
	}
	if len(got) != 0 {
		t.Fatalf("a failed Apply handed over %d commits", len(got))
	}

	g2, err := db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	g2.Keep(2)
	writeOps(t, g2, oracle{}, randomOps(t, seed+1, 300), 100)
	if err := g2.Publish(TableMeta{Topic: "events", Fold: "latest"}, nil); err != nil {
		t.Fatal(err)
	}
	check("second publish", CommitPublish)

	if _, err := db.Rollback("t", 0); err != nil {
		t.Fatal(err)
	}
	check("rollback", CommitRollback)

	// Over the bound: no changes, Complete false.
	db.SetObserver(func(c Commit) { got = append(got, c) }, func(CommitKind, string) CaptureBound { return CaptureBound{Memory: 100} })
	g3, err := db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	writeOps(t, g3, oracle{}, randomOps(t, seed+2, 300), 100)
	if err := g3.Publish(TableMeta{Topic: "events", Fold: "latest"}, nil); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Complete || got[0].Changes != nil || got[0].Kind != CommitPublish {
		t.Fatalf("a publish over the bound: %d commits, %+v", len(got), got)
	}
	got = nil
	if _, err := db.DropTable("t", nil); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Kind != CommitDrop {
		t.Fatalf("drop: %+v", got)
	}
}

// spoolChanges reads a spooled commit's changes back.
func spoolChanges(t *testing.T, sp *Spool) []KeyChange {
	t.Helper()
	r, err := sp.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []KeyChange
	for {
		ch, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, KeyChange{Key: bytes.Clone(ch.Key), Value: bytes.Clone(ch.Value), Deleted: ch.Deleted})
	}
	if int64(len(out)) != sp.Count {
		t.Fatalf("%d changes read from %s, its Spool says %d", len(out), sp.Path, sp.Count)
	}
	return out
}

// diffOf is what changed from old to cur, in key order: a put of each
// key added or changed, a deletion of each removed.
func diffOf(old, cur oracle) []KeyChange {
	keys := map[string]bool{}
	for k := range old {
		keys[k] = true
	}
	for k := range cur {
		keys[k] = true
	}
	var out []KeyChange
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		ov, inOld := old[k]
		nv, inCur := cur[k]
		switch {
		case !inCur:
			out = append(out, KeyChange{Key: []byte(k), Deleted: true})
		case !inOld || ov != nv:
			out = append(out, KeyChange{Key: []byte(k), Value: []byte(nv)})
		}
	}
	return out
}

// feedFiles lists the files in db's FeedDir.
func feedFiles(t *testing.T, db *DB) []string {
	t.Helper()
	ents, err := os.ReadDir(FeedDir(db.Path()))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestObserverSpool: a publish (and a rollback) whose changes pass the
// memory bound hands them over spooled to a file in FeedDir, and the file
// holds exactly the oracle's diff of the two generations (empty values,
// deletions and the changes captured in memory before the spill among
// them); a publish that fails after its walk (a refusing guard, a failing
// hook) or whose changes pass the spool bound leaves no file; and Open
// removes a file a previous process left.
func TestObserverSpool(t *testing.T) {
	db := openTemp(t)
	var got []Commit
	bound := CaptureBound{Memory: 2000, Spool: 1 << 20}
	db.SetObserver(func(c Commit) { got = append(got, c) }, func(CommitKind, string) CaptureBound { return bound })
	seed := uint64(time.Now().UnixNano())
	take := func(what string, kind CommitKind, want []KeyChange) {
		t.Helper()
		if len(got) != 1 {
			t.Fatalf("%s: %d commits handed over, want 1", what, len(got))
		}
		c := got[0]
		got = nil
		if c.Kind != kind || !c.Complete || c.Spool == nil || c.Changes != nil {
			t.Fatalf("%s: commit %+v, want a complete spooled %d", what, c, kind)
		}
		if filepath.Dir(c.Spool.Path) != FeedDir(db.Path()) {
			t.Fatalf("%s: spooled to %s, not in %s", what, c.Spool.Path, FeedDir(db.Path()))
		}
		if fi, err := os.Stat(c.Spool.Path); err != nil || fi.Size() != c.Spool.Bytes {
			t.Fatalf("%s: the spool file: %v, %v; its Spool says %d bytes", what, fi, err, c.Spool.Bytes)
		}
		if diff := cmp.Diff(want, spoolChanges(t, c.Spool), cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("%s: the spooled changes differ from the oracle's diff (-want +got):\n%s", what, diff)
		}
		if err := c.Spool.Remove(); err != nil {
			t.Fatal(err)
		}
	}
	publish := func(seed uint64, keep int, fail func(g *Generation)) (*Generation, oracle, error) {
		g, err := db.Begin("t")
		if err != nil {
			t.Fatal(err)
		}
		g.Keep(keep)
		o := oracle{}
		writeOps(t, g, o, randomOps(t, seed, 2000), 500)
		if fail != nil {
			fail(g)
		}
		return g, o, g.Publish(TableMeta{Topic: "events", Fold: "latest"}, nil)
	}

	_, first, err := publish(seed, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	take("first publish", CommitPublish, diffOf(oracle{}, first))
	_, second, err := publish(seed+1, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	take("second publish", CommitPublish, diffOf(first, second))
	if _, rows := scanAll(t, db, "t"); !maps.Equal(rows, second) {
		t.Fatal("the table is not the oracle's")
	}
	if _, err := db.Rollback("t", 0); err != nil {
		t.Fatal(err)
	}
	take("rollback", CommitRollback, diffOf(second, first))

	// Failed after the walk spooled: nothing handed over, no file.
	g, _, err := publish(seed+2, 2, func(g *Generation) {
		g.Guard(func(Changes) error { return errors.New("refused") })
	})
	if err == nil {
		t.Fatal("a refused publish succeeded")
	}
	_ = g.Abort()
	g, err = db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	writeOps(t, g, oracle{}, randomOps(t, seed+3, 2000), 500)
	if err := g.Publish(TableMeta{}, func(*bolt.Tx) error { return errors.New("hook failed") }); err == nil {
		t.Fatal("a publish whose hook failed succeeded")
	}
	_ = g.Abort()
	if len(got) != 0 {
		t.Fatalf("failed publishes handed over %d commits", len(got))
	}
	if files := feedFiles(t, db); len(files) != 0 {
		t.Fatalf("failed publishes left spool files %v", files)
	}

	// Past the spool bound: incomplete, and no file.
	bound.Spool = 5000
	if _, _, err := publish(seed+4, 2, nil); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Complete || got[0].Spool != nil || got[0].Changes != nil {
		t.Fatalf("a publish past the spool bound: %+v", got)
	}
	got = nil
	if files := feedFiles(t, db); len(files) != 0 {
		t.Fatalf("a publish past the spool bound left spool files %v", files)
	}

	// An Apply never spools: past Memory, it is incomplete.
	bound = CaptureBound{Memory: 50, Spool: 1 << 20}
	meta, err := db.Table("t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Apply("t", meta.Generation, func(r Rows) error {
		for i := range 10 {
			if err := r.Put([]byte(fmt.Sprintf("apply-%d", i)), []byte("v")); err != nil {
				return err
			}
		}
		return nil
	}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Complete || got[0].Spool != nil {
		t.Fatalf("an apply past its memory bound: %+v", got)
	}
	if files := feedFiles(t, db); len(files) != 0 {
		t.Fatalf("an apply left spool files %v", files)
	}

	// A file left by a previous process goes at the next read-write open.
	path := db.Path()
	bound = CaptureBound{Spool: 1 << 20}
	got = nil
	if _, _, err := publish(seed+5, 0, nil); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Spool == nil {
		t.Fatalf("a publish with Memory 0: %+v", got)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db2, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	if _, err := os.Stat(got[0].Spool.Path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the spool file a closed DB left: %v, want it removed by Open", err)
	}
}

// TestObserverSpoolUnwritable: a spool file that cannot be made (FeedDir
// is a regular file) never fails the publish: its commit is handed over
// incomplete, and the file in FeedDir's place is left alone.
func TestObserverSpoolUnwritable(t *testing.T) {
	db := openTemp(t)
	if err := os.WriteFile(FeedDir(db.Path()), []byte("not ours"), 0o600); err != nil {
		t.Fatal(err)
	}
	var got []Commit
	db.SetObserver(func(c Commit) { got = append(got, c) }, func(CommitKind, string) CaptureBound { return CaptureBound{Spool: 1 << 20} })
	g, err := db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	o := oracle{}
	writeOps(t, g, o, randomOps(t, uint64(time.Now().UnixNano()), 200), 100)
	if err := g.Publish(TableMeta{}, nil); err != nil {
		t.Fatalf("a publish whose spool cannot be made: %v", err)
	}
	if len(got) != 1 || got[0].Complete || got[0].Spool != nil {
		t.Fatalf("a publish whose spool cannot be made handed over %+v", got)
	}
	if _, rows := scanAll(t, db, "t"); !maps.Equal(rows, o) {
		t.Fatal("the table is not the oracle's")
	}
	if b, err := os.ReadFile(FeedDir(db.Path())); err != nil || string(b) != "not ours" {
		t.Fatalf("the file in FeedDir's place: %q, %v", b, err)
	}
}
