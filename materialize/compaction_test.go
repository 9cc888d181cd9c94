package materialize_test

// Tests of a compacted topic whose log compaction has changed, on both
// brokers: kfake compacts on demand, Kafka's log cleaner on its own
// schedule (awaitGone waits for either). Each first shows the condition
// (the offsets gone from the log, read independently), then checks the
// outcome against a fold of what the log holds and of what was produced.

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
)

// foldLog is the latest-value fold of records read from the log, in offset
// order: a tombstone deletes its key, a keyless record is skipped.
func foldLog(recs []*kgo.Record) map[string]string {
	out := map[string]string{}
	for _, r := range recs {
		switch {
		case len(r.Key) == 0:
		case r.Value == nil:
			delete(out, string(r.Key))
		default:
			out[string(r.Key)] = string(r.Value)
		}
	}
	return out
}

// superseded returns, of the records r produced, the offsets compaction
// may remove once tombstones are past their retention (every record but
// the last of its key, and a last record that is a tombstone), and the
// offsets it must keep (the last record of each key that has a value).
func (r *followRig) superseded() (removable, kept []int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := map[string]tRec{}
	for _, rec := range r.produced {
		if l, ok := last[string(rec.k)]; ok {
			removable = append(removable, l.o)
		}
		last[string(rec.k)] = rec
	}
	for _, rec := range last {
		if rec.v == nil {
			removable = append(removable, rec.o)
		} else {
			kept = append(kept, rec.o)
		}
	}
	return removable, kept
}

// TestRebuildCompactedLog: a compacted topic whose superseded values and
// tombstones compaction removed (shown by an independent read: every
// removable offset gone, every key's last value kept) rebuilds to the fold
// of what the log holds, which is the fold of every record produced; the
// replay read fewer records than the offsets it passed (the holes) and
// ended at the high watermark.
func TestRebuildCompactedLog(t *testing.T) {
	r := newFollowRig(t, 1, materialize.Spec{Name: "cmp"}).onTopic(compactedTopic(t, "1000"))
	for round := 0; round < 3; round++ {
		var recs []localkafka.Record
		for k := 0; k < 8; k++ {
			recs = append(recs, localkafka.Record{Key: []byte(fmt.Sprintf("k%d", k)), Value: []byte(fmt.Sprintf("r%d-%d", round, k))})
		}
		r.produce(recs)
	}
	r.produce([]localkafka.Record{{Key: []byte("k1")}, {Key: []byte("k2")}, {Key: []byte("k3")}})
	r.produce([]localkafka.Record{{Key: []byte("k5"), Value: []byte("r3-5")}, {Key: []byte("k9")}})
	removable, kept := r.superseded()
	log := awaitGone(t, r.topic, removable...)
	held := map[int64]bool{}
	for _, rec := range log {
		held[rec.Offset] = true
	}
	for _, o := range kept {
		if !held[o] {
			t.Fatalf("compaction removed offset %d, the last value of its key", o)
		}
	}
	oracle := foldLog(log)
	if want := r.latestOracle(); !cmp.Equal(oracle, want) {
		t.Fatalf("the compacted log folds unlike the records produced (-produced +log):\n%s", cmp.Diff(want, oracle))
	}

	rep := r.rebuild()
	if got := r.rows(); !cmp.Equal(got, oracle) {
		t.Fatalf("rebuild (-log's fold +table):\n%s", cmp.Diff(oracle, got))
	}
	marks := marksOf(t, r.topic)[0]
	high := marks.High
	t.Logf("the log holds %d records over offsets %d..%d (retained low %d, first record %d)", len(log), marks.Low, high, marks.Low, log[0].Offset)
	if end := rep.Checkpoint.Partitions[0].End; end != high {
		t.Fatalf("the rebuild ended at %d, the high watermark is %d", end, high)
	}
	// The cleaner may remove more filler between the read above and the
	// rebuild's, never add records.
	if rep.Replay.Records > int64(len(log)) || rep.Replay.Records >= high {
		t.Fatalf("the rebuild read %d records, the log held %d over %d offsets: want no more than it held, fewer than the offsets",
			rep.Replay.Records, len(log), high)
	}
}

// TestUpdateRefusesRemovedTombstone: after a rebuild of a compacted topic,
// the tombstone of k1 (and k1's value before it) is compacted away: an
// update from the checkpoint would keep k1 forever, so it is refused with
// a *StaleCheckpointError (exit 4) naming delete.retention.ms, and the
// table is unchanged; with RebuildIfNeeded the table is the fold of the
// compacted log, without k1.
func TestUpdateRefusesRemovedTombstone(t *testing.T) {
	r := newFollowRig(t, 1, materialize.Spec{Name: "cmp"}).onTopic(compactedTopic(t, "1000"))
	recs := []localkafka.Record{{Key: []byte("k1"), Value: []byte("a")}, {Key: []byte("k2"), Value: []byte("b")}}
	offs, err := broker.Produce(context.Background(), r.topic, recs)
	if err != nil {
		t.Fatal(err)
	}
	r.add(recs, offs, true)
	r.rebuild()
	before := r.rows()
	if before["k1"] != "a" {
		t.Fatalf("rows %v: want k1 before the tombstone", before)
	}
	log := awaitGone(t, r.topic, offs[0], r.produceTombstoneAfter("k1"))

	update := func(rebuild bool) (materialize.Report, error) {
		return materialize.Update(context.Background(), materialize.UpdateOptions{
			DB: r.db, Table: "cmp", Brokers: broker.Addr, Log: r.log, RebuildIfNeeded: rebuild})
	}
	_, err = update(false)
	staleFollow(t, err, materialize.OpUpdate, `update of table "cmp"`, "compacted", "older than delete.retention.ms=1000")
	if got := r.rows(); !cmp.Equal(got, before) {
		t.Fatalf("a refused update changed the table: %s", cmp.Diff(before, got))
	}
	rep, err := update(true)
	if err != nil {
		t.Fatal(err)
	}
	want := foldLog(log)
	if got := r.rows(); rep.Mode != materialize.ModeRebuilt || !cmp.Equal(got, want) || got["k1"] != "" {
		t.Fatalf("mode %q; after the rebuild (-log's fold +table):\n%s", rep.Mode, cmp.Diff(want, got))
	}
	if oracle := r.latestOracle(); !cmp.Equal(want, oracle) {
		t.Fatalf("the compacted log folds unlike the records produced (-produced +log):\n%s", cmp.Diff(oracle, want))
	}
}
