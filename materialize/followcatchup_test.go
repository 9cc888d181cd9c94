package materialize_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// TestFollowCatchUpFoldsBatches: a latest table whose follower starts far
// behind (every record produced before it starts, read in batches of 37
// records) folds many batches into each commit. Few keys are updated many
// times, deleted and put again, with null keys among them, across the
// batches and within them. With the default budget and with a budget a
// few batches fill (so that it commits in the middle of the catch-up too),
// the table equals the oracle, its key count is exact and its record count
// is every record read; then the follower, caught up, applies what comes
// next as well.
func TestFollowCatchUpFoldsBatches(t *testing.T) {
	for _, tc := range []struct {
		name          string
		maxApplyBytes int64
	}{{"default budget", 0}, {"small budget", 2 << 10}} {
		t.Run(tc.name, func(t *testing.T) {
			const parts = 3
			r := newFollowRig(t, parts, materialize.Spec{Name: "t"})
			rng := testRand(t)
			r.produce(randomRecords(rng, parts, 200, "before"))
			r.rebuild()
			var recs []localkafka.Record
			for i := range 3000 {
				p := int32(rng.Intn(parts))
				rec := localkafka.Record{Partition: p, Key: []byte(fmt.Sprintf("p%d-k%d", p, rng.Intn(8)))}
				switch x := rng.Intn(20); {
				case x == 0:
					rec.Key = nil
					rec.Value = []byte("nokey")
				case x < 4:
					// a tombstone, often of a key put again later
				default:
					rec.Value = []byte(fmt.Sprintf("v%d-%d", i, rng.Intn(1000)))
				}
				recs = append(recs, rec)
			}
			r.produce(recs)

			ctx, cancel := context.WithCancel(context.Background())
			r.cancel, r.done = cancel, make(chan error, 1)
			go func() {
				r.done <- materialize.KeepCurrent(ctx, materialize.FollowOptions{
					DB: r.db, Spec: r.spec, Status: r.status, Log: r.log,
					Replay:   replay.Config{Brokers: broker.Addr, StallTimeout: 20 * time.Second, BatchRecords: 37},
					Interval: 50 * time.Millisecond, Refresh: 100 * time.Millisecond,
					MaxApplyBytes: tc.maxApplyBytes,
				})
			}()
			t.Cleanup(func() { r.stop() })
			r.awaitEnds(r.highs(parts))
			r.checkAgainstOracle(3200)
			t.Logf("%d records in %d commits", r.status.Snapshot().Records, r.status.Snapshot().Applies)

			// Caught up: the next records are applied too.
			more := randomRecords(rng, parts, 100, "after")
			r.produce(more)
			r.awaitEnds(r.highs(parts))
			r.checkAgainstOracle(3300)
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// checkAgainstOracle compares the table's rows, key count and record count
// (records, the records read by the rebuild and the follower) with the
// oracle.
func (r *followRig) checkAgainstOracle(records int64) {
	r.t.Helper()
	want := r.latestOracle()
	if diff := cmp.Diff(want, r.rows()); diff != "" {
		r.t.Fatalf("rows (-oracle +table):\n%s", diff)
	}
	err := r.db.ReadTable(r.spec.TableName(), func(s *store.Snapshot) error {
		if s.Meta.Keys != int64(len(want)) {
			return fmt.Errorf("metadata says %d keys, the oracle has %d", s.Meta.Keys, len(want))
		}
		if s.Meta.Records != records {
			return fmt.Errorf("metadata says %d records, %d were read", s.Meta.Records, records)
		}
		if s.Meta.Empty != (len(want) == 0) {
			return fmt.Errorf("metadata says empty %v with %d keys", s.Meta.Empty, len(want))
		}
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
}
