package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
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
// cores, not the benchmark's (where the readers run) nor the broker's (its own
// process too).
func startDaemon(b *testing.B, f *fixture) *daemon {
	b.Helper()
	dir := b.TempDir()
	bin := filepath.Join(dir, "kmaterialize")
	// An experiment's knob: another build of the daemon (an earlier
	// commit's, for a before/after under the same load).
	if v := os.Getenv("KMATERIALIZE_BENCH_DAEMON_BIN"); v != "" {
		bin = v
		fmt.Printf("bench: serve: the daemon is %s (KMATERIALIZE_BENCH_DAEMON_BIN)\n", bin)
	} else {
		build := exec.Command("go", "build", "-o", bin, "../cmd/kmaterialize")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			b.Fatalf("build kmaterialize: %v", err)
		}
	}
	cfg := filepath.Join(dir, "kmaterialize.yaml")
	doc := fmt.Sprintf("db: tables.db\nkafka:\n  brokers: %s\ntables:\n  - name: bench\n    topic: %s\n    stall_timeout: 60s\n", f.addr, f.topic)
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		b.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "daemon.log"))
	if err != nil {
		b.Fatal(err)
	}
	d := &daemon{cmd: exec.Command(bin, "--log-format", "json", "serve", "--config", cfg), sock: filepath.Join(dir, "tables.db.sock"), stderr: logf}
	d.cmd.Stderr = logf
	// An experiment's knob: the daemon's GOMAXPROCS alone (GOMAXPROCS in
	// the environment would change the broker's and the readers' too).
	if v := os.Getenv("KMATERIALIZE_BENCH_DAEMON_GOMAXPROCS"); v != "" {
		d.cmd.Env = append(os.Environ(), "GOMAXPROCS="+v)
	}
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

// newOracle folds the fixture's records (newFixture(records, keys)).
func newOracle(records, keys int) *oracle {
	o := &oracle{last: make(map[string]int, min(records, keys))}
	for i := 0; i < records; i++ {
		o.last[string(keyOf(i, keys))] = i
	}
	for k := range o.last {
		o.keys = append(o.keys, k)
	}
	slices.Sort(o.keys)
	return o
}

