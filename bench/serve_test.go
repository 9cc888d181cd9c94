package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Readers is how many concurrent clients the serve benchmark runs, each
// with its own connection, reading one key after another.
const readers = 8

// daemon is a `kmaterialize serve` process serving the fixture's topic as
// table "bench", built at its start.
type daemon struct {
	cmd    *exec.Cmd
	sock   string
	stderr *os.File
}

// startDaemon builds the kmaterialize binary and starts it with a config
// whose one table is the fixture's topic, and waits (at most 10 minutes)
// until the table is published. The daemon runs in its own process, as in
// production: its rebuilds and its reads share that process's heap and
// cores, not the benchmark's (where the broker and the readers run).
func startDaemon(b *testing.B, f *fixture) *daemon {
	b.Helper()
	dir := b.TempDir()
	bin := filepath.Join(dir, "kmaterialize")
	build := exec.Command("go", "build", "-o", bin, "../cmd/kmaterialize")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		b.Fatalf("build kmaterialize: %v", err)
	}
	cfg := filepath.Join(dir, "kmaterialize.yaml")
	doc := fmt.Sprintf("db: tables.db\nkafka:\n  brokers: %s\ntables:\n  - name: bench\n    topic: %s\n    stall_timeout: 60s\n", f.broker.Addr, topic)
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		b.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "daemon.log"))
	if err != nil {
		b.Fatal(err)
	}
	d := &daemon{cmd: exec.Command(bin, "--log-format", "json", "serve", "--config", cfg), sock: filepath.Join(dir, "tables.db.sock"), stderr: logf}
	d.cmd.Stderr = logf
	if err := d.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.stop(b) })
	started := time.Now()
	cl := unixClient(d.sock)
	for {
		resp, err := cl.Get("http://kmaterialize/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Since(started) > 10*time.Minute {
			b.Fatalf("the daemon did not publish the table within 10m; log:\n%s", d.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Printf("bench: serve: daemon pid %d ready (first build of %d records included) in %s\n",
		d.cmd.Process.Pid, f.records, time.Since(started).Round(time.Millisecond))
	return d
}

func (d *daemon) log() string {
	b, _ := os.ReadFile(d.stderr.Name())
	return string(b)
}

// stop sends SIGTERM and waits for the exit (idempotent).
func (d *daemon) stop(b *testing.B) {
	if d.cmd.ProcessState != nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			b.Errorf("daemon: %v; log:\n%s", err, d.log())
		}
	case <-time.After(60 * time.Second):
		_ = d.cmd.Process.Kill()
		<-done
		b.Errorf("the daemon did not stop within 60s of SIGTERM")
	}
	d.stderr.Close()
}

// unixClient is an HTTP client with one keep-alive connection to sock.
func unixClient(sock string) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		MaxIdleConnsPerHost: 1,
		DisableCompression:  true,
	}}
}

// oracle is the latest value of every key of the fixture's topic: the
// record with the highest index wins (a key lives in one partition, where
// records keep the order they were produced in).
type oracle struct {
	keys []string // keyOf(i) for a random i: keys in proportion to their records
	last map[string]int
}

func newOracle(f *fixture) *oracle {
	keys := envInt("KMATERIALIZE_BENCH_KEYS", 100_000) // the modulus the fixture used
	o := &oracle{last: make(map[string]int, f.keys)}
	for i := 0; i < f.records; i++ {
		o.last[string(keyOf(i, keys))] = i
	}
	for k := range o.last {
		o.keys = append(o.keys, k)
	}
	slices.Sort(o.keys)
	return o
}

// readStats is what the readers saw in one phase.
type readStats struct {
	lat    []time.Duration
	failed int
	errs   []string         // the first few failures
	byGen  map[uint64]int64 // reads answered per generation
	took   time.Duration
}

func (s *readStats) merge(o *readStats) {
	s.lat = append(s.lat, o.lat...)
	s.failed += o.failed
	if len(s.errs) < 5 {
		s.errs = append(s.errs, o.errs[:min(len(o.errs), 5-len(s.errs))]...)
	}
	for g, n := range o.byGen {
		s.byGen[g] += n
	}
}

func (s *readStats) fail(format string, args ...any) {
	s.failed++
	if len(s.errs) < 5 {
		s.errs = append(s.errs, fmt.Sprintf(format, args...))
	}
}

