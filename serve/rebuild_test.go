package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/store"
)

// rebuildSetup publishes a first generation of table t from a first batch,
// then writes a second batch, one record per produce request, so that a
// rebuild with small fetches needs a fetch per record and one can be parked
// in its middle. It returns the daemon, both oracles and the first
// generation.
func rebuildSetup(t *testing.T, cfg func(*Config)) (d *daemon, topic string, old, neu oracle, gen1 uint64) {
	t.Helper()
	topic = newTopic(t)
	first := records(1, 200, 40)
	produce(t, topic, first)
	old = latestOracle(nil, first)
	c := baseConfig(t, kafkaTable("t", topic, smallFetches()))
	if cfg != nil {
		cfg(&c)
	}
	d = start(t, c)
	waitFor(t, "the first build", 60*time.Second, func() bool { return d.c.table(t, "t").State == StateReady })
	gen1 = *d.c.table(t, "t").Generation
	second := records(2, 120, 60)
	if _, err := broker.ProduceEach(context.Background(), topic, second); err != nil {
		t.Fatal(err)
	}
	return d, topic, old, latestOracle(old, second), gen1
}

// parkMidRebuild parks the rebuild's first fetch past the middle of the
// second batch; released at the latest when the test ends.
func parkMidRebuild(t *testing.T, topic string) *localkafka.ParkedFetch {
	t.Helper()
	localkafka.KfakeOnly(t)
	p := broker.ParkFetch(topic, 260)
	t.Cleanup(p.Release)
	return p
}

// waitParked waits until the broker holds the parked fetch.
func waitParked(t *testing.T, p *localkafka.ParkedFetch) {
	t.Helper()
	select {
	case <-p.Seen:
	case <-time.After(60 * time.Second):
		t.Fatal("the rebuild's fetch was never parked")
	}
}

