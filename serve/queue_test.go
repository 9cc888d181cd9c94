package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
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

// concurrency counts the builds going at once, as the builds themselves
// see it: independent of the server's own records.
type concurrency struct{ now, peak atomic.Int64 }

func (c *concurrency) enter() {
	n := c.now.Add(1)
	for {
		p := c.peak.Load()
		if n <= p || c.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (c *concurrency) leave() { c.now.Add(-1) }

// counted wraps tb's Build: it counts itself in cc, and while hold is set
// waits for a token on gate first.
func counted(tb Table, cc *concurrency, hold *atomic.Bool, gate chan struct{}) Table {
	build := tb.Build
	tb.Build = func(ctx context.Context, db *store.DB, log zerolog.Logger) (materialize.Report, error) {
		cc.enter()
		defer cc.leave()
		if hold != nil && hold.Load() {
			select {
			case <-gate:
			case <-ctx.Done():
				return materialize.Report{}, ctx.Err()
			}
		}
		return build(ctx, db, log)
	}
	return tb
}

// postAsync sends a POST from a goroutine of its own and hands back the
// answer (or the error) on the channel.
func postAsync(c *client, path string) <-chan response {
	out := make(chan response, 1)
	go func() {
		req, _ := http.NewRequest("POST", c.base+path, nil)
		resp, err := c.hc.Do(req)
		if err != nil {
			out <- response{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		out <- response{status: resp.StatusCode, header: resp.Header, body: b}
	}()
	return out
}

// TestQueueOneRunAtATime: with the default max_concurrent_runs (1), four
// tables' first builds and then four rebuilds requested at once never run
// two at a time, by the server's own run records (each run starts after
// the one before it ended, in FIFO order) and by the builds' own count;
// the requests are answered 202 while their runs wait, state queued; a
// ?wait=1 request waits through the queue; a scheduled run that finds its
// table queued is skipped and counted; and every table's rows equal an
// oracle's fold.
func TestQueueOneRunAtATime(t *testing.T) {
	const n = 4
	var cc concurrency
	var hold atomic.Bool
	gate := make(chan struct{})
	names := make([]string, n)
	topics := make([]string, n)
	wants := make([]oracle, n)
	var tables []Table
	for i := range names {
		names[i] = fmt.Sprintf("q%d", i)
		topics[i] = newTopic(t)
		recs := records(i, 60+10*i, 20)
		produce(t, topics[i], recs)
		wants[i] = latestOracle(nil, recs)
		tables = append(tables, counted(kafkaTable(names[i], topics[i], nil), &cc, &hold, gate))
	}
	d := start(t, baseConfig(t, tables...)) // MaxConcurrentRuns: the default
	c := d.c
	waitFor(t, "the four first builds", 120*time.Second, func() bool {
		for _, nm := range names {
			if c.table(t, nm).State != StateReady {
				return false
			}
		}
		return true
	})
	firsts := d.lastRuns(names)
	checkSerial(t, "first builds", firsts)

	// A second batch for each topic; the four rebuilds are requested at
	// once, the first held at its gate so that the others must queue.
	for i := range names {
		recs := records(10+i, 40, 30)
		produce(t, topics[i], recs)
		wants[i] = latestOracle(wants[i], recs)
	}
	hold.Store(true)
	ids := make([]uint64, n)
	for i := 0; i < n-1; i++ {
		r := c.do(t, "POST", "/v1/tables/"+names[i]+"/rebuild", nil)
		var body struct{ Run uint64 }
		if r.status != http.StatusAccepted || json.Unmarshal(r.body, &body) != nil || body.Run == 0 {
			t.Fatalf("POST rebuild %s: %d %s, want 202 {\"run\": ID}", names[i], r.status, r.body)
		}
		ids[i] = body.Run
	}
	waited := postAsync(c, "/v1/tables/"+names[n-1]+"/rebuild?wait=1")
	waitFor(t, "the last request queued", 30*time.Second, func() bool { return c.table(t, names[n-1]).State == StateQueued })
	waitFor(t, "the first rebuild at its gate", 30*time.Second, func() bool { return cc.now.Load() == 1 })
	if st := c.table(t, names[0]); st.State != StateRebuilding || st.Run == nil || st.Run.ID != ids[0] || st.Run.Phase != "reading" {
		t.Fatalf("%s: state %s run %+v, want rebuilding run %d reading", names[0], st.State, st.Run, ids[0])
	}
	for i := 1; i < n; i++ {
		st := c.table(t, names[i])
		if st.State != StateQueued || st.Run == nil || st.Run.Phase != "queued" || st.Run.Started != nil {
			t.Fatalf("%s: state %s run %+v, want queued (not started)", names[i], st.State, st.Run)
		}
	}
	// The queued table's schedule fires: skipped and counted.
	d.s.scheduledRun(names[1])
	if st := c.table(t, names[1]); st.SkippedRuns != 1 || st.State != StateQueued || st.Run.ID != ids[1] {
		t.Fatalf("%s after a scheduled run found it queued: skipped %d state %s run %+v", names[1], st.SkippedRuns, st.State, st.Run)
	}
	// A second request finds it queued: 409 naming the queued run.
	if r := c.do(t, "POST", "/v1/tables/"+names[2]+"/rebuild", nil); r.status != http.StatusConflict || r.apiErr(t).Run != ids[2] {
		t.Fatalf("POST rebuild of a queued table: %d %s, want 409 naming run %d", r.status, r.body, ids[2])
	}
	if cc.now.Load() != 1 || cc.peak.Load() != 1 {
		t.Fatalf("%d builds going (peak %d) while one is held, want 1", cc.now.Load(), cc.peak.Load())
	}

	hold.Store(false)
	close(gate)
	var res rebuildResult
	select {
	case r := <-waited:
		if r.status != http.StatusOK || json.Unmarshal(r.body, &res) != nil || res.Error != nil || res.Generation == nil {
			t.Fatalf("POST rebuild?wait=1 through the queue: %d %s", r.status, r.body)
		}
	case <-time.After(120 * time.Second):
		t.Fatal("the ?wait=1 request did not return after the queue drained")
	}
	ids[n-1] = res.Run
	waitFor(t, "the four rebuilds", 120*time.Second, func() bool {
		runs := d.lastRuns(names)
		for i := range names {
			if runs[i].ID != ids[i] {
				return false
			}
		}
		return true
	})
	runs := d.lastRuns(names)
	checkSerial(t, "rebuilds", runs)
	for i := 1; i < n; i++ {
		if !runs[i].Started.After(runs[i-1].Started) {
			t.Fatalf("run %d of %s started before run %d of %s: not FIFO", runs[i].ID, names[i], runs[i-1].ID, names[i-1])
		}
	}
	if cc.peak.Load() != 1 {
		t.Fatalf("the builds saw %d going at once, want 1", cc.peak.Load())
	}
	for i, nm := range names {
		if runs[i].Err != nil {
			t.Fatalf("%s: %v", nm, runs[i].Err)
		}
		got, _, _ := c.scan(t, nm, 17)
		if diff := cmp.Diff(wants[i], got); diff != "" {
			t.Fatalf("table %s after its queued rebuild (-want +got):\n%s", nm, diff)
		}
	}
}

// lastRuns returns each table's last ended run, from the server's records.
func (d *daemon) lastRuns(names []string) []runResult {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	out := make([]runResult, len(names))
	for i, n := range names {
		if st := d.s.runs[n]; st != nil && st.last != nil {
			out[i] = *st.last
		}
	}
	return out
}

// checkSerial fails unless no two of runs overlap in time.
func checkSerial(t *testing.T, what string, runs []runResult) {
	t.Helper()
	sorted := append([]runResult(nil), runs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Started.Before(sorted[j].Started) })
	for i, r := range sorted {
		if r.Started.IsZero() || r.Ended.Before(r.Started) {
			t.Fatalf("%s: run %d has no start or ends before it starts: %+v", what, r.ID, r)
		}
		if i > 0 && r.Started.Before(sorted[i-1].Ended) {
			t.Fatalf("%s: run %d started at %s, before run %d ended at %s: two runs at once",
				what, r.ID, r.Started.Format(time.RFC3339Nano), sorted[i-1].ID, sorted[i-1].Ended.Format(time.RFC3339Nano))
		}
	}
}

// TestCancelAndShutdown: POST cancel removes a queued run and cancels a
// reading one, each then ending with a last_error that says cancelled
// (the table served as it was); with nothing queued or going it is 404
// no_run. The shutdown then drops the queued run and cancels the reading
// one: both end cancelled at shutdown, and Run returns nil.
func TestCancelAndShutdown(t *testing.T) {
	names := []string{"a", "b", "c"}
	builds := make([]atomic.Int64, len(names))
	release := make([]chan struct{}, len(names))
	var tables []Table
	for i, n := range names {
		release[i] = make(chan struct{}, 4)
		release[i] <- struct{}{} // the build at start goes through
		tables = append(tables, storeTable(n, "", &builds[i], release[i]))
	}
	d := start(t, baseConfig(t, tables...))
	c := d.c
	waitFor(t, "the first builds", 30*time.Second, func() bool {
		for _, n := range names {
			if c.table(t, n).State != StateReady {
				return false
			}
		}
		return true
	})
	post := func(path string, want int) response {
		t.Helper()
		r := c.do(t, "POST", path, nil)
		if r.status != want {
			t.Fatalf("POST %s: %d %s, want %d", path, r.status, r.body, want)
		}
		return r
	}
	gens := map[string]uint64{}
	for _, n := range names {
		gens[n] = *c.table(t, n).Generation
	}
	if e := post("/v1/tables/a/cancel", http.StatusNotFound).apiErr(t); e.Code != api.CodeNoRun {
		t.Fatalf("cancel with no run: code %s", e.Code)
	}
	for _, n := range names {
		post("/v1/tables/"+n+"/rebuild", http.StatusAccepted)
	}
	waitFor(t, "a's rebuild reading", 30*time.Second, func() bool { return builds[0].Load() == 2 })
	if st := c.table(t, "b"); st.State != StateQueued {
		t.Fatalf("b: state %s, want queued", st.State)
	}
	var cj cancelJSON
	if r := post("/v1/tables/b/cancel", http.StatusOK); json.Unmarshal(r.body, &cj) != nil || cj.Phase != "queued" {
		t.Fatalf("cancel of the queued run: %s", r.body)
	}
	if r := post("/v1/tables/a/cancel", http.StatusOK); json.Unmarshal(r.body, &cj) != nil || cj.Phase != "reading" {
		t.Fatalf("cancel of the reading run: %s", r.body)
	}
	for _, n := range []string{"a", "b"} {
		waitFor(t, n+"'s run cancelled", 30*time.Second, func() bool { return c.table(t, n).LastError != nil })
		st := c.table(t, n)
		if st.State != StateFailed || !strings.HasPrefix(st.LastError.Error, "cancelled by request") || *st.Generation != gens[n] {
			t.Fatalf("%s after cancel: state %s last_error %+v generation %d, want failed, cancelled, generation %d", n, st.State, st.LastError, *st.Generation, gens[n])
		}
		if rows, _, _ := c.scan(t, n, 10); !cmp.Equal(rows, oracle{"run": "1"}) {
			t.Fatalf("%s after cancel: rows %v, want the first build's", n, rows)
		}
	}
	if builds[1].Load() != 1 {
		t.Fatalf("b's cancelled queued run built (%d builds)", builds[1].Load())
	}
	// c's run starts once a's ended; b queues behind it; then shutdown.
	waitFor(t, "c's rebuild reading", 30*time.Second, func() bool { return builds[2].Load() == 2 })
	post("/v1/tables/b/rebuild", http.StatusAccepted)
	if st := c.table(t, "b"); st.State != StateQueued {
		t.Fatalf("b: state %s, want queued behind c", st.State)
	}
	d.stop(t)
	runs := d.lastRuns([]string{"b", "c"})
	for i, n := range []string{"b", "c"} {
		var ce *CancelledError
		if !errors.As(runs[i].Err, &ce) || ce.Why != "at shutdown" {
			t.Fatalf("%s's run at shutdown ended with %v, want cancelled at shutdown", n, runs[i].Err)
		}
	}
	if builds[1].Load() != 1 {
		t.Fatalf("b's queued run started during shutdown (%d builds)", builds[1].Load())
	}
}

// TestQueueFollowRebuildFirst: a rebuild that rebuild_if_needed starts
// because following stopped (trigger follow) goes to the front of the
// queue: it starts before a request queued earlier.
func TestQueueFollowRebuildFirst(t *testing.T) {
	names := []string{"a", "b", "c"}
	builds := make([]atomic.Int64, len(names))
	release := make([]chan struct{}, len(names))
	var tables []Table
	for i, n := range names {
		release[i] = make(chan struct{}, 4)
		release[i] <- struct{}{}
		tables = append(tables, storeTable(n, "", &builds[i], release[i]))
	}
	d := start(t, baseConfig(t, tables...))
	c := d.c
	waitFor(t, "the first builds", 30*time.Second, func() bool {
		return c.table(t, "a").State == StateReady && c.table(t, "b").State == StateReady && c.table(t, "c").State == StateReady
	})
	release[1] <- struct{}{}
	release[2] <- struct{}{}
	if r := c.do(t, "POST", "/v1/tables/a/rebuild", nil); r.status != http.StatusAccepted {
		t.Fatalf("POST rebuild a: %d %s", r.status, r.body)
	}
	waitFor(t, "a's rebuild going", 30*time.Second, func() bool { return builds[0].Load() == 2 })
	if r := c.do(t, "POST", "/v1/tables/b/rebuild", nil); r.status != http.StatusAccepted {
		t.Fatalf("POST rebuild b: %d %s", r.status, r.body)
	}
	if _, err := d.s.startRun("c", triggerFollow); err != nil {
		t.Fatal(err)
	}
	d.s.mu.Lock()
	var order []string
	for _, r := range d.s.queue {
		order = append(order, r.table)
	}
	d.s.mu.Unlock()
	if !cmp.Equal(order, []string{"c", "b"}) {
		t.Fatalf("queue %v, want [c b]: the follow rebuild first", order)
	}
	release[0] <- struct{}{}
	waitFor(t, "b and c rebuilt", 30*time.Second, func() bool { return builds[1].Load() == 2 && builds[2].Load() == 2 })
	waitFor(t, "b's run ended", 30*time.Second, func() bool { return c.table(t, "b").State == StateReady })
	runs := d.lastRuns([]string{"b", "c"})
	checkSerial(t, "b and c", runs)
	if !runs[1].Started.Before(runs[0].Started) {
		t.Fatalf("c's follow rebuild started at %s, after b's request at %s", runs[1].Started, runs[0].Started)
	}
}

// TestDropTakesRunLock: a DELETE of a table (no longer configured) while
// an update of it goes is 409 run_in_progress naming the run and drops
// nothing; once the update ended, the drop goes through.
func TestDropTakesRunLock(t *testing.T) {
	var builds atomic.Int64
	entered, release := make(chan struct{}, 1), make(chan struct{})
	cfg := baseConfig(t, storeTable("x", "", &builds, nil))
	cfg.Update = func(ctx context.Context, db *store.DB, table string, _ bool, _ zerolog.Logger) (materialize.Report, error) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return materialize.Report{}, ctx.Err()
		}
		m, err := db.Table(table)
		return materialize.Report{Meta: m}, err
	}
	d := start(t, cfg)
	c := d.c
	waitFor(t, "x built", 30*time.Second, func() bool { return c.table(t, "x").State == StateReady })
	if err := d.s.SetTables(nil); err != nil {
		t.Fatal(err)
	}
	upd := postAsync(c, "/v1/tables/x/update")
	<-entered // the condition: the update is going
	r := c.do(t, "DELETE", "/v1/tables/x", nil)
	if e := r.apiErr(t); r.status != http.StatusConflict || e.Code != api.CodeRunInProgress || e.Run == 0 {
		t.Fatalf("DELETE during an update: %d %s, want 409 run_in_progress naming the run", r.status, r.body)
	}
	if st := c.table(t, "x"); st.Generation == nil {
		t.Fatal("the refused drop dropped the table")
	}
	close(release)
	if r := <-upd; r.status != http.StatusOK {
		t.Fatalf("update: %d %s", r.status, r.body)
	}
	if r := c.do(t, "DELETE", "/v1/tables/x", nil); r.status != http.StatusOK {
		t.Fatalf("DELETE after the update: %d %s", r.status, r.body)
	}
	if r := c.get(t, "/v1/tables/x"); r.status != http.StatusNotFound {
		t.Fatalf("GET after the drop: %d %s", r.status, r.body)
	}
}
