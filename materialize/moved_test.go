package materialize_test

// Writers racing on one published table: two followers and repeated
// updates, all reading from the same checkpoint. Each commit is
// compare-and-swap on the checkpoint (the loser commits nothing and gets
// ErrCheckpointMoved), so positions never go back and the table is always
// the plain fold of the records below its checkpoint.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// tableSample is one read of the table: its checkpoint's ends and its rows,
// from one read transaction.
type tableSample struct {
	ends map[int32]int64
	rows map[string]string
}

func (r *followRig) sample() (tableSample, error) {
	s := tableSample{ends: map[int32]int64{}, rows: map[string]string{}}
	err := r.db.ReadTable(r.spec.TableName(), func(snap *store.Snapshot) error {
		cp, _, err := checkpoint.Load(snap.Tx, r.spec.TableName())
		if err != nil {
			return err
		}
		for _, p := range cp.Partitions {
			s.ends[p.Partition] = p.End
		}
		return snap.Rows(nil, 0, func(k, v []byte) error {
			s.rows[string(k)] = string(v)
			return nil
		})
	})
	return s, err
}

// latestOracleBelow folds plainly the committed records below ends.
func (r *followRig) latestOracleBelow(ends map[int32]int64) map[string]string {
	r.mu.Lock()
	recs := append([]tRec(nil), r.produced...)
	r.mu.Unlock()
	sort.SliceStable(recs, func(i, j int) bool {
		if recs[i].p != recs[j].p {
			return recs[i].p < recs[j].p
		}
		return recs[i].o < recs[j].o
	})
	out := map[string]string{}
	for _, rec := range recs {
		end, ok := ends[rec.p]
		switch {
		case !ok || rec.o >= end || !rec.committed || len(rec.k) == 0:
		case rec.v == nil:
			delete(out, string(rec.k))
		default:
			out[string(rec.k)] = string(rec.v)
		}
	}
	return out
}

// TestWritersRaceOnCheckpoint: two followers of one table and an update
// run again and again, while records keep coming. Every writer reads the
// same checkpoint; each commit must be the only one from it. The test
// first awaits the race itself (followers and updates refused with
// ErrCheckpointMoved, and both kinds of writer committing), and checks
// that every sample of the table (checkpoint and rows from one
// transaction) has positions no lower than the sample before and rows
// equal to the plain fold of the records below its checkpoint. Finally the
// table reaches the broker's high watermarks with the fold of every
// record.
func TestWritersRaceOnCheckpoint(t *testing.T) {
	const parts = 2
	rng := testRand(t)
	r := newFollowRig(t, parts, materialize.Spec{Name: "race"})
	r.produce(randomRecords(rng, parts, 200, "a"))
	r.rebuild()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	var followMoved, updateMoved, updated atomic.Int64

	// The producer: small batches until stopProducing closes.
	stopProducing, produced := make(chan struct{}), make(chan struct{})
	prng := testRand(t)
	go func() {
		defer close(produced)
		for i := 0; ; i++ {
			select {
			case <-stopProducing:
				return
			default:
			}
			if i%20 == 19 {
				// A pause, until an update commits: with nothing new
				// the followers go idle and an update can win (it
				// reads for longer than they take to apply).
				for n := updated.Load(); updated.Load() == n; {
					select {
					case <-stopProducing:
						return
					case <-time.After(5 * time.Millisecond):
					}
				}
			}
			recs := randomRecords(prng, parts, 1+prng.Intn(20), fmt.Sprintf("b%d", i))
			offs, err := broker.Produce(context.Background(), r.topic, recs)
			if err != nil {
				errs <- fmt.Errorf("produce: %w", err)
				return
			}
			r.add(recs, offs, true)
		}
	}()
	// Two followers, each following again from the stored checkpoint when
	// another writer moved it (as the daemon's follow loop does).
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := materialize.KeepCurrent(ctx, materialize.FollowOptions{
					DB: r.db, Spec: r.spec, Log: r.log,
					Replay:   replay.Config{Brokers: broker.Addr, StallTimeout: 20 * time.Second},
					Interval: 5 * time.Millisecond, Refresh: 100 * time.Millisecond,
				})
				switch {
				case err == nil:
				case errors.Is(err, materialize.ErrCheckpointMoved):
					var me *materialize.CheckpointMovedError
					if !errors.As(err, &me) || me.Table != "race" || !me.Found {
						errs <- fmt.Errorf("follower %d: not a *CheckpointMovedError naming the table and its checkpoint: %v", i, err)
						return
					}
					followMoved.Add(1)
				default:
					errs <- fmt.Errorf("follower %d: %w", i, err)
					return
				}
			}
		}()
	}
	// Updates, one after the other, racing the followers.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			_, err := materialize.Update(ctx, materialize.UpdateOptions{DB: r.db, Table: "race", Brokers: broker.Addr, Log: r.log})
			switch {
			case err == nil:
				updated.Add(1)
			case errors.Is(err, materialize.ErrCheckpointMoved):
				updateMoved.Add(1)
			case ctx.Err() != nil:
			default:
				errs <- fmt.Errorf("update: %w", err)
				return
			}
		}
	}()

	// Sample the table until the race has happened enough, then stop
	// producing and let the writers reach the end.
	var samples []tableSample
	check := func() {
		t.Helper()
		s, err := r.sample()
		if err != nil {
			t.Fatal(err)
		}
		if n := len(samples); n > 0 {
			for p, e := range samples[n-1].ends {
				if s.ends[p] < e {
					t.Fatalf("partition %d's checkpoint went back from %d to %d", p, e, s.ends[p])
				}
			}
		}
		samples = append(samples, s)
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for followMoved.Load() < 5 || updateMoved.Load() < 1 || updated.Load() < 3 {
		check()
		if time.Now().After(deadline) {
			t.Fatalf("the writers did not race: followers refused %d times, updates refused %d times, %d updates committed",
				followMoved.Load(), updateMoved.Load(), updated.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stopProducing)
	<-produced
	want := r.highs(parts)
	for !cmp.Equal(samples[len(samples)-1].ends, want) {
		if time.Now().After(deadline) {
			t.Fatalf("the table did not reach the high watermarks %v: %v", want, samples[len(samples)-1].ends)
		}
		time.Sleep(5 * time.Millisecond)
		check()
	}
	cancel()
	wg.Wait()
	check() // and the writers' errors up to their end

	// Every record is now in r.produced: compare each sample with the
	// fold below its checkpoint.
	for i, s := range samples {
		if want := r.latestOracleBelow(s.ends); !cmp.Equal(s.rows, want) {
			t.Fatalf("sample %d at checkpoint %v differs from the fold of the records below it (-oracle +table):\n%s", i, s.ends, cmp.Diff(want, s.rows))
		}
	}
	last := samples[len(samples)-1]
	if !cmp.Equal(last.ends, want) {
		t.Fatalf("final checkpoint %v, want the high watermarks %v", last.ends, want)
	}
	t.Logf("%d samples; followers refused %d times, updates refused %d times, %d updates committed",
		len(samples), followMoved.Load(), updateMoved.Load(), updated.Load())
}
