package checkpoint_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/store"
)

// TestKeptWithGenerationAndRestored: a publish that keeps the previous
// generation keeps its checkpoint with it (checkpoint.Keep), key by key (a
// key this build does not know survives); a rollback gives it back
// (checkpoint.Restore) and keeps the checkpoint it replaced with the
// generation it unpublishes; the generation published again keeps no copy
// (checkpoint.Drop). The oracle is the checkpoints saved.
func TestKeptWithGenerationAndRestored(t *testing.T) {
	db := openTemp(t)
	cps := []checkpoint.Checkpoint{
		{Topic: "events", EndMark: checkpoint.EndHigh, Partitions: []checkpoint.Partition{{Partition: 0, High: 10, End: 10}, {Partition: 1, Low: 2, Start: 2, High: 5, End: 5}}},
		{Topic: "events", EndMark: checkpoint.EndHigh, Updates: 1, Partitions: []checkpoint.Partition{{Partition: 0, Start: 10, High: 20, End: 20}, {Partition: 1, Low: 2, Start: 5, High: 9, End: 9}}},
	}
	unknown, unknownValue := []byte("from_a_newer_build"), []byte("kept as it is")
	var gens []uint64
	for i, cp := range cps {
		g, err := db.Begin("t")
		if err != nil {
			t.Fatal(err)
		}
		g.Keep(1)
		err = g.Publish(store.TableMeta{Topic: "events"}, func(tx *bolt.Tx) error {
			if err := checkpoint.Save(tx, "t", cp); err != nil {
				return err
			}
			if i > 0 {
				return nil
			}
			return tx.Bucket(checkpoint.Bucket).Bucket([]byte("t")).Put(unknown, unknownValue)
		})
		if err != nil {
			t.Fatal(err)
		}
		gens = append(gens, g.ID())
	}
	kept := func(gen uint64) (checkpoint.Checkpoint, bool, []byte) {
		t.Helper()
		var cp checkpoint.Checkpoint
		var ok bool
		var extra []byte
		err := db.View(func(tx *bolt.Tx) error {
			var err error
			cp, ok, err = store.KeptCheckpoint(tx, "t", gen)
			if ok {
				extra = append([]byte(nil), tx.Bucket(store.BucketGenerations).Bucket(store.GenerationKey(gen)).Bucket(checkpoint.KeptBucket).Get(unknown)...)
			}
			return err
		})
		if err != nil {
			t.Fatalf("KeptCheckpoint(%d): %v", gen, err)
		}
		return cp, ok, extra
	}
	cp, ok, extra := kept(gens[0])
	if !ok || !cmp.Equal(cps[0], cp) || string(extra) != string(unknownValue) {
		t.Fatalf("kept with generation %d: %+v, %v, unknown key %q; want the first checkpoint with its unknown key (-want +got):\n%s", gens[0], cp, ok, extra, cmp.Diff(cps[0], cp))
	}
	if _, ok, _ := kept(gens[1]); ok {
		t.Fatalf("the published generation %d keeps a checkpoint copy", gens[1])
	}

	if _, err := db.Rollback("t", gens[0]); err != nil {
		t.Fatal(err)
	}
	if got, ok := load(t, db, "t"); !ok || !cmp.Equal(cps[0], got) {
		t.Errorf("checkpoint after the rollback (-want +got):\n%s", cmp.Diff(cps[0], got))
	}
	var restoredExtra []byte
	if err := db.View(func(tx *bolt.Tx) error {
		restoredExtra = append([]byte(nil), tx.Bucket(checkpoint.Bucket).Bucket([]byte("t")).Get(unknown)...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if string(restoredExtra) != string(unknownValue) {
		t.Errorf("the unknown key after the rollback: %q, want %q", restoredExtra, unknownValue)
	}
	if _, ok, _ := kept(gens[0]); ok {
		t.Errorf("generation %d, published again, still keeps a checkpoint copy", gens[0])
	}
	if cp, ok, _ := kept(gens[1]); !ok || !cmp.Equal(cps[1], cp) {
		t.Errorf("kept with the unpublished generation %d: %v (-want +got):\n%s", gens[1], ok, cmp.Diff(cps[1], cp))
	}
}
