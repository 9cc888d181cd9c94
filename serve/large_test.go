package serve

// Tests of large answers (spool.go, heavy.go, the rows page's byte budget):
// a slow client never holds a read transaction, so a commit that must grow
// bbolt's mapping (a small InitialMmapSize makes it so) is not stopped by
// it; answers are bounded in bytes; heavy requests are limited.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/exportdoc"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// mappedBytes is the size of this process's memory mappings of the file at
// path (bbolt maps the database once; /proc/self/maps names the file).
func mappedBytes(t *testing.T, path string) int64 {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatalf("read /proc/self/maps: %v", err)
	}
	var total int64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[5] != abs {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		l, err1 := strconv.ParseUint(lo, 16, 64)
		h, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad maps line %q", line)
		}
		total += int64(h - l)
	}
	return total
}

// bigRecords are n records over keys prefix00000.., each value size bytes
// naming the round.
func bigRecords(prefix string, round, n, size int) []localkafka.Record {
	recs := make([]localkafka.Record, n)
	for i := range recs {
		v := fmt.Sprintf("r%d-%d-", round, i)
		v += strings.Repeat("x", size-len(v))
		recs[i] = localkafka.Record{Key: []byte(fmt.Sprintf("%s%05d", prefix, i)), Value: []byte(v)}
	}
	return recs
}

// slowReader reads an answer's body at about rate bytes a second until
// fast is closed, then at full speed, and keeps what it read.
type slowReader struct {
	status int
	gen    string
	body   bytes.Buffer
	err    error
	read   chan struct{} // closed once the first bytes arrived
}

func startSlowRead(ctx context.Context, hc *http.Client, u string, rate int, fast <-chan struct{}, wg *sync.WaitGroup) *slowReader {
	sr := &slowReader{read: make(chan struct{})}
	wg.Add(1)
	go func() {
		defer wg.Done()
		req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
		resp, err := hc.Do(req)
		if err != nil {
			sr.err = err
			close(sr.read)
			return
		}
		defer resp.Body.Close()
		sr.status, sr.gen = resp.StatusCode, resp.Header.Get(HeaderGeneration)
		tick := time.NewTicker(time.Second / 4)
		defer tick.Stop()
		buf := make([]byte, max(rate/4, 1))
		first := true
		for {
			select {
			case <-fast:
				_, sr.err = io.Copy(&sr.body, resp.Body)
				if first {
					close(sr.read)
				}
				return
			case <-tick.C:
			}
			n, err := resp.Body.Read(buf)
			sr.body.Write(buf[:n])
			if first && n > 0 {
				first = false
				close(sr.read)
			}
			if err == io.EOF {
				return
			}
			if err != nil {
				sr.err = err
				return
			}
		}
	}()
	return sr
}

// exportRows parses an export document's rows.
func exportRows(t *testing.T, doc []byte) oracle {
	t.Helper()
	rd, err := exportdoc.NewReader(bytes.NewReader(doc), "export")
	if err != nil {
		t.Fatalf("export document: %v", err)
	}
	out := oracle{}
	for {
		k, v, ok, err := rd.Next()
		if err != nil {
			t.Fatalf("export document: %v", err)
		}
		if !ok {
			return out
		}
		out[string(k)] = string(v)
	}
}

// p99 is the 99th percentile of ds.
func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*99/100)]
}

// remapFigures is what one run of the remap scenario measured.
type remapFigures struct {
	keysP99, keysMax time.Duration
	keysN            int
	publish          time.Duration
	mapBefore        int64
	mapAfter         int64
}

