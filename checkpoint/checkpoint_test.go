package checkpoint_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/store"
)

func openTemp(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "k.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func load(t *testing.T, db *store.DB, table string) (checkpoint.Checkpoint, bool) {
	t.Helper()
	var cp checkpoint.Checkpoint
	var ok bool
	err := db.View(func(tx *bolt.Tx) error {
		var err error
		cp, ok, err = checkpoint.Load(tx, table)
		return err
	})
	if err != nil {
		t.Fatalf("Load(%q): %v", table, err)
	}
	return cp, ok
}

func TestSaveLoadReplaceDelete(t *testing.T) {
	db := openTemp(t)
	if _, ok := load(t, db, "t"); ok {
		t.Fatal("checkpoint before any Save")
	}

	first := checkpoint.Checkpoint{Topic: "events", EndMark: checkpoint.EndHigh, Partitions: []checkpoint.Partition{
		{Partition: 300, Low: 0, Start: 0, High: 1 << 40, End: 1 << 40},
		{Partition: 2, Low: 5, Start: 7, High: 9, End: 9},
		{Partition: 0, Low: 0, Start: 0, High: 0, End: 0},
		{Partition: 256, Low: 1, Start: 2, High: 3, End: 3},
	}}
	// The oracle: the same partitions, sorted by number by hand.
	wantFirst := checkpoint.Checkpoint{Topic: "events", EndMark: checkpoint.EndHigh, Partitions: []checkpoint.Partition{
		first.Partitions[2], first.Partitions[1], first.Partitions[3], first.Partitions[0],
	}}
	other := checkpoint.Checkpoint{Topic: "other", EndMark: checkpoint.EndStable, Partitions: []checkpoint.Partition{{Partition: 1, High: 4, End: 4, Start: 1}}}
	save := func(table string, cp checkpoint.Checkpoint) {
		t.Helper()
		if err := db.Bolt().Update(func(tx *bolt.Tx) error { return checkpoint.Save(tx, table, cp) }); err != nil {
			t.Fatalf("Save(%q): %v", table, err)
		}
	}
	save("t", first)
	save("u", other)
	if got, ok := load(t, db, "t"); !ok || !cmp.Equal(wantFirst, got) {
		t.Errorf("Load(t) = %+v, %v; diff (-want +got):\n%s", got, ok, cmp.Diff(wantFirst, got))
	}

	// Replacing drops partitions the new checkpoint does not list.
	second := checkpoint.Checkpoint{Topic: "events", EndMark: checkpoint.EndStable, Partitions: []checkpoint.Partition{{Partition: 2, Low: 9, Start: 9, High: 12, End: 12}}}
	save("t", second)
	if got, ok := load(t, db, "t"); !ok || !cmp.Equal(second, got) {
		t.Errorf("after replace (-want +got):\n%s", cmp.Diff(second, got))
	}
	if got, ok := load(t, db, "u"); !ok || !cmp.Equal(other, got) {
		t.Errorf("other table's checkpoint changed (-want +got):\n%s", cmp.Diff(other, got))
	}

	// No partitions at all is a valid (empty topic) checkpoint.
	save("empty", checkpoint.Checkpoint{Topic: "e", EndMark: checkpoint.EndHigh})
	if got, ok := load(t, db, "empty"); !ok || got.Topic != "e" || len(got.Partitions) != 0 {
		t.Errorf("empty checkpoint: %+v, %v", got, ok)
	}

	if err := db.Bolt().Update(func(tx *bolt.Tx) error {
		if err := checkpoint.Delete(tx, "t"); err != nil {
			return err
		}
		return checkpoint.Delete(tx, "never-saved")
	}); err != nil {
		t.Fatal(err)
	}
	if _, ok := load(t, db, "t"); ok {
		t.Error("checkpoint survives Delete")
	}
	if _, ok := load(t, db, "u"); !ok {
		t.Error("Delete(t) removed u")
	}
}