// cpu returns the daemon's user+system CPU time so far, from
// /proc/PID/stat (in clock ticks of 10ms, Linux's USER_HZ).
func (d *daemon) cpu(b *testing.B) time.Duration {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state is the first, utime the 12th, stime the 13th.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", d.cmd.Process.Pid, raw)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// keysRoute is the route label of point gets in the daemon's metrics.
const keysRoute = `route="GET /v1/tables/{table}/keys/{key...}"`

// serverHist returns two of the daemon's histograms from /metrics, as the
// cumulative count at each upper bound: the duration of the point gets it
// answered 200 (kmaterialize_http_request_duration_seconds: the time in
// the daemon's handler, without the queueing before it and the
// transport), and Go's scheduler latency (kmaterialize_go_sched_latencies_seconds:
// how long the daemon's goroutines, the reads' among them, waited runnable
// for a P). A read slow at the client with both fast waited for a CPU (the
// machine busy), not for a P.
func (d *daemon) serverHist(b *testing.B) (handler, sched map[float64]float64) {
	b.Helper()
	resp, err := unixClient(d.sock).Get("http://kmaterialize/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	handler, sched = map[float64]float64{}, map[float64]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		var into map[float64]float64
		switch {
		case strings.HasPrefix(line, "kmaterialize_http_request_duration_seconds_bucket{") &&
			strings.Contains(line, keysRoute) && strings.Contains(line, `code="200"`):
			into = handler
		case strings.HasPrefix(line, "kmaterialize_go_sched_latencies_seconds_bucket{"):
			into = sched
		default:
			continue
		}
		_, rest, _ := strings.Cut(line, `le="`)
		le, rest, _ := strings.Cut(rest, `"`)
		bound, err := strconv.ParseFloat(le, 64)
		if err != nil {
			bound = math.Inf(1)
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(rest[strings.LastIndexByte(rest, ' ')+1:]), 64)
		if err != nil {
			b.Fatalf("metrics line %q: %v", line, err)
		}
		into[bound] = n
	}
	// A daemon built before the metric has none: its quantiles print as
	// +Inf.
	return handler, sched
}

// histQuantile returns the upper bound of the bucket that holds quantile q
// of the reads counted between two serverHist snapshots.
func histQuantile(before, after map[float64]float64, q float64) float64 {
	bounds := make([]float64, 0, len(after))
	for le := range after {
		bounds = append(bounds, le)
	}
	slices.Sort(bounds)
	total := after[math.Inf(1)] - before[math.Inf(1)]
	for _, le := range bounds {
		if after[le]-before[le] >= q*total {
			return le
		}
	}
	return math.Inf(1)
}

// serverSide is the daemon's view of one phase: its CPU time, its
// handler-duration histogram and its scheduler-latency histogram.
type serverSide struct {
	cpu   time.Duration
	hist  map[float64]float64
	sched map[float64]float64
}

func (d *daemon) snapshot(b *testing.B) serverSide {
	s := serverSide{cpu: d.cpu(b)}
	s.hist, s.sched = d.serverHist(b)
	return s
}

// describe says what the daemon did between s and later, for reads reads.
func (s serverSide) describe(later serverSide, reads int, took time.Duration) string {
	cpu := later.cpu - s.cpu
	fmtBound := func(le float64) string {
		if math.IsInf(le, 1) {
			return "+Inf"
		}
		return time.Duration(le * float64(time.Second)).String()
	}
	return fmt.Sprintf("; daemon: CPU %s (%.0f%% of one core, %.0fµs per read), handler time p50 <= %s, p99 <= %s; "+
		"Go scheduler latency (all goroutines) p50 <= %s, p99 <= %s, p99.9 <= %s",
		cpu.Round(10*time.Millisecond), 100*cpu.Seconds()/took.Seconds(), float64(cpu.Microseconds())/float64(max(reads, 1)),
		fmtBound(histQuantile(s.hist, later.hist, 0.50)), fmtBound(histQuantile(s.hist, later.hist, 0.99)),
		fmtBound(histQuantile(s.sched, later.sched, 0.50)), fmtBound(histQuantile(s.sched, later.sched, 0.99)),
		fmtBound(histQuantile(s.sched, later.sched, 0.999)))
}

// reportServer reports the daemon's handler and scheduler p99 of a phase
// as benchmark metrics, beside the client's.
func (s serverSide) reportServer(b *testing.B, later serverSide) {
	us := func(le float64) float64 { return le * 1e6 }
	b.ReportMetric(us(histQuantile(s.hist, later.hist, 0.99)), "handler-p99-µs")
	if len(later.sched) > 0 {
		b.ReportMetric(us(histQuantile(s.sched, later.sched, 0.99)), "sched-p99-µs")
	}
}

// readStats is what the readers saw in one phase (sent from the reader
// process to the benchmark as JSON).
type readStats struct {
	Lat    []time.Duration  `json:"lat"`
	Failed int              `json:"failed"`
	Errs   []string         `json:"errs"`   // the first few failures
	ByGen  map[uint64]int64 `json:"by_gen"` // reads answered per generation
	Took   time.Duration    `json:"took"`
	// Sched is the reader process's own Go scheduler latency over the
	// phase: a read slow at the client may have waited for a CPU in the
	// reader, not in the daemon.
	Sched schedHist `json:"sched"`
}

// schedHist is a runtime/metrics /sched/latencies:seconds histogram (or
// the difference of two): Counts[i] samples of at most Upper[i] seconds
// (the last, unbounded, bucket's edge is math.MaxFloat64, which JSON can
// carry).
type schedHist struct {
	Upper  []float64 `json:"upper"`
	Counts []uint64  `json:"counts"`
}

// readSched samples this process's scheduler latency histogram.
func readSched() schedHist {
	sm := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(sm)
	if sm[0].Value.Kind() != metrics.KindFloat64Histogram {
		return schedHist{}
	}
	h := sm[0].Value.Float64Histogram()
	out := schedHist{Counts: slices.Clone(h.Counts)}
	for _, e := range h.Buckets[1:] {
		out.Upper = append(out.Upper, min(e, math.MaxFloat64))
	}
	return out
}

// since is h less an earlier sample of the same histogram.
func (h schedHist) since(earlier schedHist) schedHist {
	out := schedHist{Upper: h.Upper, Counts: slices.Clone(h.Counts)}
	if len(earlier.Counts) == len(out.Counts) {
		for i := range out.Counts {
			out.Counts[i] -= earlier.Counts[i]
		}
	}
	return out
}

// add adds o's counts (a histogram of the same layout) to h's.
func (h *schedHist) add(o schedHist) {
	if len(h.Counts) == 0 {
		*h = schedHist{Upper: o.Upper, Counts: slices.Clone(o.Counts)}
		return
	}
	if len(o.Counts) != len(h.Counts) {
		return
	}
	for i := range h.Counts {
		h.Counts[i] += o.Counts[i]
	}
}

// quantile is the upper edge of the bucket holding quantile q.
func (h schedHist) quantile(q float64) time.Duration {
	var total, cum uint64
	for _, n := range h.Counts {
		total += n
	}
	for i, n := range h.Counts {
		cum += n
		if total > 0 && float64(cum) >= q*float64(total) {
			return time.Duration(h.Upper[i] * float64(time.Second))
		}
	}
	return 0
}

func (s *readStats) merge(o *readStats) {
	s.Lat = append(s.Lat, o.Lat...)
	s.Failed += o.Failed
	if len(s.Errs) < 5 {
		s.Errs = append(s.Errs, o.Errs[:min(len(o.Errs), 5-len(s.Errs))]...)
	}
	for g, n := range o.ByGen {
		s.ByGen[g] += n
	}
	s.Sched.add(o.Sched)
}

func (s *readStats) fail(format string, args ...any) {
	s.Failed++
	if len(s.Errs) < 5 {
		s.Errs = append(s.Errs, fmt.Sprintf(format, args...))
	}
}

// read runs readers clients until stop is closed; each reads random keys
// one after another and checks every answer against the oracle: status
// 200, the key's latest value, and a generation that never goes back (a
// reader sees the old generation, then the new one, never a mix).
//
// With rate > 0 (requests per second, all clients together) each client
// sends on a fixed schedule. A read sent late because the previous answer
// came late counts from when it was due, so that a slow answer also
// charges the reads it delayed (no coordinated omission); a read whose
// client slept until it was due counts from the wake-up (a late timer is
// the reader's delay, not the daemon's). With rate 0 each client sends its
// next read as soon as it has the answer (a closed loop: the latency at
// the throughput the machine allows).
func read(sock string, o *oracle, rate float64, stop <-chan struct{}) *readStats {
	started := time.Now()
	var interval time.Duration
	if rate > 0 {
		interval = time.Duration(float64(readers) / rate * float64(time.Second))
	}
	var wg sync.WaitGroup
	per := make([]*readStats, readers)
	for r := range readers {
		st := &readStats{ByGen: map[uint64]int64{}, Lat: make([]time.Duration, 0, 1<<16)}
		per[r] = st
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := unixClient(sock)
			defer cl.CloseIdleConnections()
			rng := rand.New(rand.NewSource(int64(r) + time.Now().UnixNano()))
			var lastGen uint64
			due := started.Add(interval * time.Duration(r) / readers)
			for {
				slept := false
				if interval > 0 {
					if wait := time.Until(due); wait > 0 {
						slept = true
						select {
						case <-stop:
							return
						case <-time.After(wait):
						}
					}
				}
				select {
				case <-stop:
					return
				default:
				}
				k := o.keys[rng.Intn(len(o.keys))]
				t0 := time.Now()
				if interval > 0 {
					if !slept {
						t0 = due
					}
					due = due.Add(interval)
				}
				resp, err := cl.Get("http://kmaterialize/v1/tables/bench/keys/" + url.PathEscape(k))
				if err != nil {
					st.fail("GET %s: %v", k, err)
					continue
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				st.Lat = append(st.Lat, time.Since(t0))
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
					st.ByGen[gen]++
				}
			}
		}()
	}
	wg.Wait()
	all := &readStats{ByGen: map[uint64]int64{}, Took: time.Since(started)}
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
	if len(s.Lat) == 0 {
		b.Fatalf("serve %s: no reads", phase)
	}
	slices.Sort(s.Lat)
	rps := float64(len(s.Lat)) / s.Took.Seconds()
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.ReportMetric(us(quantile(s.Lat, 0.50)), "p50-µs")
	b.ReportMetric(us(quantile(s.Lat, 0.99)), "p99-µs")
	b.ReportMetric(rps, "req/s")
	b.ReportMetric(float64(s.Failed), "failed")
	fmt.Printf("bench: serve %s: %d clients, %d reads in %s: %.0f req/s; latency p50 %s p90 %s p99 %s p99.9 %s max %s; failed %d; "+
		"the readers' own Go scheduler latency p99 <= %s, p99.9 <= %s%s\n",
		phase, readers, len(s.Lat), s.Took.Round(time.Millisecond), rps,
		quantile(s.Lat, 0.50).Round(time.Microsecond), quantile(s.Lat, 0.90).Round(time.Microsecond),
		quantile(s.Lat, 0.99).Round(time.Microsecond), quantile(s.Lat, 0.999).Round(time.Microsecond),
		s.Lat[len(s.Lat)-1].Round(time.Microsecond), s.Failed,
		s.Sched.quantile(0.99).Round(time.Microsecond), s.Sched.quantile(0.999).Round(time.Microsecond), extra)
	for _, e := range s.Errs {
		fmt.Printf("bench: serve %s: failed read: %s\n", phase, e)
	}
	if s.Failed > 0 {
		b.Errorf("%d failed reads", s.Failed)
	}
}

