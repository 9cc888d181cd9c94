package serve

import (
	"context"
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/store"
)

// Rebuild outcomes, the "outcome" label of kmaterialize_rebuilds_total.
const (
	outcomeSuccess     = "success"
	outcomeFailed      = "failed"
	outcomeInterrupted = "interrupted" // the daemon shut down during it
	outcomeSkipped     = "skipped"     // a scheduled run found one going
)

// metrics are the daemon's Prometheus metrics, in a registry of their own
// (never the global one: a program embedding serve keeps its own).
type metrics struct {
	reg         *prometheus.Registry
	generation  *prometheus.GaugeVec
	keys        *prometheus.GaugeVec
	duration    *prometheus.HistogramVec
	lastSuccess *prometheus.GaugeVec
	rebuilds    *prometheus.CounterVec
	records     *prometheus.CounterVec
	requests    *prometheus.HistogramVec
	changes     *prometheus.GaugeVec
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		generation: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kmaterialize_table_generation", Help: "The published generation of each table.",
		}, []string{"table"}),
		keys: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kmaterialize_table_keys", Help: "Rows in the published generation of each table.",
		}, []string{"table"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kmaterialize_rebuild_duration_seconds", Help: "How long rebuilds took, by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.1, 2, 14), // 0.1s .. ~27m
		}, []string{"table", "outcome"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kmaterialize_rebuild_last_success_timestamp_seconds", Help: "When each table's last successful rebuild ended (Unix time).",
		}, []string{"table"}),
		rebuilds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kmaterialize_rebuilds_total", Help: "Rebuilds by outcome: success, failed, interrupted, skipped (a scheduled run that found one going).",
		}, []string{"table", "outcome"}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kmaterialize_rebuild_records_read_total", Help: "Records read by published rebuilds.",
		}, []string{"table"}),
		changes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kmaterialize_table_changes", Help: "Keys the last publish of each table added, removed and changed (op) compared with the generation it replaced.",
		}, []string{"table", "op"}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kmaterialize_http_request_duration_seconds", Help: "HTTP request durations by route and status code.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
		}, []string{"route", "code"}),
	}
	m.reg.MustRegister(m.generation, m.keys, m.duration, m.lastSuccess, m.rebuilds, m.records, m.requests, m.changes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		followCollector{s})
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// observeTables sets the generation and keys of every table the file holds.
func (m *metrics) observeTables(db *store.DB) {
	metas, err := db.Tables()
	if err != nil {
		return
	}
	for _, t := range metas {
		m.generation.WithLabelValues(t.Name).Set(float64(t.Generation))
		m.keys.WithLabelValues(t.Name).Set(float64(t.Keys))
		m.observeChanges(t)
	}
}

// observeChanges sets what the last publish of t changed, when recorded.
func (m *metrics) observeChanges(t store.TableMeta) {
	if c := t.Changes; c != nil {
		m.changes.WithLabelValues(t.Name, "added").Set(float64(c.Added))
		m.changes.WithLabelValues(t.Name, "removed").Set(float64(c.Removed))
		m.changes.WithLabelValues(t.Name, "changed").Set(float64(c.Changed))
	}
}

func (m *metrics) runEnded(table string, res runResult, rep materialize.Report) {
	outcome := outcomeSuccess
	switch {
	case res.Err != nil && errors.Is(res.Err, context.Canceled):
		outcome = outcomeInterrupted
	case res.Err != nil:
		outcome = outcomeFailed
	}
	m.duration.WithLabelValues(table, outcome).Observe(res.Took.Seconds())
	m.rebuilds.WithLabelValues(table, outcome).Inc()
	if res.Err != nil {
		return
	}
	m.generation.WithLabelValues(table).Set(float64(rep.Meta.Generation))
	m.keys.WithLabelValues(table).Set(float64(rep.Meta.Keys))
	m.observeChanges(rep.Meta)
	m.lastSuccess.WithLabelValues(table).Set(float64(res.Ended.UnixNano()) / 1e9)
	m.records.WithLabelValues(table).Add(float64(rep.Meta.Records))
}

func (m *metrics) skipped(table string) {
	m.rebuilds.WithLabelValues(table, outcomeSkipped).Inc()
}
