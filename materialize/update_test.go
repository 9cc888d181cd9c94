package materialize_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// TestUpdateKeepsDefinition: an update's overrides (end mark, memory) are
// its own, the stored definition stays; the checkpoint counts the update,
// records a later capture, and ends where the topic ends.
func TestUpdateKeepsDefinition(t *testing.T) {
	topic := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	broker.TestTopic(t, topic, 2, nil)
	ctx := context.Background()
	put := func(n int) {
		var recs []localkafka.Record
		for i := 0; i < n; i++ {
			recs = append(recs, localkafka.Record{Partition: int32(i % 2), Key: []byte(fmt.Sprintf("k%d", i%5)), Value: []byte(fmt.Sprint(i))})
		}
		if _, err := broker.Produce(ctx, topic, recs); err != nil {
			t.Fatal(err)
		}
	}
	put(10)
	db, err := store.Open(filepath.Join(t.TempDir(), "t.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	log := zerolog.New(zerolog.NewTestWriter(t))
	spec := materialize.Spec{Name: "tb", Topic: topic, End: replay.EndHigh, StallTimeout: 20 * time.Second}
	opts, err := spec.Options(db, broker.Addr, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	first, err := materialize.Rebuild(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	put(7)
	rep, err := materialize.Update(ctx, materialize.UpdateOptions{DB: db, Table: "tb", Brokers: broker.Addr,
		End: replay.EndStable, Memory: 4 << 20, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mode != materialize.ModeInPlace || rep.Replay.Records != 7 {
		t.Fatalf("mode %q, %d records read; want in-place, 7", rep.Mode, rep.Replay.Records)
	}
	got, err := materialize.LoadSpec(db, "tb")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(spec, got); diff != "" {
		t.Fatalf("stored definition changed by an update's overrides (-before +after):\n%s", diff)
	}
	var cp checkpoint.Checkpoint
	if err := db.View(func(tx *bolt.Tx) error {
		var err error
		cp, _, err = checkpoint.Load(tx, "tb")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if cp.Updates != 1 || cp.EndMark != checkpoint.EndStable || !cp.CapturedAt.After(first.Checkpoint.CapturedAt) {
		t.Fatalf("checkpoint after the update: %+v (rebuild's captured at %s)", cp, first.Checkpoint.CapturedAt)
	}
	ends := map[int32]int64{}
	for _, p := range cp.Partitions {
		ends[p.Partition] = p.End
	}
	if diff := cmp.Diff(map[int32]int64{0: 9, 1: 8}, ends); diff != "" {
		t.Fatalf("checkpoint ends (-topic +checkpoint):\n%s", diff)
	}
}