// readerEnv names the reader process's job (a JSON readerJob) in its
// environment: TestMain runs readerMain instead of the benchmarks when it
// is set.
const readerEnv = "KMATERIALIZE_BENCH_READER"

// readerJob is what the reader process reads, from where, how fast.
type readerJob struct {
	Sock    string  `json:"sock"`
	Rate    float64 `json:"rate"`
	Records int     `json:"records"`
	Keys    int     `json:"keys"`
}

// readerMain is the reader process: it folds the oracle, says "ready" on
// stdout, starts reading when stdin gives it a line, stops at stdin's end,
// and writes its readStats as JSON on stdout. The readers have a process
// of their own, as the daemon's clients do (and as the broker does).
func readerMain() int {
	var job readerJob
	if err := json.Unmarshal([]byte(os.Getenv(readerEnv)), &job); err != nil {
		fmt.Fprintln(os.Stderr, "reader:", err)
		return 1
	}
	o := newOracle(job.Records, job.Keys)
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "reader: no go line:", err)
		return 1
	}
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, in) // until the benchmark closes stdin
		close(stop)
	}()
	sched := readSched()
	st := read(job.Sock, o, job.Rate, stop)
	st.Sched = readSched().since(sched)
	if err := json.NewEncoder(os.Stdout).Encode(st); err != nil {
		fmt.Fprintln(os.Stderr, "reader:", err)
		return 1
	}
	return 0
}

