package tableview_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/internal/tableview"
	"github.com/kmaterialize/kmaterialize/store"
)

// TestFromSnapshot: a table published three times with keep 2 shows the
// metadata and checkpoint of its published generation, and its two kept
// generations newest first, each with the checkpoint it was published with.
// The oracle is what was published.
func TestFromSnapshot(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "k.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	at := time.Date(2026, 12, 2, 18, 0, 0, 123456789, time.UTC)
	var metas []store.TableMeta
	var cps []checkpoint.Checkpoint
	var gens []uint64
	for i := range 3 {
		g, err := db.Begin("t")
		if err != nil {
			t.Fatal(err)
		}
		g.Keep(2)
		m := store.TableMeta{Topic: "events", Fold: "latest", Params: map[string]string{"n": "1"}, Records: int64(10 + i),
			Skipped: int64(i), SkippedByReason: map[string]int64{"null_key": int64(i)}, Duration: time.Duration(i+1) * time.Millisecond,
			Until: &store.Bound{Offsets: map[int32]int64{0: int64(5 + i)}}}
		cp := checkpoint.Checkpoint{Topic: "events", EndMark: checkpoint.EndHigh, Updates: int64(i), CapturedAt: at.Add(time.Duration(i) * time.Second),
			Partitions: []checkpoint.Partition{{Partition: 0, Start: int64(i), High: int64(5 + i), End: int64(5 + i)}}}
		if err := g.Publish(m, func(tx *bolt.Tx) error { return checkpoint.Save(tx, "t", cp) }); err != nil {
			t.Fatal(err)
		}
		metas, cps, gens = append(metas, m), append(cps, cp), append(gens, g.ID())
	}
	var got api.Table
	var stored store.TableMeta
	if err := db.ReadTable("t", func(s *store.Snapshot) error {
		stored = s.Meta
		got, err = tableview.FromSnapshot(s)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	want := tableview.FromMeta(stored)
	want.EndMark, want.UpdatesSinceRebuild, want.CheckpointCapturedAt = cps[2].EndMark, cps[2].Updates, cps[2].CapturedAt
	want.Partitions = tableview.Partitions(cps[2].Partitions)
	for _, i := range []int{1, 0} {
		m := metas[i]
		want.Kept = append(want.Kept, api.KeptGeneration{Generation: gens[i], Topic: m.Topic, Fold: m.Fold, Params: m.Params,
			Records: m.Records, Skipped: m.Skipped, SkippedByReason: m.SkippedByReason, Duration: m.Duration,
			Until: tableview.Bound(m.Until), EndMark: cps[i].EndMark, Partitions: tableview.Partitions(cps[i].Partitions),
			UpdatesSinceRebuild: cps[i].Updates, CheckpointCapturedAt: cps[i].CapturedAt})
	}
	// What the publish itself recorded (when, what changed) is the
	// stored meta's; the rest is the test's.
	for i := range want.Kept {
		want.Kept[i].BuiltAt, want.Kept[i].Changes = got.Kept[i].BuiltAt, got.Kept[i].Changes
	}
	if got.Generation != gens[2] || got.Records != 12 || got.Until == nil || got.Until.Offsets[0] != 7 {
		t.Errorf("published generation: %+v", got)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("FromSnapshot (-want +got):\n%s", diff)
	}
}

// TestFromMetaNoCheckpoint: a table without checkpoint (an import) has no
// partitions, an empty list on the wire.
func TestFromMetaNoCheckpoint(t *testing.T) {
	got := tableview.FromMeta(store.TableMeta{Name: "t", Generation: 1})
	if got.Partitions == nil || len(got.Partitions) != 0 || got.Until != nil || got.Changes != nil {
		t.Errorf("FromMeta: %+v", got)
	}
}
