package bench

// Follow mode's benchmarks: the apply rate of a followed table catching up
// with the fixture's topic against the raw consume and the C floor of the
// same topic (BenchmarkFollowApply), and produce-to-visible latency at 1000
// records/s (BenchmarkFollowLatency). Both run the daemon in a process of
// its own.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/store"
)

// followDaemon starts `kmaterialize serve` with one followed table (name
// table, topic) over db, logging to a file in dir.
func followDaemon(b *testing.B, f *fixture, dir, db, table, tpc string) *daemon {
	b.Helper()
	return followDaemonWith(b, f, dir, db, table, tpc, "")
}

// followDaemonWith is followDaemon with more of the config file (extra,
// top-level sections).
func followDaemonWith(b *testing.B, f *fixture, dir, db, table, tpc, extra string) *daemon {
	b.Helper()
	cfg := filepath.Join(dir, "kmaterialize.yaml")
	doc := fmt.Sprintf("db: %s\nkafka:\n  brokers: %s\ntables:\n  - name: %s\n    topic: %s\n    stall_timeout: 60s\n    follow: true\n    max_lag: 100000000\n",
		db, f.addr, table, tpc)
	// KMATERIALIZE_BENCH_FOLLOW_READERS sets the table's readers (default:
	// the follower's, materialize.DefaultFollowReaders).
	if n := envInt("KMATERIALIZE_BENCH_FOLLOW_READERS", 0); n > 0 {
		doc += fmt.Sprintf("    readers: %d\n", n)
	}
	doc += extra
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		b.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "daemon.log"))
	if err != nil {
		b.Fatal(err)
	}
	args := []string{"--log-format", "json"}
	if l := os.Getenv("KMATERIALIZE_BENCH_FOLLOW_LOG_LEVEL"); l != "" {
		args = append(args, "--log-level", l)
	}
	args = append(args, "serve", "--config", cfg)
	if p := os.Getenv("KMATERIALIZE_BENCH_CPUPROFILE"); p != "" {
		args = append(args, "--cpuprofile", p)
	}
	d := &daemon{cmd: exec.Command(f.kmz, args...), sock: db + ".sock", stderr: logf}
	d.cmd.Stderr = logf
	if err := d.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.stop(b) })
	return d
}