// readerProc is a running reader process.
type readerProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startReaders starts the reader process and waits until it is ready to
// read (its oracle folded); go starts the reads.
func startReaders(b *testing.B, d *daemon, f *fixture, rate float64) *readerProc {
	b.Helper()
	job, err := json.Marshal(readerJob{Sock: d.sock, Rate: rate, Records: f.records, Keys: envInt("KMATERIALIZE_BENCH_KEYS", 100_000)})
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), readerEnv+"="+string(job))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	rp := &readerProc{cmd: cmd, stdin: stdin, out: bufio.NewReaderSize(stdout, 1<<20)}
	if line, err := rp.out.ReadString('\n'); err != nil || line != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b.Fatalf("reader process: %q, %v", line, err)
	}
	return rp
}

func (rp *readerProc) start(b *testing.B) {
	b.Helper()
	if _, err := io.WriteString(rp.stdin, "go\n"); err != nil {
		b.Fatal(err)
	}
}

// stop ends the reads and returns what the readers saw.
func (rp *readerProc) stop(b *testing.B) *readStats {
	b.Helper()
	rp.stdin.Close()
	var st readStats
	err := json.NewDecoder(rp.out).Decode(&st)
	if werr := rp.cmd.Wait(); err == nil && werr != nil {
		err = werr
	}
	if err != nil {
		b.Fatalf("reader process: %v", err)
	}
	return &st
}