// TestReadsDuringRebuildSwitchAtPublish holds a rebuild in the middle of its
// read (a parked fetch) and reads the table repeatedly: every read answers
// from the old generation and equals its oracle until the publish, and from
// the new one, equal to the new oracle, after; never an error, never a mix.
// A second rebuild request meanwhile gets 409, and a page pinned to the old
// generation gets 409 once it is gone.
func TestReadsDuringRebuildSwitchAtPublish(t *testing.T) {
	localkafka.KfakeOnly(t) // parkMidRebuild holds a fetch (kfake ControlKey)
	d, topic, old, neu, gen1 := rebuildSetup(t, nil)
	c := d.c
	p := parkMidRebuild(t, topic)

	r := c.do(t, "POST", "/v1/tables/t/rebuild", nil)
	var started struct{ Run uint64 }
	if r.status != http.StatusAccepted || json.Unmarshal(r.body, &started) != nil || started.Run == 0 {
		t.Fatalf("POST rebuild: %d %s, want 202 {\"run\": ID}", r.status, r.body)
	}
	waitParked(t, p)
	r = c.do(t, "POST", "/v1/tables/t/rebuild", nil)
	if e := r.apiErr(t); r.status != http.StatusConflict || e.Code != api.CodeRunInProgress || e.Run != started.Run {
		t.Fatalf("second POST: %d %s, want 409 run_in_progress naming run %d", r.status, r.body, started.Run)
	}
	if tj := c.table(t, "t"); tj.State != StateRebuilding || *tj.Generation != gen1 || tj.Run == nil || tj.Run.ID != started.Run {
		t.Fatalf("table during the rebuild: state %s generation %d run %+v", tj.State, *tj.Generation, tj.Run)
	}
	// A scan whose first page came from the old generation.
	first := c.get(t, "/v1/tables/t/rows?limit=5")
	if first.gen(t) != gen1 {
		t.Fatalf("first page from generation %d, want %d", first.gen(t), gen1)
	}

	for i := 0; i < 10; i++ {
		rows, gen, ok := c.scan(t, "t", 9)
		if !ok || gen != gen1 {
			t.Fatalf("read %d during the held rebuild: generation %d ok %v, want %d", i, gen, ok, gen1)
		}
		if diff := cmp.Diff(old, rows); diff != "" {
			t.Fatalf("read %d during the held rebuild (-old oracle +got):\n%s", i, diff)
		}
		checkKeys(t, c, "t", gen1, old, nil, neu)
	}

	p.Release()
	var gen2 uint64
	after := 0
	deadline := time.Now().Add(90 * time.Second)
	for after < 5 {
		if time.Now().After(deadline) {
			t.Fatal("the rebuild never published")
		}
		rows, gen, ok := c.scan(t, "t", 9)
		if !ok {
			continue // the publish came between two pages: start again
		}
		want := old
		switch {
		case gen == gen1 && gen2 != 0:
			t.Fatalf("a read went back to generation %d after %d answered", gen1, gen2)
		case gen == gen1:
		case gen2 == 0 && gen > gen1:
			gen2 = gen
			fallthrough
		case gen == gen2:
			want = neu
			after++
		default:
			t.Fatalf("read answered from generation %d (old %d, new %d)", gen, gen1, gen2)
		}
		if diff := cmp.Diff(want, rows); diff != "" {
			t.Fatalf("read from generation %d (-oracle +got):\n%s", gen, diff)
		}
		checkKeys(t, c, "t", gen1, old, &gen2, neu)
	}
	r = c.get(t, fmt.Sprintf("/v1/tables/t/rows?limit=5&after=%s&generation=%d", lastKey(t, first.body), gen1))
	if e := r.apiErr(t); r.status != http.StatusConflict || e.Code != api.CodeGenerationGone {
		t.Fatalf("page pinned to the gone generation: %d %s, want 409 generation_gone", r.status, r.body)
	}

	// wait=1 runs one more rebuild to its end, once the first run has
	// ended: its publish is visible a moment before the run is recorded as
	// ended, and a POST in between is (rightly) 409 run_in_progress.
	for end := time.Now().Add(30 * time.Second); c.table(t, "t").Run != nil; {
		if time.Now().After(end) {
			t.Fatal("the first run never ended after its publish")
		}
		time.Sleep(10 * time.Millisecond)
	}
	r = c.do(t, "POST", "/v1/tables/t/rebuild?wait=1", nil)
	var res rebuildResult
	if r.status != http.StatusOK || json.Unmarshal(r.body, &res) != nil || res.ExitCode != 0 || res.Error != nil || res.Generation == nil || *res.Generation <= gen2 {
		t.Fatalf("POST rebuild?wait=1: %d %s, want 200 exit_code 0 and a generation above %d", r.status, r.body, gen2)
	}
	rows, gen, _ := c.scan(t, "t", 50)
	if diff := cmp.Diff(neu, rows); diff != "" || gen != *res.Generation {
		t.Fatalf("after wait=1 (generation %d, reported %d) (-oracle +got):\n%s", gen, *res.Generation, diff)
	}
	if tj := c.table(t, "t"); tj.State != StateReady || tj.LastError != nil {
		t.Fatalf("state %s last_error %+v", tj.State, tj.LastError)
	}
}

// checkKeys reads a few keys one by one: each answer must equal the oracle
// of the generation that answered it.
// genB is the new generation once seen (0 before); nil when no new
// generation may answer.
func checkKeys(t *testing.T, c *client, table string, genA uint64, a oracle, genB *uint64, b oracle) {
	t.Helper()
	for _, k := range []string{"k001", "k010", "k039", "k045", "k059"} {
		r := c.get(t, "/v1/tables/"+table+"/keys/"+k)
		want := a
		g := r.gen(t)
		if genB != nil && *genB == 0 && g > genA {
			*genB = g
		}
		switch {
		case genB != nil && g == *genB:
			want = b
		case g != genA:
			t.Fatalf("key %s answered from generation %d (old %d, new %v)", k, g, genA, genB)
		}
		v, present := want[k]
		switch {
		case present && (r.status != 200 || string(r.body) != v):
			t.Fatalf("key %s: %d %q, oracle %q", k, r.status, r.body, v)
		case !present && r.status != 404:
			t.Fatalf("key %s: %d %q, oracle: absent", k, r.status, r.body)
		}
	}
}

