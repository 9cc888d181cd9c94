package replay

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestFollowReadersMatchOne: a follower reading in batches, with one
// reader or N, hands over what one reader polling a message at a time does
// (the mixed topic: transactions, an aborted one, an empty partition,
// records larger than the byte budget), one batch at a time; every batch names every partition's
// position, no position goes back, and the records of a partition arrive
// exactly between the positions of consecutive batches, so a checkpoint
// saved with any batch loses and repeats nothing.
func TestFollowReadersMatchOne(t *testing.T) {
	topic := newTopic(t, 4)
	produceMixed(t, topic)
	marks, err := broker.Marks(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	from := map[int32]int64{0: 0, 1: 0, 2: 0, 3: 0}
	// follow reads the topic to its high marks with readers readers and
	// checks every batch as it comes.
	follow := func(t *testing.T, readers int, perRecord bool) []fullRec {
		t.Helper()
		c := FollowConfig{Config: cfg(t, topic), From: from, Interval: 10 * time.Millisecond, Refresh: 50 * time.Millisecond}
		c.Headers, c.perRecord, c.BatchRecords, c.MaxBytes, c.Readers = true, perRecord, 50, 64<<10, readers
		var lowered atomic.Int32
		c.Lower = func(fn func()) {
			lowered.Add(1)
			fn()
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var (
			got      []fullRec
			inSink   atomic.Int32
			problems []string
		)
		pos := map[int32]int64{0: 0, 1: 0, 2: 0, 3: 0}
		made := followersMade.Load()
		done := make(chan error, 1)
		go func() {
			done <- Tail(ctx, c, func(b FollowBatch) error {
				if inSink.Add(1) > 1 {
					problems = append(problems, "the sink was called by two readers at once")
				}
				defer inSink.Add(-1)
				if len(b.Positions) != 4 {
					problems = append(problems, fmt.Sprintf("a batch names %d partitions' positions, want 4: %v", len(b.Positions), b.Positions))
				}
				for p, o := range b.Positions {
					if o < pos[p] {
						problems = append(problems, fmt.Sprintf("partition %d went back from %d to %d", p, pos[p], o))
					}
				}
				for _, r := range b.Records {
					if r.Offset < pos[r.Partition] || r.Offset >= b.Positions[r.Partition] {
						problems = append(problems, fmt.Sprintf("record %d/%d outside its batch's positions [%d, %d)", r.Partition, r.Offset, pos[r.Partition], b.Positions[r.Partition]))
					}
					got = append(got, toFull(r))
				}
				for p, o := range b.Positions {
					pos[p] = max(pos[p], o)
				}
				for p := range marks {
					if pos[p] < marks[p].High {
						return nil
					}
				}
				cancel()
				return nil
			})
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%d readers: %v", readers, err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%d readers: positions %v never reached the high marks %v", readers, pos, marks)
		}
		for _, p := range problems {
			t.Error(p)
		}
		n := min(readers, len(marks))
		if m := followersMade.Load() - made; m != int64(n) {
			t.Errorf("%d readers over %d partitions: %d followers made, want %d", readers, len(marks), m, n)
		}
		if l := lowered.Load(); l != int32(n-1) {
			t.Errorf("%d readers: %d loops run by Lower, want %d (all but the caller's)", readers, l, n-1)
		}
		checkOrderFull(t, got)
		sortFull(got)
		return got
	}
	want := follow(t, 1, true)
	if len(want) < 300 {
		t.Fatalf("the oracle followed %d records, want >= 300", len(want))
	}
	for _, n := range []int{1, 2, 3, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			if diff := cmp.Diff(want, follow(t, n, false)); diff != "" {
				t.Fatalf("records (-one reader, per record +%d readers, batches):\n%s", n, diff)
			}
		})
	}
}