// BenchmarkServeGet measures point gets over the daemon's unix socket from
// 8 concurrent clients (goroutines of one reader process, each with its own
// connection): once with the daemon idle, and once while it rebuilds the
// table (the fixture's whole topic: KMATERIALIZE_BENCH_RECORDS, default
// 1M). Every read is checked against the oracle; a failed read fails the
// benchmark. One op of "idle" is KMATERIALIZE_BENCH_SERVE_SECONDS (default
// 5) of reads; one op of "rebuild" is one requested rebuild, read through
// from its request to its end. KMATERIALIZE_BENCH_SERVE_RATE paces the
// clients (requests per second, all together; default 0, as fast as the
// answers come).
//
//	go test -run '^$' -bench ServeGet -benchtime 1x ./bench/
func BenchmarkServeGet(b *testing.B) {
	f := getFixture(b)
	d := startDaemon(b, f)
	rate := float64(envInt("KMATERIALIZE_BENCH_SERVE_RATE", 0))
	mode := "closed loop"
	if rate > 0 {
		mode = fmt.Sprintf("paced at %.0f req/s", rate)
	}

	b.Run("idle", func(b *testing.B) {
		secs := envInt("KMATERIALIZE_BENCH_SERVE_SECONDS", 5)
		all := &readStats{ByGen: map[uint64]int64{}}
		var before serverSide
		for i := range b.N {
			rp := startReaders(b, d, f, rate)
			if i == 0 {
				before = d.snapshot(b)
			}
			rp.start(b)
			time.Sleep(time.Duration(secs) * time.Second) // the phase's length, not a wait for a condition
			st := rp.stop(b)
			all.Took += st.Took
			all.merge(st)
		}
		after := d.snapshot(b)
		before.reportServer(b, after)
		all.report(b, "idle, "+mode, before.describe(after, len(all.Lat), all.Took))
	})

	b.Run("rebuild", func(b *testing.B) {
		all := &readStats{ByGen: map[uint64]int64{}}
		var rebuilds []time.Duration
		var before serverSide
		for i := range b.N {
			rp := startReaders(b, d, f, rate)
			if i == 0 {
				before = d.snapshot(b)
			}
			rp.start(b)
			took, gen, err := rebuildNow(d)
			st := rp.stop(b)
			if err != nil {
				b.Fatalf("rebuild: %v; log:\n%s", err, d.log())
			}
			if st.ByGen[gen] == int64(len(st.Lat)-st.Failed) {
				fmt.Printf("bench: serve: note: every read of round %d was answered by the new generation %d\n", i+1, gen)
			}
			rebuilds = append(rebuilds, took)
			all.Took += st.Took
			all.merge(st)
		}
		b.ReportMetric(median(rebuilds).Seconds(), "rebuild-s")
		after := d.snapshot(b)
		before.reportServer(b, after)
		all.report(b, "during rebuild, "+mode, fmt.Sprintf("; rebuild of %d records took %s (median of %d); reads per generation %v%s",
			f.records, median(rebuilds).Round(time.Millisecond), len(rebuilds), all.ByGen,
			before.describe(after, len(all.Lat), all.Took)))
	})
}

// rebuildNow requests a rebuild of the table and waits for its end; it
// returns how long it took and the generation it published.
func rebuildNow(d *daemon) (time.Duration, uint64, error) {
	cl := &http.Client{Transport: unixClient(d.sock).Transport} // no timeout: a rebuild takes what it takes
	t0 := time.Now()
	resp, err := cl.Post("http://kmaterialize/v1/tables/bench/rebuild?wait=1", "", nil)
	took := time.Since(t0)
	if err != nil {
		return took, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return took, 0, err
	}
	var res struct {
		ExitCode   int     `json:"exit_code"`
		Error      *string `json:"error"`
		Generation *uint64 `json:"generation"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &res) != nil || res.ExitCode != 0 || res.Generation == nil {
		return took, 0, fmt.Errorf("POST rebuild?wait=1: %d %s", resp.StatusCode, body)
	}
	return took, *res.Generation, nil
}
