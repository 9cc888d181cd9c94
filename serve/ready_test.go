package serve

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/store"
)

// TestReadinessAndReload: /readyz is 503 naming each table not published
// and why (first build running; first build failed) and 200 once every
// configured table is published; SetTables builds an added table, and a
// removed one is no longer rebuilt but stays readable.
func TestReadinessAndReload(t *testing.T) {
	topicA, topicC := newTopic(t), newTopic(t)
	recsA, recsC := records(1, 80, 25), records(3, 50, 15)
	produce(t, topicA, recsA)
	produce(t, topicC, recsC)
	wantA, wantC := latestOracle(nil, recsA), latestOracle(nil, recsC)

	gate := make(chan struct{})
	a := kafkaTable("a", topicA, nil)
	build := a.Build
	a.Build = func(ctx context.Context, db *store.DB, log zerolog.Logger) (materialize.Report, error) {
		select {
		case <-gate:
		case <-ctx.Done():
			return materialize.Report{}, ctx.Err()
		}
		return build(ctx, db, log)
	}
	b := kafkaTable("b", "missing-"+topicA, nil) // the topic does not exist: its build fails
	cfg := baseConfig(t, a, b)
	cfg.MaxConcurrentRuns = 2    // a is held at its gate while b fails
	cfg.RetryBackoff = time.Hour // b stays failed (its retry is not due) while the test looks
	d := start(t, cfg)
	c := d.c

	waitFor(t, "b's first build to fail", 60*time.Second, func() bool { return c.table(t, "b").State == StateFailed })
	r := c.get(t, "/readyz")
	e := r.apiErr(t)
	if r.status != http.StatusServiceUnavailable || e.Code != api.CodeNotReady || len(e.Tables) != 2 {
		t.Fatalf("readyz before any publish: %d %s", r.status, r.body)
	}
	if e.Tables[0].Name != "a" || e.Tables[0].State != StateBuilding || e.Tables[0].Reason != "its first build is running" ||
		e.Tables[1].Name != "b" || e.Tables[1].State != StateFailed || !strings.Contains(e.Tables[1].Reason, "exit code 5") {
		t.Fatalf("readyz tables %+v: want a building, b failed with exit code 5", e.Tables)
	}
	if r := c.get(t, "/v1/tables/a/keys/k001"); r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("key of a table building: %d %s", r.status, r.body)
	}
	if r := c.get(t, "/healthz"); r.status != 200 {
		t.Fatalf("healthz while not ready: %d", r.status)
	}

	close(gate)
	waitFor(t, "a published", 60*time.Second, func() bool { return c.table(t, "a").State == StateReady })
	if r := c.get(t, "/readyz"); r.status != http.StatusServiceUnavailable || len(r.apiErr(t).Tables) != 1 {
		t.Fatalf("readyz with b still failed: %d %s", r.status, r.body)
	}

	// Reload: b removed, c added.
	if err := d.s.SetTables([]Table{a, kafkaTable("c", topicC, nil)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "readyz 200 after c's build", 60*time.Second, func() bool { return c.get(t, "/readyz").status == 200 })
	rowsC, _, _ := c.scan(t, "c", 100)
	if diff := cmp.Diff(wantC, rowsC); diff != "" {
		t.Fatalf("added table c (-oracle +got):\n%s", diff)
	}
	if r := c.get(t, "/v1/tables/b"); r.status != http.StatusNotFound {
		t.Fatalf("removed, never published b: %d %s", r.status, r.body)
	}

	// Reload: a removed. Still served, no longer rebuilt.
	if err := d.s.SetTables([]Table{kafkaTable("c", topicC, nil)}); err != nil {
		t.Fatal(err)
	}
	tj := c.table(t, "a")
	if tj.Configured || tj.State != StateReady {
		t.Fatalf("removed table a: configured %v state %s", tj.Configured, tj.State)
	}
	rowsA, _, _ := c.scan(t, "a", 100)
	if diff := cmp.Diff(wantA, rowsA); diff != "" {
		t.Fatalf("removed table a (-oracle +got):\n%s", diff)
	}
	if r := c.do(t, "POST", "/v1/tables/a/rebuild", nil); r.status != http.StatusNotFound || r.apiErr(t).Code != api.CodeTableNotConfigured {
		t.Fatalf("rebuild of a removed table: %d %s", r.status, r.body)
	}
	if r := c.get(t, "/readyz"); r.status != 200 {
		t.Fatalf("readyz: %d %s", r.status, r.body)
	}
	// An invalid list changes nothing.
	if err := d.s.SetTables([]Table{{Name: "x"}}); err == nil {
		t.Fatal("SetTables accepted a table without Build")
	}
	if !c.table(t, "c").Configured {
		t.Fatal("an invalid SetTables changed the tables")
	}
}
