package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmaterialize/kmaterialize/api"
)

// feedRuns numbers BenchmarkFeedLatency's topics.
var feedRuns int

// BenchmarkFeedLatency: the latency from a record's commit in Kafka (its
// produce acknowledged) to its change line on a watcher of the change feed,
// at 1000 records/s for 10s (KMATERIALIZE_BENCH_LATENCY_SECONDS), with the
// daemon and the broker each in its own process. The producer writes record
// n (key "seq", value n) to a followed 1-partition topic every millisecond;
// a watcher (GET .../changes?from=now over the socket) notes when the change
// line of each value arrives. Reports p50, p99 and max, from the
// acknowledgement and from the send.
func BenchmarkFeedLatency(b *testing.B) {
	f := getFixture(b)
	secs := envInt("KMATERIALIZE_BENCH_LATENCY_SECONDS", 10)
	const rate = 1000
	for i := 0; i < b.N; i++ {
		feedRuns++
		tpc := fmt.Sprintf("%s-feed-%d", f.topic, feedRuns)
		if err := f.createTopic(tpc, 1); err != nil {
			b.Fatal(err)
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(f.addr), kgo.DefaultProduceTopic(tpc), kgo.ProducerLinger(0),
			kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			b.Fatal(err)
		}
		dir := b.TempDir()
		db := filepath.Join(dir, "tables.db")
		emptyFollowed(b, db, "feed", tpc, 1)
		d := followDaemon(b, f, dir, db, "feed", tpc)
		hc := unixClient(d.sock)
		var resp *http.Response
		for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
			resp, err = hc.Get("http://kmaterialize/v1/tables/feed/changes?from=now")
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

		n := secs * rate
		sent := make([]time.Time, n)
		acked := make([]time.Time, n)
		seen := make([]time.Time, n)
		var mu sync.Mutex
		watchDone := make(chan error, 1)
		go func() {
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				now := time.Now()
				var line api.FeedLine
				if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
					watchDone <- fmt.Errorf("line %q: %v", sc.Bytes(), err)
					return
				}
				if line.Error != nil {
					watchDone <- fmt.Errorf("the feed ended: %s: %s", line.Error.Code, line.Error.Message)
					return
				}
				if line.Key == nil || line.Value == nil {
					continue
				}
				v, err := strconv.Atoi(*line.Value)
				if err != nil || v < 0 || v >= n {
					watchDone <- fmt.Errorf("change line %q", sc.Bytes())
					return
				}
				mu.Lock()
				seen[v] = now
				mu.Unlock()
				if v == n-1 {
					watchDone <- nil
					return
				}
			}
			watchDone <- fmt.Errorf("the feed ended: %v", sc.Err())
		}()
		tick := time.NewTicker(time.Second / rate)
		var wg sync.WaitGroup
		for j := 0; j < n; j++ {
			<-tick.C
			mu.Lock()
			sent[j] = time.Now()
			mu.Unlock()
			wg.Add(1)
			cl.Produce(context.Background(), &kgo.Record{Topic: tpc, Partition: 0, Key: []byte("seq"), Value: []byte(strconv.Itoa(j))},
				func(_ *kgo.Record, err error) {
					if err != nil {
						b.Error(err)
					}
					mu.Lock()
					acked[j] = time.Now()
					mu.Unlock()
					wg.Done()
				})
		}
		tick.Stop()
		wg.Wait()
		select {
		case err := <-watchDone:
			if err != nil {
				b.Fatalf("watcher: %v; log:\n%s", err, d.log())
			}
		case <-time.After(time.Minute):
			b.Fatalf("not every record reached the watcher; log:\n%s", d.log())
		}
		resp.Body.Close()
		cl.Close()
		d.stop(b)
		// A follower's apply folds a batch: the watcher sees a key's last
		// value of each commit, so a record whose value was folded away is
		// on the watcher with the next value that came.
		var fromAck, fromSend []time.Duration
		next := time.Time{}
		for j := n - 1; j >= 0; j-- {
			if !seen[j].IsZero() {
				next = seen[j]
			}
			fromAck = append(fromAck, next.Sub(acked[j]))
			fromSend = append(fromSend, next.Sub(sent[j]))
		}
		slices.Sort(fromAck)
		slices.Sort(fromSend)
		p50, p99, mx := quantile(fromAck, 0.50), quantile(fromAck, 0.99), fromAck[n-1]
		b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
		r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
		fmt.Printf("bench: feed latency round %d: %d records at %d/s: ack-to-change-line p50 %s, p99 %s, max %s; send-to-change-line p50 %s, p99 %s\n",
			i, n, rate, r(p50), r(p99), r(mx), r(quantile(fromSend, 0.50)), r(quantile(fromSend, 0.99)))
	}
}
