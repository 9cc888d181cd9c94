package materialize_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/fold"
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

// TestFollowCatchUpKeyTooLarge: a catch-up whose records include keys over
// fold.MaxKeySize among many small batches. With on_bad_record skip, the
// batches around them are folded together and the oversized keys left out
// and counted: the table equals the oracle without them, with exact
// counts. With fail, the follower stops with the fold's *DataError naming
// an oversized record, and the table is the oracle of a prefix of each
// partition that stops short of both.
func TestFollowCatchUpKeyTooLarge(t *testing.T) {
	for _, mode := range []fold.OnBadRecord{fold.SkipBadRecords, fold.FailOnBadRecord} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			const parts = 2
			r := newFollowRig(t, parts, materialize.Spec{Name: "t", OnBadRecord: mode})
			r.rebuild()
			big := bytes.Repeat([]byte("k"), fold.MaxKeySize+1)
			var recs []localkafka.Record
			for i := range 600 {
				p := int32(i % parts)
				rec := localkafka.Record{Partition: p, Key: []byte(fmt.Sprintf("p%d-k%d", p, i%7)), Value: []byte(fmt.Sprintf("v%d", i))}
				if i == 301 || i == 450 {
					rec.Key = big
				}
				recs = append(recs, rec)
			}
			offs, err := broker.Produce(context.Background(), r.topic, recs)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			r.cancel, r.done = cancel, make(chan error, 1)
			go func() {
				r.done <- materialize.KeepCurrent(ctx, materialize.FollowOptions{
					DB: r.db, Spec: r.spec, Status: r.status, Log: r.log,
					Replay:   replay.Config{Brokers: broker.Addr, StallTimeout: 20 * time.Second, BatchRecords: 29},
					Interval: 50 * time.Millisecond, Refresh: 100 * time.Millisecond,
				})
			}()
			t.Cleanup(func() { r.stop() })
			if mode == fold.SkipBadRecords {
				var kept []localkafka.Record
				var keptOffs []int64
				for i, rec := range recs {
					if len(rec.Key) <= fold.MaxKeySize {
						kept, keptOffs = append(kept, rec), append(keptOffs, offs[i])
					}
				}
				r.add(kept, keptOffs, true)
				r.awaitEnds(r.highs(parts))
				r.checkAgainstOracle(600)
				err := r.db.ReadTable(r.spec.TableName(), func(s *store.Snapshot) error {
					if got := s.Meta.SkippedByReason[fold.ReasonKeyTooLarge]; got != 2 {
						return fmt.Errorf("%d records skipped as key_too_large, want 2", got)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ferr error
			select {
			case ferr = <-r.done:
				r.cancel = nil
			case <-time.After(60 * time.Second):
				t.Fatal("the follower did not stop at the oversized key")
			}
			// The two oversized keys are in different partitions: either
			// may be the first one folded.
			bad := map[int32]int64{recs[301].Partition: offs[301], recs[450].Partition: offs[450]}
			var de *fold.DataError
			if !errors.As(ferr, &de) || de.Kind != fold.ReasonKeyTooLarge || bad[de.Partition] != de.Offset {
				t.Fatalf("follower error %v, want the key_too_large DataError of one of %v", ferr, bad)
			}
			// What was applied is a prefix of each partition, below the
			// oversized keys, and equals the oracle there.
			ends := r.ends()
			for p, off := range bad {
				if ends[p] > off {
					t.Fatalf("checkpoint %v passes the oversized key at %d/%d", ends, p, off)
				}
			}
			r.add(recs, offs, true)
			if diff := cmp.Diff(r.latestOracleTo(ends), r.rows()); diff != "" {
				t.Fatalf("rows at checkpoint %v (-oracle +table):\n%s", ends, diff)
			}
		})
	}
}
