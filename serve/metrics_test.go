package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	bolt "go.etcd.io/bbolt"
)

// scrape is one /metrics answer over the daemon's listener, parsed.
type scrape map[string]*dto.MetricFamily

func scrapeMetrics(t *testing.T, c *client) scrape {
	t.Helper()
	r := c.get(t, "/metrics")
	if r.status != http.StatusOK {
		t.Fatalf("/metrics: %d %s", r.status, r.body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, r.body)
	}
	return fams
}

// value returns the gauge or counter of family name whose labels are
// exactly labels (name=value pairs), and whether there is one.
func (s scrape) value(name string, labels ...string) (float64, bool) {
	f := s[name]
	if f == nil {
		return 0, false
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// must is value, failing the test when the series is absent.
func (s scrape) must(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	v, ok := s.value(name, labels...)
	if !ok {
		t.Fatalf("/metrics has no %s%v", name, labels)
	}
	return v
}

// tableSeries lists the series of every family that carry table=name.
func (s scrape) tableSeries(name string) []string {
	var out []string
	for fam, f := range s {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "table" && l.GetValue() == name {
					out = append(out, fam)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestMetricsFollowApply: kmaterialize_table_keys and _generation are the
// file's after every follower apply, not only after a publish: the keys
// gauge equals the oracle's count once the follower applied records that
// add and delete keys.
func TestMetricsFollowApply(t *testing.T) {
	topic := newTopic(t)
	first := records(1, 30, 10)
	produce(t, topic, first)
	d := start(t, baseConfig(t, followedTable("live", topic, FollowSettings{})))
	waitFor(t, "state following", 60*time.Second, func() bool {
		return d.c.table(t, "live").State == StateFollowing
	})
	want := latestOracle(oracle{}, first)
	m := scrapeMetrics(t, d.c)
	if got := m.must(t, "kmaterialize_table_keys", "table", "live"); got != float64(len(want)) {
		t.Fatalf("keys after the build: %v, oracle %d", got, len(want))
	}
	gen := m.must(t, "kmaterialize_table_generation", "table", "live")

	// Keys k010..k039 are new: the apply adds rows the build did not have.
	more := records(2, 120, 40)
	produce(t, topic, more)
	want = latestOracle(want, more)
	hw := highs(t, topic, 1)
	waitFor(t, "the follower to apply the new records", 60*time.Second, func() bool {
		return caughtUp(d.c.table(t, "live"), hw)
	})
	rows, _, _ := d.c.scan(t, "live", 1000)
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("rows %v\noracle %v", rows, want)
	}
	if len(want) == len(latestOracle(oracle{}, first)) {
		t.Fatalf("the applied records left the key count at %d: the test shows nothing", len(want))
	}
	m = scrapeMetrics(t, d.c)
	if got := m.must(t, "kmaterialize_table_keys", "table", "live"); got != float64(len(want)) {
		t.Fatalf("keys after the follower applied: %v, oracle %d", got, len(want))
	}
	if got := m.must(t, "kmaterialize_table_generation", "table", "live"); got != gen {
		t.Fatalf("generation after applies: %v, want %v (applies publish no generation)", got, gen)
	}
}

// TestMetricsUpdateAndDrop: after POST update the keys gauge equals the
// oracle's count and the generation is the update's; the file size gauge
// is os.Stat's; a read transaction the store holds shows as the oldest
// read's age and an open read; once the table is out of the config and
// dropped, no series names it.
func TestMetricsUpdateAndDrop(t *testing.T) {
	topic := newTopic(t)
	first := records(1, 30, 10)
	produce(t, topic, first)
	cfg := baseConfig(t, kafkaTable("main", topic, nil), kafkaTable("other", topic, nil))
	cfg.Update = testUpdate
	d := start(t, cfg)
	for _, n := range []string{"main", "other"} {
		waitFor(t, n+" built", 60*time.Second, func() bool { g := d.c.table(t, n).Generation; return g != nil && *g > 0 })
	}
	want := latestOracle(oracle{}, first)
	m := scrapeMetrics(t, d.c)
	if got := m.must(t, "kmaterialize_table_keys", "table", "main"); got != float64(len(want)) {
		t.Fatalf("keys after the build: %v, oracle %d", got, len(want))
	}

	more := records(2, 120, 40)
	produce(t, topic, more)
	want = latestOracle(want, more)
	checkUpdated(t, d.c, "main")
	checkRows(t, d.c, "main", "after POST update", want)
	tj := d.c.table(t, "main")
	m = scrapeMetrics(t, d.c)
	if got := m.must(t, "kmaterialize_table_keys", "table", "main"); got != float64(len(want)) {
		t.Fatalf("keys after POST update: %v, oracle %d", got, len(want))
	}
	if got := m.must(t, "kmaterialize_table_generation", "table", "main"); tj.Generation == nil || got != float64(*tj.Generation) {
		t.Fatalf("generation after POST update: %v, GET says %v", got, tj.Generation)
	}

	// Idle (no follower, no run): the file's size is os.Stat's, and no
	// read transaction is open.
	fi, err := os.Stat(cfg.DBPath)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.must(t, "kmaterialize_db_file_size_bytes"); got != float64(fi.Size()) {
		t.Fatalf("file size gauge %v, os.Stat %d", got, fi.Size())
	}
	m.must(t, "kmaterialize_db_free_pages")
	m.must(t, "kmaterialize_db_pending_pages")
	if got := m.must(t, "kmaterialize_db_oldest_read_transaction_age_seconds"); got != 0 {
		t.Fatalf("oldest read transaction %vs old with none open", got)
	}
	// A read the store opened, held across a scrape, is the oldest.
	d.s.mu.Lock()
	db := d.s.db
	d.s.mu.Unlock()
	err = db.View(func(*bolt.Tx) error {
		m := scrapeMetrics(t, d.c)
		if age := m.must(t, "kmaterialize_db_oldest_read_transaction_age_seconds"); age <= 0 {
			t.Errorf("oldest read transaction age %v with one open", age)
		}
		if open := m.must(t, "kmaterialize_db_read_transactions_open"); open < 1 {
			t.Errorf("%v read transactions open with one held", open)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	if got := m.tableSeries("other"); len(got) == 0 {
		t.Fatal("no series names table other before its drop")
	}
	if err := d.s.SetTables([]Table{kafkaTable("main", topic, nil)}); err != nil {
		t.Fatal(err)
	}
	if r := d.c.do(t, "DELETE", "/v1/tables/other", nil); r.status != http.StatusOK {
		t.Fatalf("DELETE other: %d %s", r.status, r.body)
	}
	m = scrapeMetrics(t, d.c)
	if got := m.tableSeries("other"); len(got) != 0 {
		t.Fatalf("series of the dropped table remain: %v", got)
	}
	if _, ok := m.value("kmaterialize_table_keys", "table", "main"); !ok {
		t.Fatal("the drop of other took main's series too")
	}
}

// TestReloadStatus: a reload that fails (a config that does not load, as
// cmd reports it, or a table list SetTables refuses) shows in GET
// /v1/status with its reason and as kmaterialize_config_last_reload_success
// 0, the config's load time unchanged; a good reload clears it.
func TestReloadStatus(t *testing.T) {
	topic := newTopic(t)
	d := start(t, baseConfig(t, kafkaTable("main", topic, nil)))
	status := func() configStatus {
		t.Helper()
		r := d.c.get(t, "/v1/status")
		var st statusJSON
		if r.status != http.StatusOK || json.Unmarshal(r.body, &st) != nil {
			t.Fatalf("/v1/status: %d %s", r.status, r.body)
		}
		return st.Config
	}
	reloadMetrics := func() (ok, at float64) {
		m := scrapeMetrics(t, d.c)
		return m.must(t, "kmaterialize_config_last_reload_success"), m.must(t, "kmaterialize_config_last_reload_timestamp_seconds")
	}
	st := status()
	if !st.LastReloadOK || st.LastReloadError != "" || st.LoadedAt.IsZero() {
		t.Fatalf("status at the start: %+v, want loaded, no failure", st)
	}
	if ok, at := reloadMetrics(); ok != 1 || at != float64(st.LastReloadAt.UnixNano())/1e9 {
		t.Fatalf("metrics at the start: success %v at %v, status %+v", ok, at, st)
	}
	loaded := st.LoadedAt

	for _, tc := range []struct {
		name   string
		reload func() error
		reason string
	}{
		{"config does not load", func() error {
			err := errors.New("kmaterialize.yaml:3: tables[0].topic: required")
			d.s.ReloadFailed(err)
			return err
		}, "tables[0].topic: required"},
		{"SetTables refuses", func() error {
			return d.s.SetTables([]Table{kafkaTable("main", topic, nil), kafkaTable("main", topic, nil)})
		}, `"main"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.reload(); err == nil {
				t.Fatal("the bad reload was accepted")
			}
			st := status()
			if st.LastReloadOK || !strings.Contains(st.LastReloadError, tc.reason) || !st.LoadedAt.Equal(loaded) || !st.LastReloadAt.After(loaded) {
				t.Fatalf("status after a failed reload: %+v, want failed naming %q, loaded_at %v", st, tc.reason, loaded)
			}
			if ok, at := reloadMetrics(); ok != 0 || at != float64(st.LastReloadAt.UnixNano())/1e9 {
				t.Fatalf("metrics after a failed reload: success %v at %v, status %+v", ok, at, st)
			}
		})
	}

	if err := d.s.SetTables([]Table{kafkaTable("main", topic, nil)}); err != nil {
		t.Fatal(err)
	}
	st = status()
	if !st.LastReloadOK || st.LastReloadError != "" || !st.LoadedAt.After(loaded) || !st.LoadedAt.Equal(st.LastReloadAt) {
		t.Fatalf("status after a good reload: %+v, want it cleared and loaded again", st)
	}
	if ok, _ := reloadMetrics(); ok != 1 {
		t.Fatalf("kmaterialize_config_last_reload_success %v after a good reload", ok)
	}
}
