package serve

import (
	"math"
	rtmetrics "runtime/metrics"
	"testing"
)

// TestSchedHistogram: folding a runtime histogram into schedBounds counts
// each sample under the first bound at or above its bucket's upper edge,
// cumulatively, checked against samples counted one by one.
func TestSchedHistogram(t *testing.T) {
	// Runtime-like buckets: -Inf, then 0.5 µs growing by 1.5x, then +Inf.
	edges := []float64{math.Inf(-1), 0}
	for b := 0.5e-6; b < 10; b *= 1.5 {
		edges = append(edges, b)
	}
	edges = append(edges, math.Inf(1))
	h := &rtmetrics.Float64Histogram{Buckets: edges, Counts: make([]uint64, len(edges)-1)}
	// Samples: the upper edge of each bucket they fall in (the
	// histogram's worst case), n of them in bucket i.
	var uppers []float64
	for i := range h.Counts {
		n := uint64(i%3 + 1)
		h.Counts[i] = n
		for range n {
			uppers = append(uppers, edges[i+1])
		}
	}
	count, _, buckets := schedHistogram(h)
	if count != uint64(len(uppers)) {
		t.Fatalf("count %d, want %d", count, len(uppers))
	}
	for _, b := range schedBounds {
		var want uint64
		for _, u := range uppers {
			if u <= b {
				want++
			}
		}
		if buckets[b] != want {
			t.Errorf("bucket le=%g: %d, want %d", b, buckets[b], want)
		}
	}
}
