package serve

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
	duration    *prometheus.HistogramVec
	lastSuccess *prometheus.GaugeVec
	rebuilds    *prometheus.CounterVec
	records     *prometheus.CounterVec
	requests    *prometheus.HistogramVec
	reload      *reloadStatus
	scrape      http.Handler // GET /metrics
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg:    prometheus.NewRegistry(),
		reload: newReloadStatus(s.now()),
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
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kmaterialize_http_request_duration_seconds", Help: "HTTP request durations by route and status code.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
		}, []string{"route", "code"}),
	}
	waiters := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kmaterialize_reads_waiting_for_positions", Help: "Reads waiting for their min_positions now (at most MaxPositionWaiters).",
	}, func() float64 { return float64(s.waiters.Load()) })
	watchers := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kmaterialize_feed_watchers", Help: "Open change feeds (GET .../changes streams) of all tables now (at most max_watchers).",
	}, func() float64 { return float64(s.feeds.Watchers()) })
	m.reg.MustRegister(m.duration, m.lastSuccess, m.rebuilds, m.records, m.requests, waiters, watchers,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		followCollector{s}, dbCollector{s}, schedCollector{})
	m.scrape = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m
}

// runEnded counts a run that ended (a rebuild or an update); recordsRead
// is what it read, counted when it published.
func (m *metrics) runEnded(table string, res runResult, recordsRead int64) {
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
	m.lastSuccess.WithLabelValues(table).Set(float64(res.Ended.UnixNano()) / 1e9)
	m.records.WithLabelValues(table).Add(float64(recordsRead))
}

func (m *metrics) skipped(table string) {
	m.rebuilds.WithLabelValues(table, outcomeSkipped).Inc()
}

// tableDropped deletes every series of table: a dropped table has none.
// (Its generation, keys and changes went with its entry in the file.)
func (m *metrics) tableDropped(table string) {
	for _, v := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{m.duration, m.lastSuccess, m.rebuilds, m.records} {
		v.DeletePartialMatch(prometheus.Labels{"table": table})
	}
}

// dbCollector exports, at scrape time, what the file says now: each
// table's generation, keys and last changes from its stored metadata, and
// the file's size, pages and oldest read transaction. Read from the file
// at every scrape rather than set by the code paths that change a table
// (publish, follower apply, update, rollback, drop), so no path can leave
// them stale and a dropped table has none.
type dbCollector struct{ s *Server }

var (
	descTableGeneration = prometheus.NewDesc("kmaterialize_table_generation",
		"The published generation of each table.", []string{"table"}, nil)
	descTableKeys = prometheus.NewDesc("kmaterialize_table_keys",
		"Rows in the published generation of each table, as the file says now (follower applies and updates included).", []string{"table"}, nil)
	descTableChanges = prometheus.NewDesc("kmaterialize_table_changes",
		"Keys the last publish of each table added, removed and changed (op) compared with the generation it replaced.", []string{"table", "op"}, nil)
	descDBSize = prometheus.NewDesc("kmaterialize_db_file_size_bytes",
		"The database file's size.", nil, nil)
	descDBFree = prometheus.NewDesc("kmaterialize_db_free_pages",
		"Pages on bbolt's freelist, reusable by the next writes.", nil, nil)
	descDBPending = prometheus.NewDesc("kmaterialize_db_pending_pages",
		"Pages freed while a read transaction that may see them is open: reusable once it ends. Growing with follow churn means a long read.", nil, nil)
	descDBReadTxs = prometheus.NewDesc("kmaterialize_db_read_transactions_open",
		"Read transactions open on the database.", nil, nil)
	descDBOldestRead = prometheus.NewDesc("kmaterialize_db_oldest_read_transaction_age_seconds",
		"Age of the oldest read transaction the daemon's store opened; 0 when none is open. A long one holds back every write that must grow the file's mapping.", nil, nil)
	descReloadSuccess = prometheus.NewDesc("kmaterialize_config_last_reload_success",
		"1 if the last config load (the start, or the last SIGHUP) succeeded, else 0.", nil, nil)
	descReloadTime = prometheus.NewDesc("kmaterialize_config_last_reload_timestamp_seconds",
		"When the config was last loaded or reloaded, successfully or not (Unix time): kmaterialize_config_last_reload_success says how it went.", nil, nil)
)

func (c dbCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTableGeneration, descTableKeys, descTableChanges,
		descDBSize, descDBFree, descDBPending, descDBReadTxs, descDBOldestRead, descReloadSuccess, descReloadTime} {
		ch <- d
	}
}

func (c dbCollector) Collect(ch chan<- prometheus.Metric) {
	rs := c.s.metrics.reload.get()
	ok := 0.0
	if rs.LastReloadOK {
		ok = 1
	}
	ch <- prometheus.MustNewConstMetric(descReloadSuccess, prometheus.GaugeValue, ok)
	ch <- prometheus.MustNewConstMetric(descReloadTime, prometheus.GaugeValue, float64(rs.LastReloadAt.UnixNano())/1e9)

	c.s.mu.Lock()
	db := c.s.db
	c.s.mu.Unlock()
	if db == nil {
		return
	}
	if metas, err := db.Tables(); err == nil {
		for _, t := range metas {
			ch <- prometheus.MustNewConstMetric(descTableGeneration, prometheus.GaugeValue, float64(t.Generation), t.Name)
			ch <- prometheus.MustNewConstMetric(descTableKeys, prometheus.GaugeValue, float64(t.Keys), t.Name)
			if ch2 := t.Changes; ch2 != nil {
				ch <- prometheus.MustNewConstMetric(descTableChanges, prometheus.GaugeValue, float64(ch2.Added), t.Name, "added")
				ch <- prometheus.MustNewConstMetric(descTableChanges, prometheus.GaugeValue, float64(ch2.Removed), t.Name, "removed")
				ch <- prometheus.MustNewConstMetric(descTableChanges, prometheus.GaugeValue, float64(ch2.Changed), t.Name, "changed")
			}
		}
	} else {
		c.s.cfg.Log.Warn().Err(err).Msg("metrics: list the tables")
	}
	if st, err := db.FileStats(); err == nil {
		ch <- prometheus.MustNewConstMetric(descDBSize, prometheus.GaugeValue, float64(st.Size))
		ch <- prometheus.MustNewConstMetric(descDBFree, prometheus.GaugeValue, float64(st.FreePages))
		ch <- prometheus.MustNewConstMetric(descDBPending, prometheus.GaugeValue, float64(st.PendingPages))
		ch <- prometheus.MustNewConstMetric(descDBReadTxs, prometheus.GaugeValue, float64(st.OpenReadTxs))
	} else {
		c.s.cfg.Log.Warn().Err(err).Msg("metrics: stat the database file")
	}
	age := 0.0
	if at, ok := db.OldestReadTx(); ok {
		age = time.Since(at).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(descDBOldestRead, prometheus.GaugeValue, age)
}
