package materialize_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// followWith starts the follower as follow does, with an apply byte
// budget (0: the default).
func (r *followRig) followWith(maxApplyBytes int64) {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() {
		r.done <- materialize.KeepCurrent(ctx, materialize.FollowOptions{
			DB: r.db, Spec: r.spec, Status: r.status, Log: r.log,
			Replay:   replay.Config{Brokers: broker.Addr, StallTimeout: 20 * time.Second},
			Interval: 50 * time.Millisecond, Refresh: 100 * time.Millisecond,
			MaxApplyBytes: maxApplyBytes,
		})
	}()
	r.t.Cleanup(func() { r.stop() })
}

// tableState is what one read of the table saw: its key count and its
// checkpoint's end in partition 0, from one snapshot.
type tableState struct {
	keys int64
	end  int64
}

// sampleTable reads the table's state over and over, from a goroutine,
// and returns a function that waits until it has seen *last (set before
// the call) and returns every distinct state seen, in order. The goroutine
// ends at the test's end in any case.
func (r *followRig) sampleTable(last *tableState) func() []tableState {
	var mu sync.Mutex
	var seen []tableState
	stop, abort := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		name := r.spec.TableName()
		stopped := false
		for {
			select {
			case <-abort:
				return
			case <-stop:
				stopped = true
			default:
			}
			mu.Lock()
			done := stopped && len(seen) > 0 && seen[len(seen)-1] == *last
			mu.Unlock()
			if done {
				return
			}
			var st tableState
			err := r.db.ReadTable(name, func(s *store.Snapshot) error {
				cp, _, err := checkpoint.Load(s.Tx, name)
				st.keys = s.Meta.Keys
				for _, p := range cp.Partitions {
					if p.Partition == 0 {
						st.end = p.End
					}
				}
				return err
			})
			if err != nil {
				r.t.Error(err)
				return
			}
			mu.Lock()
			if n := len(seen); n == 0 || seen[n-1] != st {
				seen = append(seen, st)
			}
			mu.Unlock()
		}
	}()
	r.t.Cleanup(func() {
		close(abort)
		wg.Wait()
	})
	return func() []tableState {
		close(stop)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return append([]tableState(nil), seen...)
	}
}

// awaitApplied waits until the status counts n more records applied than
// s0 did, and returns it.
func (r *followRig) awaitApplied(s0 materialize.FollowSnapshot, n int64) materialize.FollowSnapshot {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s := r.status.Snapshot()
		if s.Records-s0.Records >= n {
			return s
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the status counts %d records applied, want %d", s.Records-s0.Records, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// txnRecords are n records for partition 0 with distinct keys and values
// of about 100 bytes, so that n of them are many fetches.
func txnRecords(tag string, n int) ([]localkafka.Record, int64) {
	out := make([]localkafka.Record, n)
	var size int64
	for i := range out {
		out[i] = localkafka.Record{Partition: 0, Key: []byte(fmt.Sprintf("%s-%05d", tag, i)),
			Value: []byte(fmt.Sprintf("%s-%05d-%s", tag, i, strings.Repeat("v", 88)))}
		size += int64(len(out[i].Key) + len(out[i].Value))
	}
	return out, size
}

// TestFollowTransactionVisibleWhole: one committed transaction of 50k
// records in one partition (over 5 MB: more than one fetch, and more than
// one read round of the follower), no other producer. A reader sampling
// the table's key count and checkpoint all along sees the state before the
// transaction or the state after it, never part of it; the transaction
// goes in one apply; the table equals the oracle's fold.
func TestFollowTransactionVisibleWhole(t *testing.T) {
	const n = 50_000
	rng := testRand(t)
	r := newFollowRig(t, 1, materialize.Spec{Name: "txn-whole"})
	r.produce(randomRecords(rng, 1, 200, "a"))
	r.rebuild()
	r.follow()
	r.awaitEnds(r.highs(1))
	before := tableState{keys: int64(len(r.latestOracle())), end: r.highs(1)[0]}
	s0 := r.status.Snapshot()

	var after tableState
	samples := r.sampleTable(&after)
	recs, size := txnRecords("txn", n)
	ctx := context.Background()
	offs, err := broker.CommitTxn(ctx, r.topic, "whole-"+r.topic, recs)
	if err != nil {
		t.Fatal(err)
	}
	r.add(recs, offs, true)
	after = tableState{keys: int64(len(r.latestOracle())), end: r.highs(1)[0]}
	// offs[0] is above before.end when CommitTxn had to redo a
	// transaction franz-go aborted: the follower may then pass the
	// aborted records, which is still "before".
	if offs[0] < before.end || offs[n-1] >= after.end || after.keys != before.keys+n {
		t.Fatalf("transaction at offsets %d..%d, table before %+v after %+v: not one run of new keys", offs[0], offs[n-1], before, after)
	}
	isBefore := func(st tableState) bool { return st.keys == before.keys && st.end >= before.end && st.end <= offs[0] }
	r.awaitEnds(r.highs(1))
	seen := samples()
	s1 := r.awaitApplied(s0, n)

	// The condition: the transaction was more than one read's worth (the
	// follower had rounds that would have ended a batch inside it under
	// count, drain or interval rules), and it is bigger than librdkafka's
	// per-partition fetch (max.partition.fetch.bytes, 1 MiB by default).
	t.Logf("transaction %d records, %d bytes; held rounds %d; applies %d; samples %v", n, size, s1.Held-s0.Held, s1.Applies-s0.Applies, seen)
	if s1.Held-s0.Held < 1 {
		t.Fatalf("the follower held no read round inside the transaction (held %d -> %d): it fit in one", s0.Held, s1.Held)
	}
	if size <= 1<<20 {
		t.Fatalf("transaction of %d bytes fits one fetch", size)
	}
	// The outcome.
	for _, st := range seen {
		if !isBefore(st) && st != after {
			t.Fatalf("a reader saw %+v: part of the transaction (before %+v, after %+v; all seen %v)", st, before, after, seen)
		}
	}
	if len(seen) < 2 || seen[0] != before || seen[len(seen)-1] != after {
		t.Fatalf("the reader saw %v: want the state before, then after", seen)
	}
	if got := s1.Applies - s0.Applies; got != 1 {
		t.Errorf("the transaction took %d applies, want 1", got)
	}
	if s1.UnstableCuts != 0 {
		t.Errorf("unstable cuts %d under the default budget, want 0", s1.UnstableCuts)
	}
	if got, want := r.rows(), r.latestOracle(); len(got) != len(want) {
		t.Fatalf("table has %d rows, oracle %d", len(got), len(want))
	} else {
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("row %q = %q, oracle %q", k, got[k], v)
			}
		}
	}
	if err := r.stop(); err != nil {
		t.Fatalf("follower: %v", err)
	}
}