// emptyFollowed publishes an empty table of tpc in a new file at db, with
// a checkpoint at offset 0 of every partition: following it applies the
// whole topic.
func emptyFollowed(b *testing.B, db, table, tpc string, parts int32) {
	b.Helper()
	s, err := store.Open(db, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	gen, err := s.Begin(table)
	if err != nil {
		b.Fatal(err)
	}
	cp := checkpoint.Checkpoint{Topic: tpc, EndMark: checkpoint.EndHigh}
	for p := int32(0); p < parts; p++ {
		cp.Partitions = append(cp.Partitions, checkpoint.Partition{Partition: p})
	}
	err = gen.Publish(store.TableMeta{Name: table, Topic: tpc, Fold: "latest", BuiltAt: time.Now()},
		func(tx *bolt.Tx) error { return checkpoint.Save(tx, table, cp) })
	if err != nil {
		b.Fatal(err)
	}
}

// tableEnds is GET /v1/tables/{table}'s checkpoint ends and key count.
func tableEnds(cl *http.Client, table string) (map[int32]int64, int64, error) {
	resp, err := cl.Get("http://kmaterialize/v1/tables/" + table)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	var tb struct {
		Keys       *int64 `json:"keys"`
		Partitions []struct {
			Partition int32 `json:"partition"`
			End       int64 `json:"end"`
		} `json:"partitions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tb); err != nil {
		return nil, 0, err
	}
	out := map[int32]int64{}
	for _, p := range tb.Partitions {
		out[p.Partition] = p.End
	}
	var keys int64
	if tb.Keys != nil {
		keys = *tb.Keys
	}
	return out, keys, nil
}

// BenchmarkFollowApply: a followed table whose checkpoint is at offset 0
// catches up with the fixture's topic (1M records, 100k keys by default):
// from the daemon's start to the checkpoint at every partition's high
// watermark, against the raw consume and the C floor's read of the same
// topic, each in its own process. The table's key count is checked against
// the fixture's keys.
func BenchmarkFollowApply(b *testing.B) {
	f := getFixture(b)
	highs, err := topicHighs(f, f.topic)
	if err != nil {
		b.Fatal(err)
	}
	var follows, raws, floors []time.Duration
	for i := 0; i < b.N; i++ {
		bc0 := f.brokerCPU()
		fl, err := f.floorRead(false)
		if err != nil {
			b.Fatal(err)
		}
		floors = append(floors, fl.took)
		bc1 := f.brokerCPU()
		raw, err := f.rawConsume()
		if err != nil {
			b.Fatal(err)
		}
		raws = append(raws, raw.took)

		dir := b.TempDir()
		db := filepath.Join(dir, "tables.db")
		emptyFollowed(b, db, "bench", f.topic, partitions)
		bc2 := f.brokerCPU()
		started := time.Now()
		d := followDaemon(b, f, dir, db, "bench", f.topic)
		cl := unixClient(d.sock)
		var keys int64
		// KMATERIALIZE_BENCH_FOLLOW_TRACE=1 prints the positions applied
		// as they move (a catch-up's timeline: start, applies).
		trace, last := os.Getenv("KMATERIALIZE_BENCH_FOLLOW_TRACE") != "", int64(-1)
		for {
			ends, k, err := tableEnds(cl, "bench")
			if trace && err == nil {
				var sum int64
				for _, e := range ends {
					sum += e
				}
				if sum != last {
					fmt.Printf("bench: follow trace: %s: %d records applied\n", time.Since(started).Round(time.Millisecond), sum)
					last = sum
				}
			}
			if err == nil && equalEnds(ends, highs) {
				keys = k
				break
			}
			if time.Since(started) > 10*time.Minute {
				b.Fatalf("not caught up in 10m: %v of %v; log:\n%s", ends, highs, d.log())
			}
			time.Sleep(5 * time.Millisecond)
		}
		took := time.Since(started)
		bc3 := f.brokerCPU()
		follows = append(follows, took)
		d.stop(b)
		if p := os.Getenv("KMATERIALIZE_BENCH_FOLLOW_LOG"); p != "" {
			if err := os.WriteFile(p, []byte(d.log()), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		if keys != int64(f.keys) {
			b.Fatalf("followed table has %d keys, want %d", keys, f.keys)
		}
		var cpu time.Duration // the daemon's, start to stop
		if ps := d.cmd.ProcessState; ps != nil {
			cpu = ps.UserTime() + ps.SystemTime()
		}
		fmt.Printf("bench: follow round %d: applied %d records in %s (%.0f records/s; daemon CPU %s, broker CPU %s); raw consume %s (%.0f records/s); floor %s (%.0f records/s; CPU %s, broker CPU %s)\n",
			i, f.records, took.Round(time.Millisecond), float64(f.records)/took.Seconds(), cpu.Round(time.Millisecond), cpuSpent(bc2, bc3),
			raw.took.Round(time.Millisecond), float64(f.records)/raw.took.Seconds(),
			fl.took.Round(time.Millisecond), float64(f.records)/fl.took.Seconds(), fl.cpu.Round(time.Millisecond), cpuSpent(bc0, bc1))
	}
	fm, rm, flm := median(follows), median(raws), median(floors)
	b.ReportMetric(float64(f.records)/fm.Seconds(), "follow-records/s")
	b.ReportMetric(float64(f.records)/rm.Seconds(), "raw-records/s")
	b.ReportMetric(float64(f.records)/flm.Seconds(), "floor-records/s")
	b.ReportMetric(rm.Seconds()/fm.Seconds(), "follow/raw-rate")
	b.ReportMetric(flm.Seconds()/fm.Seconds(), "follow/floor-rate")
	fmt.Printf("bench: follow median %s (%.0f records/s), raw median %s (%.0f records/s), floor median %s (%.0f records/s): apply rate %.2fx of the floor's read rate, %.2fx of raw\n",
		fm.Round(time.Millisecond), float64(f.records)/fm.Seconds(), rm.Round(time.Millisecond), float64(f.records)/rm.Seconds(),
		flm.Round(time.Millisecond), float64(f.records)/flm.Seconds(), flm.Seconds()/fm.Seconds(), rm.Seconds()/fm.Seconds())
}

func equalEnds(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for p, v := range b {
		if a[p] != v {
			return false
		}
	}
	return true
}

// topicHighs asks the broker for tpc's high watermarks.
func topicHighs(f *fixture, tpc string) (map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.addr))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), tpc)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out, nil
}

// latencyRuns numbers BenchmarkFollowLatency's topics.
var latencyRuns int

// BenchmarkFollowLatency: produce-to-visible latency of a followed table
// at 1000 records/s for 10s (KMATERIALIZE_BENCH_LATENCY_SECONDS). The
// producer writes record n (value n) to a 1-partition topic every
// millisecond, noting when it sent it; a reader polls the key over the
// socket and notes when each value first shows. A record is visible when
// a value >= its own shows. Reports p50, p99 and max.
func BenchmarkFollowLatency(b *testing.B) {
	// The benchmark function runs more than once (b.N 1, then the
	// -benchtime): each run of each round gets its own topic.
	f := getFixture(b)
	secs := envInt("KMATERIALIZE_BENCH_LATENCY_SECONDS", 10)
	const rate = 1000
	for i := 0; i < b.N; i++ {
		latencyRuns++
		tpc := fmt.Sprintf("%s-latency-%d", f.topic, latencyRuns)
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
		emptyFollowed(b, db, "lat", tpc, 1)
		d := followDaemon(b, f, dir, db, "lat", tpc)
		hc := unixClient(d.sock)
		// Ready: following, with the live marks read.
		for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
			resp, err := hc.Get("http://kmaterialize/readyz")
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Since(start) > time.Minute {
				b.Fatalf("not ready; log:\n%s", d.log())
			}
		}

		n := secs * rate
		sent := make([]time.Time, n)
		seen := make([]time.Time, n)
		var mu sync.Mutex
		stop := make(chan struct{})
		readerDone := make(chan struct{})
		go func() {
			defer close(readerDone)
			next := 0 // the first record not yet visible
			for next < n {
				resp, err := hc.Get("http://kmaterialize/v1/tables/lat/keys/seq")
				now := time.Now()
				if err == nil {
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if v, err := strconv.Atoi(string(body)); err == nil && resp.StatusCode == http.StatusOK {
						mu.Lock()
						for ; next <= v && next < n; next++ {
							seen[next] = now
						}
						mu.Unlock()
					}
				}
				select {
				case <-stop:
					return
				default:
				}
			}
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
					wg.Done()
				})
		}
		tick.Stop()
		wg.Wait()
		select {
		case <-readerDone:
		case <-time.After(time.Minute):
			close(stop)
			<-readerDone
			b.Fatalf("not every record became visible; log:\n%s", d.log())
		}
		cl.Close()
		d.stop(b)
		if p := os.Getenv("KMATERIALIZE_BENCH_FOLLOW_LOG"); p != "" {
			if err := os.WriteFile(p, []byte(d.log()), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		lat := make([]time.Duration, n)
		for j := range lat {
			lat[j] = seen[j].Sub(sent[j])
		}
		slices.Sort(lat)
		p50, p99, mx := quantile(lat, 0.50), quantile(lat, 0.99), lat[n-1]
		b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
		fmt.Printf("bench: follow latency round %d: %d records at %d/s: produce-to-visible p50 %s, p99 %s, max %s\n",
			i, n, rate, p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond), mx.Round(100*time.Microsecond))
	}
}