func TestSaveRejectsImpossibleCheckpoints(t *testing.T) {
	db := openTemp(t)
	ok := checkpoint.Checkpoint{Topic: "t", EndMark: checkpoint.EndHigh}
	for _, tc := range []struct {
		name  string
		table string
		cp    checkpoint.Checkpoint
	}{
		{"empty table", "", ok},
		{"empty topic", "t", checkpoint.Checkpoint{EndMark: checkpoint.EndHigh}},
		{"bad end mark", "t", checkpoint.Checkpoint{Topic: "t", EndMark: "latest"}},
		{"duplicate partition", "t", checkpoint.Checkpoint{Topic: "t", EndMark: checkpoint.EndHigh, Partitions: []checkpoint.Partition{{Partition: 1}, {Partition: 1}}}},
		{"negative partition", "t", checkpoint.Checkpoint{Topic: "t", EndMark: checkpoint.EndHigh, Partitions: []checkpoint.Partition{{Partition: -1}}}},
		{"negative offset", "t", checkpoint.Checkpoint{Topic: "t", EndMark: checkpoint.EndHigh, Partitions: []checkpoint.Partition{{Low: -1}}}},
		{"start past end", "t", checkpoint.Checkpoint{Topic: "t", EndMark: checkpoint.EndHigh, Partitions: []checkpoint.Partition{{Start: 5, End: 4, High: 9}}}},
		{"end past high", "t", checkpoint.Checkpoint{Topic: "t", EndMark: checkpoint.EndHigh, Partitions: []checkpoint.Partition{{Start: 0, End: 10, High: 9}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := db.Bolt().Update(func(tx *bolt.Tx) error { return checkpoint.Save(tx, tc.table, tc.cp) })
			if !errors.Is(err, checkpoint.ErrInvalid) {
				t.Errorf("Save = %v, want ErrInvalid", err)
			}
		})
	}
}

// TestSaveInPublishHookIsAtomic: the checkpoint commits with the table, and a
// failing publish commits neither.
func TestSaveInPublishHookIsAtomic(t *testing.T) {
	db := openTemp(t)
	build := func(value string) *store.Generation {
		t.Helper()
		g, err := db.Begin("t")
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Write(func(tb store.Rows) error { return tb.Put([]byte("k"), []byte(value)) }); err != nil {
			t.Fatal(err)
		}
		return g
	}
	cp1 := checkpoint.Checkpoint{Topic: "events", EndMark: checkpoint.EndHigh, Partitions: []checkpoint.Partition{{Partition: 0, High: 10, End: 10}}}
	g := build("v1")
	if err := g.Publish(store.TableMeta{Topic: "events"}, func(tx *bolt.Tx) error { return checkpoint.Save(tx, "t", cp1) }); err != nil {
		t.Fatal(err)
	}
	check := func(wantValue string, wantCP checkpoint.Checkpoint) {
		t.Helper()
		// Table and checkpoint read in one transaction, as a resuming
		// rebuild would.
		err := db.View(func(tx *bolt.Tx) error {
			cp, ok, err := checkpoint.Load(tx, "t")
			if err != nil || !ok || !cmp.Equal(wantCP, cp) {
				t.Errorf("checkpoint %+v, %v, %v; want %+v", cp, ok, err, wantCP)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if v, err := db.Get("t", []byte("k")); err != nil || string(v) != wantValue {
			t.Errorf("row = %q, %v; want %q", v, err, wantValue)
		}
	}
	check("v1", cp1)

	// A hook that saves and then fails: neither the rows nor the checkpoint.
	cp2 := checkpoint.Checkpoint{Topic: "events", EndMark: checkpoint.EndHigh, Partitions: []checkpoint.Partition{{Partition: 0, Start: 10, High: 20, End: 20}}}
	g2 := build("v2")
	boom := errors.New("boom")
	err := g2.Publish(store.TableMeta{Topic: "events"}, func(tx *bolt.Tx) error {
		if err := checkpoint.Save(tx, "t", cp2); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Publish = %v, want boom", err)
	}
	check("v1", cp1)
	// An invalid checkpoint refuses the publish the same way.
	if err := g2.Publish(store.TableMeta{}, func(tx *bolt.Tx) error { return checkpoint.Save(tx, "t", checkpoint.Checkpoint{}) }); !errors.Is(err, checkpoint.ErrInvalid) {
		t.Fatalf("Publish with invalid checkpoint = %v", err)
	}
	check("v1", cp1)

	// The retry commits both.
	if err := g2.Publish(store.TableMeta{Topic: "events"}, func(tx *bolt.Tx) error { return checkpoint.Save(tx, "t", cp2) }); err != nil {
		t.Fatal(err)
	}
	check("v2", cp2)
}

// TestTopicID: a topic ID is saved as 16 bytes under topic_id and loaded
// back; the zero ID (unknown) writes no key; a topic_id of another length
// is corrupt.
func TestTopicID(t *testing.T) {
	db := openTemp(t)
	id := [16]byte{0x8f, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0xff}
	cp := checkpoint.Checkpoint{Topic: "events", EndMark: checkpoint.EndHigh, TopicID: id, Partitions: []checkpoint.Partition{{Partition: 0, High: 3, End: 3}}}
	raw := func(table string) []byte {
		var v []byte
		if err := db.View(func(tx *bolt.Tx) error {
			v = append([]byte(nil), tx.Bucket(store.BucketCheckpoints).Bucket([]byte(table)).Get([]byte("topic_id"))...)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if err := db.Bolt().Update(func(tx *bolt.Tx) error { return checkpoint.Save(tx, "t", cp) }); err != nil {
		t.Fatal(err)
	}
	if got, ok := load(t, db, "t"); !ok || !cmp.Equal(cp, got) {
		t.Fatalf("(-want +got):\n%s", cmp.Diff(cp, got))
	}
	if v := raw("t"); string(v) != string(id[:]) {
		t.Fatalf("topic_id stored as %x, want %x", v, id)
	}
	unknown := cp
	unknown.TopicID = [16]byte{}
	if err := db.Bolt().Update(func(tx *bolt.Tx) error { return checkpoint.Save(tx, "u", unknown) }); err != nil {
		t.Fatal(err)
	}
	if v := raw("u"); len(v) != 0 {
		t.Fatalf("the zero topic ID was stored: %x", v)
	}
	if got, _ := load(t, db, "u"); got.TopicID != ([16]byte{}) {
		t.Fatalf("loaded topic ID %x, want zero", got.TopicID)
	}
	if err := db.Bolt().Update(func(tx *bolt.Tx) error {
		return tx.Bucket(store.BucketCheckpoints).Bucket([]byte("t")).Put([]byte("topic_id"), []byte{1, 2, 3})
	}); err != nil {
		t.Fatal(err)
	}
	err := db.View(func(tx *bolt.Tx) error { _, _, err := checkpoint.Load(tx, "t"); return err })
	if !errors.Is(err, checkpoint.ErrInvalid) {
		t.Fatalf("a 3-byte topic_id loaded: %v", err)
	}
}

// TestShardFields: a shard's partition count and subset mark are saved and
// loaded back; a table over all partitions with an unknown count writes
// neither key; a malformed count is corrupt.
func TestShardFields(t *testing.T) {
	db := openTemp(t)
	shard := checkpoint.Checkpoint{Topic: "events", EndMark: checkpoint.EndHigh, PartitionsOfTopic: 6, Subset: true,
		Partitions: []checkpoint.Partition{{Partition: 2, High: 3, End: 3}, {Partition: 4, High: 1, End: 1}}}
	whole := checkpoint.Checkpoint{Topic: "events", EndMark: checkpoint.EndHigh, Partitions: []checkpoint.Partition{{Partition: 0, High: 3, End: 3}}}
	if err := db.Bolt().Update(func(tx *bolt.Tx) error {
		if err := checkpoint.Save(tx, "shard", shard); err != nil {
			return err
		}
		return checkpoint.Save(tx, "whole", whole)
	}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]checkpoint.Checkpoint{"shard": shard, "whole": whole} {
		if got, ok := load(t, db, name); !ok || !cmp.Equal(want, got) {
			t.Fatalf("%s (-want +got):\n%s", name, cmp.Diff(want, got))
		}
	}
	if err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(store.BucketCheckpoints).Bucket([]byte("whole"))
		if b.Get([]byte("partitions_of_topic")) != nil || b.Get([]byte("subset")) != nil {
			t.Errorf("a whole table with an unknown count stored shard keys")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	bad := shard
	bad.PartitionsOfTopic = -1
	if err := db.Bolt().Update(func(tx *bolt.Tx) error { return checkpoint.Save(tx, "bad", bad) }); !errors.Is(err, checkpoint.ErrInvalid) {
		t.Fatalf("a negative count saved: %v", err)
	}
	if err := db.Bolt().Update(func(tx *bolt.Tx) error {
		return tx.Bucket(store.BucketCheckpoints).Bucket([]byte("shard")).Put([]byte("partitions_of_topic"), []byte{1})
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.View(func(tx *bolt.Tx) error { _, _, err := checkpoint.Load(tx, "shard"); return err }); !errors.Is(err, checkpoint.ErrInvalid) {
		t.Fatalf("a 1-byte partitions_of_topic loaded: %v", err)
	}
}
