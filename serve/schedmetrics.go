package serve

import (
	"math"
	rtmetrics "runtime/metrics"

	"github.com/prometheus/client_golang/prometheus"
)

// schedCollector exports Go's scheduler latency, runtime/metrics'
// /sched/latencies:seconds (how long goroutines waited runnable before they
// got a P), as kmaterialize_go_sched_latencies_seconds. The Go collector
// can export it too, but re-buckets seconds as powers of ten (1 ms, 10 ms,
// 100 ms), too coarse to tell a read that waited for a P (a rebuild holding
// every one) from one that waited for a CPU (the machine busy): the
// handler-time histogram sees neither. The buckets here double from 1 µs to
// about 4 s. Read from the runtime at each scrape, cumulative since the
// process started, like every Go histogram.
type schedCollector struct{}

const schedMetric = "/sched/latencies:seconds"

var descSchedLatencies = prometheus.NewDesc("kmaterialize_go_sched_latencies_seconds",
	"How long goroutines waited runnable for a P (runtime/metrics "+schedMetric+"): reads waiting for a P that rebuild work holds show here, not in the handler-time histogram. Sum approximate (bucket lower bounds).",
	nil, nil)

// schedBounds are the exported upper bounds: 1 µs doubling to about 4 s.
var schedBounds = func() []float64 {
	b := make([]float64, 23)
	for i := range b {
		b[i] = 1e-6 * math.Exp2(float64(i))
	}
	return b
}()

func (schedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descSchedLatencies }

func (schedCollector) Collect(ch chan<- prometheus.Metric) {
	s := []rtmetrics.Sample{{Name: schedMetric}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindFloat64Histogram {
		return // a runtime without the metric
	}
	count, sum, buckets := schedHistogram(s[0].Value.Float64Histogram())
	ch <- prometheus.MustNewConstHistogram(descSchedLatencies, count, sum, buckets)
}

// schedHistogram folds a runtime histogram into schedBounds: each
// runtime bucket [lo, hi) counts under the first bound at or above hi (its
// samples are at most that long), so a quantile read from the result is an
// upper bound.
func schedHistogram(h *rtmetrics.Float64Histogram) (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, len(schedBounds))
	per := make([]uint64, len(schedBounds))
	for i, n := range h.Counts {
		if n == 0 {
			continue
		}
		lo, hi := h.Buckets[i], h.Buckets[i+1]
		count += n
		if !math.IsInf(lo, -1) {
			sum += float64(n) * lo
		}
		for j, b := range schedBounds {
			if hi <= b {
				per[j] += n
				break
			}
		}
	}
	var cum uint64
	for j, b := range schedBounds {
		cum += per[j]
		buckets[b] = cum
	}
	return count, sum, buckets
}