// read runs readers clients until stop is closed; each reads random keys
// one after another and checks every answer against the oracle: status
// 200, the key's latest value, and a generation that never goes back (a
// reader sees the old generation, then the new one, never a mix).
func read(d *daemon, o *oracle, stop <-chan struct{}) *readStats {
	started := time.Now()
	var wg sync.WaitGroup
	per := make([]*readStats, readers)
	for r := range readers {
		st := &readStats{byGen: map[uint64]int64{}, lat: make([]time.Duration, 0, 1<<16)}
		per[r] = st
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := unixClient(d.sock)
			defer cl.CloseIdleConnections()
			rng := rand.New(rand.NewSource(int64(r) + time.Now().UnixNano()))
			var lastGen uint64
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := o.keys[rng.Intn(len(o.keys))]
				t0 := time.Now()
				resp, err := cl.Get("http://kmaterialize/v1/tables/bench/keys/" + url.PathEscape(k))
				if err != nil {
					st.fail("GET %s: %v", k, err)
					continue
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				st.lat = append(st.lat, time.Since(t0))
				if err != nil {
					st.fail("GET %s: reading the body: %v", k, err)
					continue
				}
				gen, gerr := strconv.ParseUint(resp.Header.Get("Kmaterialize-Generation"), 10, 64)
				switch {
				case resp.StatusCode != http.StatusOK:
					st.fail("GET %s: %d %s", k, resp.StatusCode, body)
				case !bytes.Equal(body, valueOf(o.last[k])):
					st.fail("GET %s: %q, oracle %q", k, body, valueOf(o.last[k]))
				case gerr != nil || gen < lastGen:
					st.fail("GET %s: generation %q after %d", k, resp.Header.Get("Kmaterialize-Generation"), lastGen)
				default:
					lastGen = gen
					st.byGen[gen]++
				}
			}
		}()
	}
	wg.Wait()
	all := &readStats{byGen: map[uint64]int64{}, took: time.Since(started)}
	for _, st := range per {
		all.merge(st)
	}
	return all
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// report prints and reports one phase's figures.
func (s *readStats) report(b *testing.B, phase string, extra string) {
	slices.Sort(s.lat)
	rps := float64(len(s.lat)) / s.took.Seconds()
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.ReportMetric(us(quantile(s.lat, 0.50)), "p50-µs")
	b.ReportMetric(us(quantile(s.lat, 0.99)), "p99-µs")
	b.ReportMetric(rps, "req/s")
	b.ReportMetric(float64(s.failed), "failed")
	fmt.Printf("bench: serve %s: %d clients, %d reads in %s: %.0f req/s; latency p50 %s p90 %s p99 %s p99.9 %s max %s; failed %d%s\n",
		phase, readers, len(s.lat), s.took.Round(time.Millisecond), rps,
		quantile(s.lat, 0.50).Round(time.Microsecond), quantile(s.lat, 0.90).Round(time.Microsecond),
		quantile(s.lat, 0.99).Round(time.Microsecond), quantile(s.lat, 0.999).Round(time.Microsecond),
		s.lat[len(s.lat)-1].Round(time.Microsecond), s.failed, extra)
	for _, e := range s.errs {
		fmt.Printf("bench: serve %s: failed read: %s\n", phase, e)
	}
	if s.failed > 0 {
		b.Errorf("%d failed reads", s.failed)
	}
}

// BenchmarkServeGet measures point gets over the daemon's unix socket from
// 8 concurrent clients: once with the daemon idle, and once while it
// rebuilds the table (the fixture's whole topic; KMATERIALIZE_BENCH_RECORDS,
// default 1M). Every read is checked against the oracle; a failed read
// fails the benchmark. One op of "idle" is KMATERIALIZE_BENCH_SERVE_SECONDS
// (default 5) of reads; one op of "rebuild" is one requested rebuild, read
// through from its request to its end.
//
//	go test -run '^$' -bench ServeGet -benchtime 1x ./bench/
func BenchmarkServeGet(b *testing.B) {
	f := getFixture(b)
	d := startDaemon(b, f)
	o := newOracle(f)
	if len(o.keys) != f.keys {
		b.Fatalf("oracle has %d keys, the fixture %d", len(o.keys), f.keys)
	}

	b.Run("idle", func(b *testing.B) {
		secs := envInt("KMATERIALIZE_BENCH_SERVE_SECONDS", 5)
		all := &readStats{byGen: map[uint64]int64{}}
		b.ResetTimer()
		for range b.N {
			stop := make(chan struct{})
			timer := time.AfterFunc(time.Duration(secs)*time.Second, func() { close(stop) })
			st := read(d, o, stop)
			timer.Stop()
			all.took += st.took
			all.merge(st)
		}
		b.StopTimer()
		all.report(b, "idle", "")
	})

	b.Run("rebuild", func(b *testing.B) {
		all := &readStats{byGen: map[uint64]int64{}}
		var rebuilds []time.Duration
		b.ResetTimer()
		for range b.N {
			stop := make(chan struct{})
			type result struct {
				ExitCode   int     `json:"exit_code"`
				Error      *string `json:"error"`
				Generation *uint64 `json:"generation"`
			}
			var (
				res    result
				resErr error
				took   time.Duration
			)
			done := make(chan struct{})
			go func() {
				defer close(done)
				defer close(stop)
				cl := &http.Client{Transport: unixClient(d.sock).Transport} // no timeout: a rebuild takes what it takes
				t0 := time.Now()
				resp, err := cl.Post("http://kmaterialize/v1/tables/bench/rebuild?wait=1", "", nil)
				took = time.Since(t0)
				if err != nil {
					resErr = err
					return
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusOK {
					resErr = fmt.Errorf("POST rebuild: %d %s", resp.StatusCode, body)
					return
				}
				resErr = json.Unmarshal(body, &res)
			}()
			st := read(d, o, stop)
			<-done
			if resErr == nil && (res.ExitCode != 0 || res.Generation == nil) {
				resErr = errors.New("the rebuild did not publish")
			}
			if resErr != nil {
				b.Fatalf("rebuild: %v (%+v); log:\n%s", resErr, res, d.log())
			}
			rebuilds = append(rebuilds, took)
			all.took += st.took
			all.merge(st)
		}
		b.StopTimer()
		b.ReportMetric(median(rebuilds).Seconds(), "rebuild-s")
		all.report(b, "during rebuild", fmt.Sprintf("; rebuild of %d records took %s (median of %d); reads per generation %v",
			f.records, median(rebuilds).Round(time.Millisecond), len(rebuilds), all.byGen))
	})
}
