package serve

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// readyRebuildRecords is the size of the table rebuilt under load. The
// issue's 1,000,000 passes too, but on a loaded machine its pause (catch-up,
// merge, publish) lets the producer's records come close to max_lag, so
// /readyz would rightly say 503; half of it keeps the pause well below, the
// rebuild still lasting ten seconds or more (the measurement is in
// bench/RESULTS.md, "Measurements the code's choices rest on").
const readyRebuildRecords = 500_000

// TestReadyThroughFollowedRebuild: a followed table of many records is
// rebuilt while a producer adds about 1,000 records a second (max_lag
// 10000). /readyz, sampled every 50 ms from before the request until the
// rebuild's follower of the new generation has applied, answers 200 at
// every sample: through the rebuild's replay (the follower runs), its
// catch-up, merge and publish (the follower is paused, its live marks kept
// current) and the new follower's start (it starts with the paused one's
// marks). The test first checks that the catch-up paused the follower and
// that samples were taken while it was paused; afterwards the table equals
// the oracle of every record produced, and the generation is the
// rebuild's.
func TestReadyThroughFollowedRebuild(t *testing.T) {
	topic := newTopic(t)
	var mu sync.Mutex // guards produced: the log's order
	var produced []localkafka.Record
	gen := func(round, n int) []localkafka.Record {
		recs := make([]localkafka.Record, n)
		for i := range recs {
			recs[i] = localkafka.Record{Key: []byte(fmt.Sprintf("k%06d", (i*7919+round)%(readyRebuildRecords/4))), Value: []byte(fmt.Sprintf("r%d-%d", round, i))}
		}
		return recs
	}
	started := time.Now()
	for i := 0; i < readyRebuildRecords; i += 50_000 {
		recs := gen(i, 50_000)
		produce(t, topic, recs)
		produced = append(produced, recs...)
	}
	t.Logf("produced %d records in %s", len(produced), time.Since(started))

	// The hook records the pause: from the catch-up's start (the
	// follower stopped) to the rebuild's return.
	var pausedAt atomic.Int64 // unix nanos; 0 before
	var catchUps atomic.Int64
	var armed atomic.Bool // not the first build: nothing follows yet
	hook := func(real catchUpFn) catchUpFn {
		return func(ctx context.Context) (map[int32]int64, error) {
			if armed.Load() {
				catchUps.Add(1)
				pausedAt.Store(time.Now().UnixNano())
			}
			return real(ctx)
		}
	}
	tab := followedTableHook("big", topic, FollowSettings{MaxLag: 10000}, hook)
	started = time.Now()
	d := start(t, baseConfig(t, tab))
	waitFor(t, "the first build and following", 10*time.Minute, func() bool {
		return d.c.get(t, "/readyz").status == http.StatusOK
	})
	first := d.c.table(t, "big")
	t.Logf("first build and following in %s", time.Since(started))
	armed.Store(true)

	// The producer: 10 records every 10ms, about 1,000 a second.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var prodErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for round := 1; ; round++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			recs := gen(readyRebuildRecords+round, 10)
			mu.Lock()
			_, err := broker.Produce(context.Background(), topic, recs)
			if err == nil {
				produced = append(produced, recs...)
			}
			mu.Unlock()
			if err != nil {
				prodErr = err
				return
			}
		}
	}()
	// The sampler: /readyz every 50ms; every answer but 200 is kept.
	type sample struct {
		at     time.Time
		status int
		body   string
	}
	var samples []sample
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			s := sample{at: time.Now()}
			resp, err := d.c.hc.Get(d.c.base + "/readyz")
			if err != nil {
				s.body = err.Error()
			} else {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				s.status, s.body = resp.StatusCode, string(b)
			}
			samples = append(samples, s)
		}
	}()

	started = time.Now()
	r := d.c.do(t, "POST", "/v1/tables/big/rebuild?wait=1", nil)
	ended := time.Now()
	if r.status != http.StatusOK {
		stop()
		wg.Wait()
		t.Fatalf("POST rebuild?wait=1: %d %s", r.status, r.body)
	}
	// Until the new generation's follower has applied past the rebuild.
	waitFor(t, "the new generation's follower to apply", 60*time.Second, func() bool {
		tj := d.c.table(t, "big")
		return tj.Generation != nil && *tj.Generation > *first.Generation && tj.Follow != nil && tj.Follow.Running &&
			tj.Follow.Applies > 0
	})
	stop()
	wg.Wait()
	if prodErr != nil {
		t.Fatal(prodErr)
	}

	// The condition: the catch-up paused the follower, and the sampler
	// saw the pause.
	if n := catchUps.Load(); n != 1 {
		t.Fatalf("%d catch-ups, want 1 (the rebuild paused the follower once)", n)
	}
	paused := time.Unix(0, pausedAt.Load())
	inPause := 0
	for _, s := range samples {
		if !s.at.Before(paused) && s.at.Before(ended) {
			inPause++
		}
	}
	t.Logf("rebuild of %d records took %s, paused for %s; %d samples, %d of them while paused",
		readyRebuildRecords, ended.Sub(started), ended.Sub(paused), len(samples), inPause)
	if inPause < 2 {
		t.Fatalf("%d samples while the follower was paused: the test did not observe the pause", inPause)
	}
	for _, s := range samples {
		if s.status != http.StatusOK {
			t.Errorf("/readyz at %s (%s after the request): %d %s", s.at.Format("15:04:05.000"), s.at.Sub(started), s.status, s.body)
		}
	}

	// The table equals the oracle of everything produced.
	mu.Lock()
	want := latestOracle(nil, produced)
	mu.Unlock()
	hw := highs(t, topic, 1)
	waitFor(t, "the follower to apply every record", 60*time.Second, func() bool { return caughtUp(d.c.table(t, "big"), hw) })
	rows, _, _ := d.c.scan(t, "big", 10000)
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Fatalf("rows after the rebuild (-oracle +got):\n%s", diff)
	}
}
