package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmaterialize/kmaterialize/api"
)

// stuckRuns numbers BenchmarkFeedStuckWatcher's topics.
var stuckRuns int

// The feed bounds BenchmarkFeedStuckWatcher gives the daemon: small, so
// that the records it writes are many times what the feed may hold.
const (
	stuckRetainBytes = 8 << 20
	stuckMaxBytes    = 16 << 20
	stuckSlowBytes   = 2 << 20
)

// BenchmarkFeedStuckWatcher: what a watcher that stops reading costs the
// daemon. A followed 1-partition topic takes 160 MiB of records (40,000 of
// 4 KiB over 4,000 keys, KMATERIALIZE_BENCH_STUCK_RECORDS), produced at
// at most 2,000 records/s (the ticker's pace; its real rate is printed), while the daemon (its own process, feed
// bounds retain_bytes 8MiB, max_bytes 16MiB, slow_watcher_bytes 2MiB)
// serves two watchers of its change feed: one reads every line, one opened
// the stream and never reads a byte. The same run is made without the
// stuck watcher. Reported: the daemon's peak anonymous memory (RssAnon,
// sampled every 10 ms) in both, when the stuck watcher was cut off
// (kmaterialize_feed_watchers back to 1, polled), and the
// reading watcher's and a reader's latency (GET .../count paced every
// 10 ms) in both, p50 and p99.
func BenchmarkFeedStuckWatcher(b *testing.B) {
	f := getFixture(b)
	n := envInt("KMATERIALIZE_BENCH_STUCK_RECORDS", 40000)
	for i := 0; i < b.N; i++ {
		without := stuckRun(b, f, n, false)
		with := stuckRun(b, f, n, true)
		b.ReportMetric(float64(with.peakAnon>>20), "stuck-peak-anon-MiB")
		b.ReportMetric(float64(without.peakAnon>>20), "alone-peak-anon-MiB")
		fmt.Printf("bench: feed stuck watcher round %d: %d records (%d MiB) at %d/s; feed max_bytes %d MiB, slow_watcher_bytes %d MiB\n",
			i, n, n*stuckValueBytes>>20, stuckRate, stuckMaxBytes>>20, stuckSlowBytes>>20)
		for _, r := range []stuckResult{without, with} {
			fmt.Printf("bench:   %s: produced in %s (%.0f records/s); daemon peak anon %d MiB; reading watcher change p50 %s p99 %s; count p50 %s p99 %s (%d reads, 0 failed); %s\n",
				r.name, r.produced.Round(time.Millisecond), float64(n)/r.produced.Seconds(), r.peakAnon>>20, r.watchP50, r.watchP99, r.readP50, r.readP99, r.reads, r.cut)
		}
	}
}

const stuckValueBytes = 4 << 10

// stuckRate is the records produced per second: 8 MiB/s of changes.
const stuckRate = 2000

type stuckResult struct {
	name               string
	peakAnon           int64
	watchP50, watchP99 time.Duration
	readP50, readP99   time.Duration
	reads              int
	cut                string
	produced           time.Duration // the produce's time (the ticker's pace is a ceiling on 2 cores)
}