func lastKey(t *testing.T, page []byte) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(string(page)), "\n")
	var kv map[string]string
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &kv); err != nil {
		t.Fatal(err)
	}
	return kv["key"]
}

// TestFailedRunKeepsOldTable deletes the topic under a published table: the
// next run fails with the exit code the CLI gives (5), the table stays
// served as it was, and its state and last_error say so.
func TestFailedRunKeepsOldTable(t *testing.T) {
	topic := newTopic(t)
	recs := records(1, 100, 30)
	produce(t, topic, recs)
	want := latestOracle(nil, recs)
	d := start(t, baseConfig(t, kafkaTable("t", topic, nil)))
	c := d.c
	waitFor(t, "the first build", 60*time.Second, func() bool { return c.table(t, "t").State == StateReady })
	gen1 := *c.table(t, "t").Generation

	// Awaited until metadata no longer lists it: Kafka deletes
	// asynchronously.
	if err := broker.DeleteTopic(context.Background(), topic); err != nil {
		t.Fatal(err)
	}

	r := c.do(t, "POST", "/v1/tables/t/rebuild?wait=1", nil)
	var res rebuildResult
	if r.status != http.StatusOK || json.Unmarshal(r.body, &res) != nil {
		t.Fatalf("POST rebuild?wait=1: %d %s", r.status, r.body)
	}
	if res.ExitCode != 5 || res.Error == nil || *res.Error == "" || res.Generation == nil || *res.Generation != gen1 {
		t.Fatalf("run result %s: want exit_code 5, an error, generation %d", r.body, gen1)
	}
	tj := c.table(t, "t")
	if tj.State != StateFailed || *tj.Generation != gen1 || tj.LastError == nil || tj.LastError.ExitCode != 5 || tj.LastError.Error != *res.Error {
		t.Fatalf("table after the failed run: %+v (last_error %+v)", tj, tj.LastError)
	}
	rows, gen, _ := c.scan(t, "t", 1000)
	if diff := cmp.Diff(want, rows); diff != "" || gen != gen1 {
		t.Fatalf("table after the failed run, generation %d (-oracle +got):\n%s", gen, diff)
	}
	if r := c.get(t, "/readyz"); r.status != 200 {
		t.Fatalf("readyz %d %s: a failed rebuild over a published table is still ready", r.status, r.body)
	}
	m := c.get(t, "/metrics")
	if !strings.Contains(string(m.body), `kmaterialize_rebuilds_total{outcome="failed",table="t"} 1`) {
		t.Fatal("metrics do not count the failed rebuild")
	}
}

