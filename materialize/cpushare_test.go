package materialize_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/internal/cpushare"
	"github.com/kmaterialize/kmaterialize/materialize"
)

// TestFollowAndRebuildTakeTurnsOnOneSlot is the daemon on two cores: a
// follower and a rebuild of a second table of the same topic (small
// enough a memory to spill runs and merge them) take turns on a share of
// one slot, reading at a lower priority, while records keep coming. Neither waits for ever on the other
// (the follower's apply transactions, the rebuild's folds, spills and the
// merge's two goroutines all need the slot), the followed table equals the
// plain fold of every record, and the rebuilt one the plain fold of the
// records below its checkpoint.
func TestFollowAndRebuildTakeTurnsOnOneSlot(t *testing.T) {
	rng := testRand(t)
	r := newFollowRig(t, 2, materialize.Spec{Name: "followed"})
	r.cpu = cpushare.NewLowered(1)
	r.produce(randomRecords(rng, 2, 300, "a"))
	r.rebuild()
	r.follow()

	opts, err := materialize.Spec{Name: "rebuilt", Topic: r.topic}.Options(r.db, broker.Addr, nil, r.log)
	if err != nil {
		t.Fatal(err)
	}
	opts.CPU = r.cpu
	opts.Memory = 64 << 10 // holds 16 KiB of rows: spills
	type result struct {
		rep materialize.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := materialize.Rebuild(context.Background(), opts)
		done <- result{rep, err}
	}()
	for i := 0; i < 10; i++ {
		r.produce(randomRecords(rng, 2, 200, "b"))
	}
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	r.awaitEnds(r.highs(2))
	if got, want := r.rows(), r.latestOracle(); !cmp.Equal(got, want) {
		t.Fatalf("followed table (-oracle +table):\n%s", cmp.Diff(want, got))
	}
	ends := map[int32]int64{}
	for _, p := range res.rep.Checkpoint.Partitions {
		ends[p.Partition] = p.End
	}
	got := map[string]string{}
	if err := r.db.Scan("rebuilt", nil, 0, func(k, v []byte) error { got[string(k)] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := r.latestOracleTo(ends); !cmp.Equal(got, want) {
		t.Fatalf("rebuilt table (-oracle +table):\n%s", cmp.Diff(want, got))
	}
}
