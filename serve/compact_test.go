package serve

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"encoding/json"
	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/store"
)

// TestCompactUnderLoad: POST /v1/compact while a producer writes to a
// followed table and readers read both tables. While it waits for a write
// in flight (held by the test), the tables show state compacting and
// /readyz is 200; a second compaction or a backup is 409
// compact_running. It shrinks the file (freed by three rebuilds); no read
// fails, every count read is of the oracle at the positions it was read
// at; afterwards the follower goes on to the end and both tables equal
// their oracles; the file passes check once the daemon stops.
func TestCompactUnderLoad(t *testing.T) {
	liveTopic, staticTopic := unique(t, "live"), unique(t, "static")
	broker.TestTopic(t, liveTopic, 2, nil)
	broker.TestTopic(t, staticTopic, 1, nil)
	var live, static produced
	live.write(t, liveTopic, keyed(0, 200, 2, 80))
	static.write(t, staticTopic, keyed(0, 3000, 1, 3000))
	cfg := baseConfig(t, followedTable("live", liveTopic, FollowSettings{}), kafkaTable("static", staticTopic, nil))
	d := start(t, cfg)
	waitFor(t, "both tables served", 60*time.Second, func() bool {
		return d.c.table(t, "live").State == StateFollowing && d.c.table(t, "static").State == StateReady
	})
	for i := 0; i < 3; i++ { // free pages: each rebuild frees the last generation
		if r := d.c.do(t, "POST", "/v1/tables/static/rebuild?wait=1", nil); r.status != http.StatusOK {
			t.Fatalf("rebuild %d: %d %s", i, r.status, r.body)
		}
	}

	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed atomic.Int64
	var reads atomic.Int64
	fail := func(format string, args ...any) {
		failed.Add(1)
		t.Errorf(format, args...)
	}
	wg.Add(1)
	go func() { // the producer
		defer wg.Done()
		for round := 1; ; round++ {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			mu.Lock()
			live.write(t, liveTopic, keyed(round, 20, 2, 80))
			mu.Unlock()
		}
	}()
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() { // a reader
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, path := range []string{"/v1/tables/live/count", "/v1/tables/static/count", "/v1/tables/live"} {
					resp, err := d.c.hc.Get(d.c.base + path)
					if err != nil {
						fail("GET %s: %v", path, err)
						return
					}
					var body struct {
						Count *int64 `json:"count"`
					}
					_ = json.NewDecoder(resp.Body).Decode(&body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						fail("GET %s: %d", path, resp.StatusCode)
						return
					}
					if path == "/v1/tables/live/count" && body.Count != nil {
						pos, err := api.ParsePositions(resp.Header.Get(HeaderPositions))
						if err != nil {
							fail("positions: %v", err)
							return
						}
						mu.Lock()
						want := int64(len(live.foldAt(pos)))
						mu.Unlock()
						if *body.Count != want {
							fail("count %d at %v, the oracle's %d", *body.Count, pos, want)
							return
						}
					}
					reads.Add(1)
				}
			}
		}()
	}

	// A write in flight, held: the compaction waits for it with the
	// writers paused, and the state says so.
	d.s.mu.Lock()
	db := d.s.db
	d.s.mu.Unlock()
	m, err := db.Table("static")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	held := make(chan struct{})
	applied := make(chan error, 1)
	go func() {
		_, err := db.Apply("static", m.Generation, func(store.Rows) error { close(held); <-release; return nil }, nil, nil)
		applied <- err
	}()
	<-held
	compacted := make(chan response, 1)
	go func() { compacted <- d.c.do(t, "POST", "/v1/compact", nil) }()
	waitFor(t, "state compacting", 30*time.Second, func() bool { return d.c.table(t, "live").State == StateCompacting })
	if st := d.c.table(t, "static").State; st != StateCompacting {
		t.Fatalf("static's state while compacting: %s", st)
	}
	if r := d.c.get(t, "/readyz"); r.status != http.StatusOK {
		t.Fatalf("/readyz while compacting: %d %s", r.status, r.body)
	}
	for _, req := range [][2]string{{"POST", "/v1/compact"}, {"GET", "/v1/backup"}} {
		r := d.c.do(t, req[0], req[1], nil)
		if e := r.apiErr(t); r.status != http.StatusConflict || e.Code != api.CodeCompactRunning {
			t.Fatalf("%s %s while compacting: %d %s", req[0], req[1], r.status, r.body)
		}
	}
	time.Sleep(50 * time.Millisecond) // reads meanwhile
	close(release)
	if err := <-applied; err != nil {
		t.Fatalf("the write held over the compaction: %v", err)
	}
	r := <-compacted
	if r.status != http.StatusOK {
		t.Fatalf("POST /v1/compact: %d %s", r.status, r.body)
	}
	var res api.CompactResult
	if err := json.Unmarshal(r.body, &res); err != nil {
		t.Fatal(err)
	}
	if res.After <= 0 || res.After >= res.Before {
		t.Fatalf("compaction %+v: want a smaller file", res)
	}
	t.Logf("compacted %d -> %d bytes, writers paused %d ms, switch %.3f ms; %d reads so far", res.Before, res.After, res.PausedMS, res.SwapMS, reads.Load())
	readsAt := reads.Load()
	waitFor(t, "reads after the compaction", 30*time.Second, func() bool { return reads.Load() > readsAt+20 })
	close(stop)
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d reads failed", failed.Load())
	}
	if st := d.c.table(t, "live").State; st != StateFollowing {
		t.Fatalf("live's state after the compaction: %s", st)
	}
	want := live.ends()
	waitFor(t, "the follower at the end", 60*time.Second, func() bool {
		_, pos := d.c.positions(t, "live")
		reached, _ := pos.Reached(want)
		return reached
	})
	got, _, _ := d.c.scan(t, "live", 1000)
	_, pos := d.c.positions(t, "live")
	if diff := cmp.Diff(live.foldAt(pos), got); diff != "" {
		t.Fatalf("live after the compaction at %v (-oracle +got):\n%s", pos, diff)
	}
	got, _, _ = d.c.scan(t, "static", 1000)
	if diff := cmp.Diff(static.foldAt(static.ends()), got); diff != "" {
		t.Fatalf("static after the compaction (-oracle +got):\n%s", diff)
	}
	d.stop(t)
	rep, err := store.Check(cfg.DBPath, nil)
	if err != nil || !rep.OK() {
		t.Fatalf("check after the compaction: %v %+v", err, rep)
	}

}