// TestShutdownMidRebuild ends Run while a rebuild is held in the middle of
// its read: Run returns nil, removes its socket and holder record, publishes
// nothing, and the next start serves the old table (and publishes on its
// next run). No goroutine of Run outlives it.
func TestShutdownMidRebuild(t *testing.T) {
	localkafka.KfakeOnly(t) // parkMidRebuild holds a fetch (kfake ControlKey)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	d, topic, old, neu, gen1 := rebuildSetup(t, nil)
	p := parkMidRebuild(t, topic)
	// A request in flight when the shutdown starts: it waits for the run.
	answer := make(chan response, 1)
	go func() {
		resp, err := d.c.hc.Post(d.c.base+"/v1/tables/t/rebuild?wait=1", "", nil)
		if err != nil {
			answer <- response{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answer <- response{status: resp.StatusCode, body: b}
	}()
	waitParked(t, p)

	// End Run first, then let the fetch go: the rebuild sees its context
	// ended before it could publish.
	d.cancel()
	p.Release()
	// The request in flight is answered: the run ended, interrupted, and
	// the old generation is what is published.
	r := <-answer
	var res rebuildResult
	if r.status != http.StatusOK || json.Unmarshal(r.body, &res) != nil || res.ExitCode != 4 || res.Error == nil ||
		!strings.Contains(*res.Error, "context canceled") || res.Generation == nil || *res.Generation != gen1 {
		t.Fatalf("request in flight at shutdown: %d %s, want 200 with exit_code 4 and generation %d", r.status, r.body, gen1)
	}
	d.stop(t)
	for _, f := range []string{d.s.cfg.Socket, store.HolderPath(d.s.cfg.DBPath)} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after Run returned (%v)", f, err)
		}
	}
	db, err := store.Open(d.s.cfg.DBPath, &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	got := oracle{}
	meta, err := db.Table("t")
	if err == nil {
		err = db.Scan("t", nil, 0, func(k, v []byte) error { got[string(k)] = string(v); return nil })
	}
	db.Close()
	if err != nil || meta.Generation != gen1 {
		t.Fatalf("after shutdown: generation %d (%v), want %d", meta.Generation, err, gen1)
	}
	if diff := cmp.Diff(old, got); diff != "" {
		t.Fatalf("after shutdown (-old oracle +got):\n%s", diff)
	}

	// The next start serves the old table, starts no build for it, and
	// publishes the new data on its next run.
	cfg := d.s.cfg.Config
	d2 := start(t, cfg)
	if tj := d2.c.table(t, "t"); tj.State != StateReady || *tj.Generation != gen1 || tj.Run != nil {
		t.Fatalf("after restart: state %s generation %d run %+v", tj.State, *tj.Generation, tj.Run)
	}
	rows, _, _ := d2.c.scan(t, "t", 100)
	if diff := cmp.Diff(old, rows); diff != "" {
		t.Fatalf("after restart (-old oracle +got):\n%s", diff)
	}
	r = d2.c.do(t, "POST", "/v1/tables/t/rebuild?wait=1", nil)
	res = rebuildResult{}
	if json.Unmarshal(r.body, &res) != nil || res.ExitCode != 0 || res.Generation == nil || *res.Generation <= gen1 {
		t.Fatalf("rebuild after restart: %d %s", r.status, r.body)
	}
	rows, _, _ = d2.c.scan(t, "t", 100)
	if diff := cmp.Diff(neu, rows); diff != "" {
		t.Fatalf("after the next run (-new oracle +got):\n%s", diff)
	}
	d2.stop(t)
}

// TestSecondDaemonLocked: a second daemon on the same database fails with
// store.ErrLocked, and its message names the first one's socket; the first
// keeps serving and the second creates no socket.
func TestSecondDaemonLocked(t *testing.T) {
	cfg := baseConfig(t)
	d := start(t, cfg)
	cfg2 := cfg
	cfg2.Socket = cfg.Socket + "2"
	cfg2.LockTimeout = -1
	s2, err := New(cfg2)
	if err != nil {
		t.Fatal(err)
	}
	err = s2.Run(context.Background(), func() { t.Error("the second daemon called ready") })
	var le *store.LockedError
	if !errors.Is(err, store.ErrLocked) || !errors.As(err, &le) || le.Holder == nil || le.Holder.Socket != d.s.cfg.Socket ||
		!strings.Contains(err.Error(), d.s.cfg.Socket) {
		t.Fatalf("second daemon: %v, want store.ErrLocked naming socket %s", err, d.s.cfg.Socket)
	}
	if _, err := os.Stat(cfg2.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the second daemon left a socket (%v)", err)
	}
	if r := d.c.get(t, "/healthz"); r.status != 200 {
		t.Fatalf("first daemon: healthz %d", r.status)
	}
}