func stuckRun(b *testing.B, f *fixture, n int, stuck bool) stuckResult {
	b.Helper()
	stuckRuns++
	tpc := fmt.Sprintf("%s-stuck-%d", f.topic, stuckRuns)
	if err := f.createTopic(tpc, 1); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = f.deleteTopics(tpc) }()
	dir := b.TempDir()
	db := filepath.Join(dir, "tables.db")
	emptyFollowed(b, db, "feed", tpc, 1)
	extra := fmt.Sprintf("feed:\n  retain_bytes: %d\n  max_bytes: %d\n  slow_watcher_bytes: %d\n", stuckRetainBytes, stuckMaxBytes, stuckSlowBytes)
	d := followDaemonWith(b, f, dir, db, "feed", tpc, extra)
	hc := unixClient(d.sock)
	// The reading watcher's stream outlives the client's timeout.
	stream := unixClient(d.sock)
	stream.Timeout = 0
	var resp *http.Response
	var err error
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		resp, err = stream.Get("http://kmaterialize/v1/tables/feed/changes?from=now")
		if err == nil && resp.StatusCode == http.StatusOK {
			break
		}
		if err == nil {
			resp.Body.Close()
		}
		if time.Since(start) > time.Minute {
			b.Fatalf("no change feed: %v; log:\n%s", err, d.log())
		}
	}
	defer resp.Body.Close()
	res := stuckResult{name: "alone", cut: "no stuck watcher"}
	if stuck {
		res.name = "with a stuck watcher"
		// The stuck watcher: a request on a connection of its own, whose
		// answer is never read.
		conn, err := net.Dial("unix", d.sock)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET /v1/tables/feed/changes?from=now HTTP/1.1\r\nHost: kmaterialize\r\n\r\n"); err != nil {
			b.Fatal(err)
		}
		waitWatchers(b, hc, 2, d)
	}

	// The daemon's memory, sampled.
	var peak int64
	sampleDone := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		status := fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			anon, _, _ := readStatus(status)
			peak = max(peak, anon)
			select {
			case <-sampleDone:
				return
			case <-t.C:
			}
		}
	}()

	// The reading watcher: the time from a record's acknowledgement to its
	// change line (the value is the record's number).
	acked := make([]time.Time, n)
	seen := make([]time.Time, n)
	var mu sync.Mutex
	watchDone := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		got := 0
		for sc.Scan() {
			now := time.Now()
			var line api.FeedLine
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				watchDone <- fmt.Errorf("line %.80q: %v", sc.Bytes(), err)
				return
			}
			if line.Error != nil {
				watchDone <- fmt.Errorf("the reading watcher's feed ended: %s: %s", line.Error.Code, line.Error.Message)
				return
			}
			if line.Key == nil || line.Value == nil {
				continue
			}
			num, _, _ := strings.Cut(*line.Value, " ")
			v, err := strconv.Atoi(num)
			if err != nil || v < 0 || v >= n {
				watchDone <- fmt.Errorf("change line %.80q", sc.Bytes())
				return
			}
			mu.Lock()
			seen[v] = now
			mu.Unlock()
			if got++; v == n-1 {
				watchDone <- nil
				return
			}
		}
		watchDone <- fmt.Errorf("the reading watcher's feed ended: %v", sc.Err())
	}()

	// A reader, paced.
	readStop := make(chan struct{})
	readDone := make(chan []time.Duration, 1)
	go func() {
		var lat []time.Duration
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-readStop:
				readDone <- lat
				return
			case <-t.C:
			}
			start := time.Now()
			r, err := hc.Get("http://kmaterialize/v1/tables/feed/count")
			if err != nil {
				b.Errorf("count while the feed is watched: %v", err)
				continue
			}
			_, _ = io.Copy(io.Discard, r.Body)
			r.Body.Close()
			if r.StatusCode != http.StatusOK {
				b.Errorf("count while the feed is watched: %d", r.StatusCode)
			}
			lat = append(lat, time.Since(start))
		}
	}()

	cl, err := kgo.NewClient(kgo.SeedBrokers(f.addr), kgo.DefaultProduceTopic(tpc), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MaxBufferedRecords(2000))
	if err != nil {
		b.Fatal(err)
	}
	// When the stuck watcher is cut off: the gauge polled while records
	// are produced, and how many were acknowledged by then.
	var ackedN atomic.Int64
	cutSeen := make(chan string, 1)
	cutStop := make(chan struct{})
	produceStart := time.Now()
	go func() {
		if !stuck {
			cutSeen <- "no stuck watcher"
			return
		}
		line := "\nkmaterialize_feed_watchers 1\n"
		for {
			select {
			case <-cutStop:
				cutSeen <- "the stuck watcher not cut off while the records came"
				return
			case <-time.After(20 * time.Millisecond):
			}
			r, err := hc.Get("http://kmaterialize/metrics")
			if err != nil {
				continue
			}
			body, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if strings.Contains(string(body), line) {
				acked := ackedN.Load()
				cutSeen <- fmt.Sprintf("the stuck watcher cut off %s after the first record, %d records (%d MiB) acknowledged by then",
					time.Since(produceStart).Round(time.Millisecond), acked, acked*stuckValueBytes>>20)
				return
			}
		}
	}()
	pad := strings.Repeat("x", stuckValueBytes-16)
	var wg sync.WaitGroup
	// Paced: a watcher that reads every line but more slowly than the
	// daemon applies them is cut off too, rightly; this one keeps up.
	tick := time.NewTicker(time.Second / stuckRate)
	defer tick.Stop()
	for j := 0; j < n; j++ {
		<-tick.C
		wg.Add(1)
		cl.Produce(context.Background(), &kgo.Record{Partition: 0, Key: []byte(fmt.Sprintf("k%04d", j%4000)), Value: []byte(strconv.Itoa(j) + " " + pad)},
			func(_ *kgo.Record, err error) {
				if err != nil {
					b.Error(err)
				}
				mu.Lock()
				acked[j] = time.Now()
				mu.Unlock()
				ackedN.Add(1)
				wg.Done()
			})
	}
	wg.Wait()
	cl.Close()
	res.produced = time.Since(produceStart)
	select {
	case err := <-watchDone:
		if err != nil {
			b.Fatalf("%v; log:\n%s", err, d.log())
		}
	case <-time.After(2 * time.Minute):
		b.Fatalf("not every record reached the reading watcher; log:\n%s", d.log())
	}
	close(cutStop)
	res.cut = <-cutSeen
	close(readStop)
	reads := <-readDone
	close(sampleDone)
	<-sampled
	d.stop(b)

	var lat []time.Duration
	next := time.Time{}
	for j := n - 1; j >= 0; j-- {
		if !seen[j].IsZero() {
			next = seen[j]
		}
		lat = append(lat, next.Sub(acked[j]))
	}
	slices.Sort(lat)
	slices.Sort(reads)
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	res.peakAnon = peak
	res.watchP50, res.watchP99 = r(quantile(lat, 0.5)), r(quantile(lat, 0.99))
	if len(reads) > 0 {
		res.readP50, res.readP99 = r(quantile(reads, 0.5)), r(quantile(reads, 0.99))
	}
	res.reads = len(reads)
	return res
}

// waitWatchers waits (at most 10 minutes) until the daemon's
// kmaterialize_feed_watchers gauge is want, and returns when it was seen.
func waitWatchers(b *testing.B, hc *http.Client, want int, d *daemon) time.Time {
	b.Helper()
	line := fmt.Sprintf("\nkmaterialize_feed_watchers %d\n", want)
	for start := time.Now(); time.Since(start) < 10*time.Minute; time.Sleep(10 * time.Millisecond) {
		r, err := hc.Get("http://kmaterialize/metrics")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if strings.Contains(string(body), line) {
			return time.Now()
		}
	}
	b.Fatalf("kmaterialize_feed_watchers never %d; log:\n%s", want, d.log())
	return time.Time{}
}
