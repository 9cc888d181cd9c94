package replay

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// TestWatchLive: WatchLive reports each partition's retained low, high
// watermark and last stable offset as the broker has them, follows what
// the topic gains (an open transaction holds the LSO below the high
// watermark), and returns nil once its context ends.
func TestWatchLive(t *testing.T) {
	topic := newTopic(t, 2)
	recs := func(p int32, n int) []localkafka.Record {
		out := make([]localkafka.Record, n)
		for i := range out {
			out[i] = localkafka.Record{Partition: p, Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")}
		}
		return out
	}
	produce(t, topic, append(recs(0, 5), recs(1, 3)...))
	var mu sync.Mutex
	var last LiveMarks
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- WatchLive(ctx, cfg(t, topic), 50*time.Millisecond, func(m LiveMarks) {
			mu.Lock()
			last = m
			mu.Unlock()
		})
	}()
	// marks reports whether the last refresh read want (high and LSO of
	// each partition).
	marks := func(high, lso map[int32]int64) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			if last.Error != nil || len(last.High) != 2 || last.Low[0] != 0 || last.Low[1] != 0 {
				return false
			}
			for p := range high {
				if last.High[p] != high[p] || last.LSO[p] != lso[p] {
					return false
				}
			}
			return true
		}
	}
	want := map[int32]int64{0: 5, 1: 3}
	waitUntil(t, "the marks of what was produced", marks(want, want))

	txn, err := broker.BeginTxn(context.Background(), topic, fmt.Sprintf("txn-%s", topic))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := txn.Produce(context.Background(), recs(1, 2)); err != nil {
		t.Fatal(err)
	}
	produce(t, topic, recs(0, 4))
	waitUntil(t, "the marks with a transaction open on partition 1",
		marks(map[int32]int64{0: 9, 1: 5}, map[int32]int64{0: 9, 1: 3}))
	if err := txn.End(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	// The commit marker takes an offset: high 6, LSO 6.
	waitUntil(t, "the marks after the commit", marks(map[int32]int64{0: 9, 1: 6}, map[int32]int64{0: 9, 1: 6}))
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("WatchLive after its context ended: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("WatchLive did not return after its context ended")
	}
}

// waitUntil polls cond every 20ms for at most 30s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
