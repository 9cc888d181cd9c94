package store

import (
	"fmt"
	"maps"
	"math/rand"
	"testing"
	"time"

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
	db.SetObserver(func(c Commit) { got = append(got, c) }, func(CommitKind, string) int64 { return 1 << 20 })
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
	db.SetObserver(func(c Commit) { got = append(got, c) }, func(CommitKind, string) int64 { return 100 })
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