// remapScenario builds a followed table "live" (3000 rows of 1 KiB) and a
// table "big" (4000 rows of 1 KiB) in a database mapped with 1 MiB at
// first. With slow set, two clients then read exports at about 1 KiB/s:
// live's (spooled) and big's (paged). Meanwhile big is rebuilt (its new
// generation needs pages the mapping does not have: a remap) and live's
// follower applies 200 new records, while GET .../keys is asked in a loop.
// Then the readers read the rest at full speed, and each export must be
// its table exactly as it was when the export began (the oracles).
func remapScenario(t *testing.T, slow bool) remapFigures {
	liveTopic, bigTopic := newTopic(t), newTopic(t)
	liveRecs := bigRecords("k", 1, 3000, 1024)
	bigRecs := bigRecords("b", 1, 4000, 1024)
	produce(t, liveTopic, liveRecs)
	produce(t, bigTopic, bigRecs)
	cfg := baseConfig(t, followedTable("live", liveTopic, FollowSettings{}), kafkaTable("big", bigTopic, nil))
	cfg.InitialMmapSize = 1 << 20
	d := start(t, cfg)
	hw := highs(t, liveTopic, 1)
	waitFor(t, "live following, caught up; big published", 120*time.Second, func() bool {
		l, b := d.c.table(t, "live"), d.c.table(t, "big")
		return l.State == StateFollowing && caughtUp(l, hw) && b.Generation != nil
	})
	liveWant := latestOracle(oracle{}, liveRecs)
	bigWant := latestOracle(oracle{}, bigRecs)

	var fig remapFigures
	fig.mapBefore = mappedBytes(t, cfg.DBPath)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	fast := make(chan struct{})
	var liveExp, bigExp *slowReader
	if slow {
		hc := unixClient(t, cfg.Socket).hc
		hc.Timeout = 0
		liveExp = startSlowRead(ctx, hc, "http://kmaterialize/v1/tables/live/export", 1024, fast, &wg)
		bigExp = startSlowRead(ctx, hc, "http://kmaterialize/v1/tables/big/export", 1024, fast, &wg)
		<-liveExp.read
		<-bigExp.read
	}

	// GET /keys in a loop until the writes are done.
	stopKeys := make(chan struct{})
	var lat []time.Duration
	var keysErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		kc := unixClient(t, cfg.Socket).hc
		for i := 0; ; i++ {
			select {
			case <-stopKeys:
				return
			default:
			}
			began := time.Now()
			resp, err := kc.Get(fmt.Sprintf("http://kmaterialize/v1/tables/live/keys/k%05d", i%3000))
			if err != nil {
				keysErr = err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				keysErr = fmt.Errorf("GET keys: %d", resp.StatusCode)
				return
			}
			lat = append(lat, time.Since(began))
		}
	}()

	more := bigRecords("k", 2, 200, 1024)
	produce(t, liveTopic, more)
	hw2 := highs(t, liveTopic, 1)
	began := time.Now()
	r := d.c.do(t, "POST", "/v1/tables/big/rebuild?wait=1", nil)
	fig.publish = time.Since(began)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"exit_code":0`) {
		t.Fatalf("rebuild of big: %d %s", r.status, r.body)
	}
	waitFor(t, "the follower to apply the new records", 120*time.Second, func() bool {
		return caughtUp(d.c.table(t, "live"), hw2)
	})
	fig.mapAfter = mappedBytes(t, cfg.DBPath)
	close(stopKeys)
	close(fast)
	wg.Wait()
	if keysErr != nil {
		t.Fatal(keysErr)
	}
	fig.keysN, fig.keysP99, fig.keysMax = len(lat), p99(lat), slices.Max(lat)
	if fig.mapAfter <= fig.mapBefore {
		t.Fatalf("the mapping of %s is %d bytes, %d before the rebuild: no remap happened, the test shows nothing", cfg.DBPath, fig.mapAfter, fig.mapBefore)
	}
	if rows, _, _ := d.c.scan(t, "live", 1000); fmt.Sprint(rows) != fmt.Sprint(latestOracle(liveWant, more)) {
		t.Fatalf("live after the follower's apply differs from the oracle")
	}
	if !slow {
		return fig
	}
	for _, c := range []struct {
		name string
		sr   *slowReader
		want oracle
	}{{"live (spooled)", liveExp, liveWant}, {"big (paged)", bigExp, bigWant}} {
		if c.sr.err != nil || c.sr.status != http.StatusOK {
			t.Fatalf("export of %s: status %d, %v", c.name, c.sr.status, c.sr.err)
		}
		got := exportRows(t, c.sr.body.Bytes())
		if len(got) != len(c.want) || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Fatalf("export of %s has %d rows, not the %d of the table when it began (or other values)", c.name, len(got), len(c.want))
		}
	}
	return fig
}

// TestSlowExportDoesNotStopWriters: two exports read at about 1 KiB/s (a
// spooled one of a followed table, a paged one of the table being
// rebuilt) while a rebuild publishes, which needs a remap (asserted: the
// mapping grew), and a follower applies; GET /keys keeps answering. Each
// export is its table at one generation (the oracle). The figures (keys
// p99, publish time, against a run without the slow readers) are logged,
// never asserted: docs/performance.md has them.
func TestSlowExportDoesNotStopWriters(t *testing.T) {
	base := remapScenario(t, false)
	loaded := remapScenario(t, true)
	for _, f := range []struct {
		name string
		remapFigures
	}{{"unloaded", base}, {"slow exports", loaded}} {
		t.Logf("%s: GET keys p99 %v (max %v, %d requests), rebuild with publish %v, mapping %d -> %d bytes",
			f.name, f.keysP99, f.keysMax, f.keysN, f.publish, f.mapBefore, f.mapAfter)
	}
}

// TestRowsPageByteBudget: a rows page ends before the row that would take
// it past page_max_bytes, with Kmaterialize-More, a row larger than the
// budget comes alone, and a scan that follows the pages reads every row
// (the oracle).
func TestRowsPageByteBudget(t *testing.T) {
	topic := newTopic(t)
	recs := bigRecords("k", 1, 40, 1000)
	recs[17].Value = bytes.Repeat([]byte("L"), 9000) // larger than the budget
	produce(t, topic, recs)
	cfg := baseConfig(t, kafkaTable("t", topic, nil))
	cfg.PageMaxBytes = 4096
	d := start(t, cfg)
	waitFor(t, "published", 60*time.Second, func() bool { return d.c.table(t, "t").Generation != nil })
	want := latestOracle(oracle{}, recs)
	got := oracle{}
	after := ""
	var sizes []int
	for {
		q := url.Values{"limit": {"1000"}}
		if after != "" {
			q.Set("after", after)
		}
		r := d.c.get(t, "/v1/tables/t/rows?"+q.Encode())
		if r.status != http.StatusOK {
			t.Fatalf("rows: %d %s", r.status, r.body)
		}
		n, bytesOnPage := 0, 0
		sc := bufio.NewScanner(bytes.NewReader(r.body))
		sc.Buffer(nil, 1<<20)
		var keys []string
		for sc.Scan() {
			var kv struct{ Key, Value string }
			if err := json.Unmarshal(sc.Bytes(), &kv); err != nil {
				t.Fatal(err)
			}
			got[kv.Key] = kv.Value
			keys = append(keys, kv.Key)
			after = kv.Key
			n++
			bytesOnPage += len(kv.Key) + len(kv.Value)
		}
		if n == 0 {
			t.Fatalf("an empty page")
		}
		if bytesOnPage > cfg.PageMaxBytes && n != 1 {
			t.Fatalf("page %v has %d bytes of keys and values, over the budget %d, with %d rows", keys, bytesOnPage, cfg.PageMaxBytes, n)
		}
		sizes = append(sizes, n)
		if r.header.Get(HeaderMore) != "true" {
			break
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rows read through the pages differ from the oracle (%d rows, want %d)", len(got), len(want))
	}
	// 4 rows of ~1 KiB a page, and the large row alone.
	if !slices.Contains(sizes, 1) || slices.Max(sizes) != 4 {
		t.Fatalf("page sizes %v: want pages of 4 rows and the large row alone", sizes)
	}
}

// TestSpoolFullAndBusy: a diff larger than spool_max_bytes is 503
// spool_full before any byte of it (and leaves no spool file); with
// max_heavy_requests 1 and an export held open by a paged reader, a
// second export is 503 busy with Retry-After; once the first ends, exports
// run again.
func TestSpoolFullAndBusy(t *testing.T) {
	topic := newTopic(t)
	produce(t, topic, bigRecords("k", 1, 2000, 500))
	tbl := kafkaTable("t", topic, nil)
	tbl.Build = func(ctx context.Context, db *store.DB, log zerolog.Logger) (materialize.Report, error) {
		return materialize.Rebuild(ctx, materialize.Options{
			DB: db, Table: "t", Log: log, Keep: 1,
			Replay: replay.Config{Brokers: broker.Addr, Topic: topic, StallTimeout: 20 * time.Second, Log: log},
		})
	}
	cfg := baseConfig(t, tbl)
	cfg.SpoolMaxBytes = 64 << 10
	cfg.MaxHeavyRequests = 1
	d := start(t, cfg)
	waitFor(t, "published", 60*time.Second, func() bool { return d.c.table(t, "t").Generation != nil })
	produce(t, topic, bigRecords("k", 2, 2000, 500))
	if r := d.c.do(t, "POST", "/v1/tables/t/rebuild?wait=1", nil); r.status != http.StatusOK {
		t.Fatalf("rebuild: %d %s", r.status, r.body)
	}
	r := d.c.get(t, "/v1/tables/t/diff")
	if r.status != http.StatusServiceUnavailable || r.apiErr(t).Code != api.CodeSpoolFull || r.header.Get("Retry-After") == "" {
		t.Fatalf("diff over the spool limit: %d %s (Retry-After %q), want 503 spool_full", r.status, r.body, r.header.Get("Retry-After"))
	}
	if ents, err := os.ReadDir(store.SpoolDir(cfg.DBPath)); err == nil && len(ents) > 0 {
		t.Fatalf("spool files left after the refused diff: %v", ents)
	}
	if r := d.c.get(t, "/v1/tables/t/diff?limit=10"); r.status != http.StatusOK || bytes.Count(r.body, []byte("\n")) != 10 {
		t.Fatalf("diff with limit=10: %d, %d lines", r.status, bytes.Count(r.body, []byte("\n")))
	}

	// An export read slowly holds the only heavy slot (it is paged).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hc := unixClient(t, cfg.Socket).hc
	hc.Timeout = 0
	fast := make(chan struct{})
	var wg sync.WaitGroup
	sr := startSlowRead(ctx, hc, "http://kmaterialize/v1/tables/t/export", 1024, fast, &wg)
	<-sr.read
	for _, p := range []string{"/v1/tables/t/export", "/v1/tables/t/count", "/v1/tables/t/diff?limit=1"} {
		r := d.c.get(t, p)
		if r.status != http.StatusServiceUnavailable || r.apiErr(t).Code != api.CodeBusy || r.header.Get("Retry-After") != strconv.Itoa(heavyRetryAfter) {
			t.Fatalf("GET %s while an export runs with max_heavy_requests 1: %d %s, want 503 busy with Retry-After", p, r.status, r.body)
		}
	}
	close(fast)
	wg.Wait()
	if sr.err != nil || sr.status != http.StatusOK {
		t.Fatalf("the slow export: %d %v", sr.status, sr.err)
	}
	if r := d.c.get(t, "/v1/tables/t/count"); r.status != http.StatusOK {
		t.Fatalf("count after the export ended: %d %s", r.status, r.body)
	}
}