// TestFollowByteBudgetCutsTransaction: with an apply byte budget far below
// the transaction's size, the follower cuts inside it (several applies,
// counted as unstable cuts) instead of holding it all, and the table still
// ends equal to the oracle's fold.
func TestFollowByteBudgetCutsTransaction(t *testing.T) {
	const n = 20_000
	const budget = 256 << 10
	rng := testRand(t)
	r := newFollowRig(t, 1, materialize.Spec{Name: "txn-budget"})
	r.produce(randomRecords(rng, 1, 100, "a"))
	r.rebuild()
	r.followWith(budget)
	r.awaitEnds(r.highs(1))
	before := tableState{keys: int64(len(r.latestOracle())), end: r.highs(1)[0]}
	s0 := r.status.Snapshot()

	var after tableState
	samples := r.sampleTable(&after)
	recs, size := txnRecords("cut", n)
	offs, err := broker.CommitTxn(context.Background(), r.topic, "budget-"+r.topic, recs)
	if err != nil {
		t.Fatal(err)
	}
	r.add(recs, offs, true)
	after = tableState{keys: int64(len(r.latestOracle())), end: r.highs(1)[0]}
	r.awaitEnds(r.highs(1))
	seen := samples()
	s1 := r.awaitApplied(s0, n)
	cuts := s1.UnstableCuts - s0.UnstableCuts
	t.Logf("transaction %d bytes, budget %d: unstable cuts %d, applies %d, samples %d", size, budget, cuts, s1.Applies-s0.Applies, len(seen))
	if size < 4*budget {
		t.Fatalf("transaction of %d bytes is not well over the budget %d", size, budget)
	}
	if cuts < 1 {
		t.Fatalf("no unstable cut counted with a budget of %d for a transaction of %d bytes", budget, size)
	}
	if s1.Applies-s0.Applies < cuts+1 {
		t.Errorf("%d applies for %d unstable cuts: want each cut to end an apply", s1.Applies-s0.Applies, cuts)
	}
	// Every state seen is a prefix: keys grow with the checkpoint.
	for i := 1; i < len(seen); i++ {
		if seen[i].keys < seen[i-1].keys || seen[i].end < seen[i-1].end {
			t.Fatalf("states seen go back: %v", seen)
		}
	}
	if seen[len(seen)-1] != after || seen[0] != before {
		t.Fatalf("the reader saw %v: want %v first and %v last", seen, before, after)
	}
	if got, want := r.rows(), r.latestOracle(); len(got) != len(want) {
		t.Fatalf("table has %d rows, oracle %d", len(got), len(want))
	} else {
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("row %q = %q, oracle %q", k, got[k], v)
			}
		}
	}
	if err := r.stop(); err != nil {
		t.Fatalf("follower: %v", err)
	}
}
