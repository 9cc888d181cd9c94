package serve

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/store"
)

// TestFirstBuildRetriedUntilTopicExists: the daemon starts before its
// table's topic exists. The first build fails with exit code 5 and is
// retried by itself with a doubling backoff capped at retry_backoff_max;
// meanwhile a read is 503 table_build_failed with the reason and the next
// retry, and GET shows the retry beside the state. Once the topic is
// created, the table is built without a request, its rows equal to an
// oracle's fold, and the retry is gone.
func TestFirstBuildRetriedUntilTopicExists(t *testing.T) {
	topic := unique(t, "late-topic")
	cfg := baseConfig(t, kafkaTable("late", topic, nil))
	cfg.RetryBackoff, cfg.RetryBackoffMax = 20*time.Millisecond, 80*time.Millisecond
	d := start(t, cfg)
	c := d.c

	// The condition: several failed attempts, the backoff at its cap.
	var tj tableJSON
	waitFor(t, "four failed attempts", 60*time.Second, func() bool {
		tj = c.table(t, "late")
		return tj.Retry != nil && tj.Retry.Attempts >= 4 && tj.Retry.Next != nil
	})
	if tj.State != StateFailed && tj.State != StateBuilding && tj.State != StateQueued {
		t.Fatalf("state %s with a retry planned", tj.State)
	}
	if tj.Retry.Backoff != (80 * time.Millisecond).String() {
		t.Fatalf("backoff %s after %d attempts, want the cap 80ms", tj.Retry.Backoff, tj.Retry.Attempts)
	}
	if tj.LastError == nil || tj.LastError.ExitCode != 5 {
		t.Fatalf("last_error %+v, want exit code 5", tj.LastError)
	}
	// A read between attempts: 503 table_build_failed, the reason, the
	// next retry. (During an attempt it is table_not_ready.)
	var e apiError
	waitFor(t, "a read answered table_build_failed", 60*time.Second, func() bool {
		r := c.get(t, "/v1/tables/late/keys/k001")
		if r.status != http.StatusServiceUnavailable {
			t.Fatalf("read of a table never built: %d %s", r.status, r.body)
		}
		e = r.apiErr(t)
		return e.Code == api.CodeTableBuildFailed
	})
	if e.ExitCode != 5 || !strings.Contains(e.Reason, topic) || e.NextRetry == nil || e.Attempts < 1 {
		t.Fatalf("table_build_failed %+v: want exit code 5, the reason naming topic %s, next_retry and attempts", e, topic)
	}
	if _, err := time.Parse(time.RFC3339Nano, *e.NextRetry); err != nil {
		t.Fatalf("next_retry %q: %v", *e.NextRetry, err)
	}

	// The topic appears: the table is built by a retry, no request made.
	broker.TestTopic(t, topic, 1, nil)
	recs := records(1, 90, 30)
	produce(t, topic, recs)
	want := latestOracle(nil, recs)
	waitFor(t, "the table built by a retry", 60*time.Second, func() bool { return c.table(t, "late").State == StateReady })
	tj = c.table(t, "late")
	if tj.Retry != nil || tj.LastError != nil {
		t.Fatalf("after the build: retry %+v last_error %+v, want none", tj.Retry, tj.LastError)
	}
	// A retry may run between the topic's creation and the produce: the
	// table it builds holds what its positions say it applied, no more,
	// no less. A rebuild then takes the rest.
	r := c.get(t, "/v1/tables/late/rows?limit=1000")
	pos, err := api.ParsePositions(r.header.Get(HeaderPositions))
	if err != nil {
		t.Fatalf("positions of the retry's table %q: %v", r.header.Get(HeaderPositions), err)
	}
	applied := pos[0]
	if applied < 0 || applied > int64(len(recs)) {
		t.Fatalf("the retry's table at %v, past the %d records produced", pos, len(recs))
	}
	got, _, _ := c.scan(t, "late", 25)
	if diff := cmp.Diff(latestOracle(nil, recs[:applied]), got); diff != "" {
		t.Fatalf("table built by a retry at %v (-want +got):\n%s", pos, diff)
	}
	if applied < int64(len(recs)) {
		if r := c.do(t, "POST", "/v1/tables/late/rebuild?wait=1", nil); r.status != http.StatusOK {
			t.Fatalf("rebuild after the retry's build at %v: %d %s", pos, r.status, r.body)
		}
		got, _, _ = c.scan(t, "late", 25)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("table after every record (-want +got):\n%s", diff)
	}
}

// TestFirstBuildNotRetriedUntilReload: a first build that fails for a
// cause that does not pass by itself (not exit code 5) plans no retry; a
// read says so (no next_retry); a reload (SetTables, SIGHUP) tries it
// again, and a request does too.
func TestFirstBuildNotRetriedUntilReload(t *testing.T) {
	var builds atomic.Int64
	bad := Table{Name: "bad", Topic: "-", Fold: "latest",
		Build: func(ctx context.Context, db *store.DB, log zerolog.Logger) (materialize.Report, error) {
			builds.Add(1)
			return materialize.Report{}, errors.New("a definition the daemon refuses")
		}}
	cfg := baseConfig(t, bad)
	cfg.RetryBackoff = 10 * time.Millisecond
	d := start(t, cfg)
	c := d.c
	waitFor(t, "the first build to fail", 30*time.Second, func() bool { return c.table(t, "bad").State == StateFailed })
	if tj := c.table(t, "bad"); tj.Retry != nil || tj.LastError == nil || tj.LastError.ExitCode != 1 {
		t.Fatalf("failed with exit code 1: retry %+v last_error %+v, want no retry", tj.Retry, tj.LastError)
	}
	r := c.get(t, "/v1/tables/bad/rows")
	if e := r.apiErr(t); r.status != http.StatusServiceUnavailable || e.Code != api.CodeTableBuildFailed || e.NextRetry != nil || e.ExitCode != 1 {
		t.Fatalf("read: %d %s, want 503 table_build_failed without next_retry", r.status, r.body)
	}
	if err := d.s.SetTables([]Table{bad}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reload's retry", 30*time.Second, func() bool { return builds.Load() == 2 && c.table(t, "bad").State == StateFailed })
	if r := c.do(t, "POST", "/v1/tables/bad/rebuild?wait=1", nil); r.status != http.StatusOK || builds.Load() != 3 {
		t.Fatalf("requested rebuild: %d %s, %d builds", r.status, r.body, builds.Load())
	}
}
