package store

import (
	"maps"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
)

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestChangedAfterEveryCommit: the channel Changed hands out is closed by
// the next commit that changes the table (Apply, Publish, Rollback,
// DropTable) and by nothing else (a commit of another table, a read), and
// a channel taken after a commit waits for the next one. Positions reads
// the checkpoint committed with the rows.
func TestChangedAfterEveryCommit(t *testing.T) {
	db := openTemp(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	_, g := publishOps(t, db, "t", seed, 20)
	publishOps(t, db, "other", seed+1, 5)

	ch := db.Changed("t")
	if isClosed(ch) {
		t.Fatal("closed before any change")
	}
	publishOps(t, db, "other", seed+2, 5)
	if _, err := db.Table("t"); err != nil {
		t.Fatal(err)
	}
	if isClosed(ch) {
		t.Fatal("closed by another table's publish or by a read")
	}
	if db.Changed("t") != ch {
		t.Fatal("two waiters of one table got two channels")
	}
	want := map[int32]int64{0: 11, 3: 7}
	_, err := db.Apply("t", g.ID(), func(r Rows) error { return r.Put([]byte("k"), []byte("v")) }, nil, func(tx *bolt.Tx) error {
		return checkpoint.Save(tx, "t", checkpoint.Checkpoint{Topic: "topic", EndMark: checkpoint.EndHigh,
			Partitions: []checkpoint.Partition{{Partition: 0, End: 11, High: 11}, {Partition: 3, End: 7, High: 7}}})
	})
	if err != nil {
		t.Fatal(err)
	}
	if !isClosed(ch) {
		t.Fatal("not closed by an Apply")
	}
	err = db.ReadTable("t", func(s *Snapshot) error {
		got, ok, err := s.Positions()
		if err != nil || !ok || !maps.Equal(got, want) {
			t.Errorf("Positions = %v, %v, %v; want %v", got, ok, err, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	ch = db.Changed("t")
	if isClosed(ch) {
		t.Fatal("a channel taken after the Apply is already closed")
	}
	publishOps(t, db, "t", seed+3, 10)
	if !isClosed(ch) {
		t.Fatal("not closed by a Publish")
	}
	ch = db.Changed("t")
	if _, err := db.DropTable("t", nil); err != nil {
		t.Fatal(err)
	}
	if !isClosed(ch) {
		t.Fatal("not closed by a DropTable")
	}
	ch = db.Changed("other")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if !isClosed(ch) || !isClosed(db.Changed("other")) {
		t.Fatal("Close leaves a waiter waiting")
	}
}
