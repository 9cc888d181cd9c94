package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/kafkatest"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
)

const (
	partitions = 6
	valueSize  = 100
)

// envRaw makes the test binary the raw-consume child: replay.Run with a
// no-op sink against the broker at its value, over the topic envRawTopic
// names, then print the record count and exit. The raw consume runs in a process of its own, like the rebuild
// and kcat, so that all three pay the same process start and none shares a
// heap with the benchmark.
const (
	envRaw      = "KMATERIALIZE_BENCH_RAW_BROKERS"
	envRawTopic = "KMATERIALIZE_BENCH_RAW_TOPIC"
)

// rawProps are the consumer properties of the raw consume: the replay's
// tuned defaults with the prefetch queue a rebuild with the default
// --memory gets (materialize: DefaultMemory/8), so that the two differ only
// by the fold and the store.
var rawProps = map[string]string{"queued.max.messages.kbytes": strconv.Itoa(256 << 20 / 8 / 1024)}

func rawMain(addr, topic string) int {
	if p := os.Getenv("KMATERIALIZE_BENCH_RAW_CPUPROFILE"); p != "" {
		if f, err := os.Create(p); err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
		}
	}
	res, err := replay.Run(context.Background(), replay.Config{
		Brokers: addr, Topic: topic, Props: rawProps, StallTimeout: 30 * time.Second, Log: zerolog.Nop(),
		Readers: benchReaders(),
	}, func([]fold.Record) error { return nil })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(res.Records)
	return 0
}

// benchReaders is KMATERIALIZE_BENCH_READERS: the readers of the raw
// consume and of the rebuild (--readers), the rebuild's default
// (materialize.DefaultReaders) unless set.
func benchReaders() int { return envInt("KMATERIALIZE_BENCH_READERS", materialize.DefaultReaders) }

// fixture is the broker, the built binaries and the filled topic, shared
// by every benchmark iteration (filling is not what is measured). The
// broker is the kfake broker in a process the fixture starts and stops, or,
// when KMATERIALIZE_TEST_KAFKA names one (scripts/test-kafka), that Apache
// Kafka broker, which the fixture only uses: it creates its topics there
// under names of its own (a broker outlives one run) and deletes them at
// the end, and never stops the broker.
type fixture struct {
	dir      string // built binaries
	kmz      string
	floor    string    // the C floor (bench/internal/floor)
	broker   *exec.Cmd // the kfake broker process; nil on Apache Kafka
	brokerIn io.WriteCloser
	kafka    bool     // on the Apache Kafka broker of KMATERIALIZE_TEST_KAFKA
	created  []string // topics the fixture created on it, deleted by close
	addr     string
	topic    string // the filled topic every benchmark but update and latency reads
	records  int
	keys     int
	fill     time.Duration
}

var (
	fixOnce sync.Once
	fix     *fixture
	fixErr  error
)

func envInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return def
}

func getFixture(b *testing.B) *fixture {
	b.Helper()
	fixOnce.Do(func() {
		fix, fixErr = newFixture(envInt("KMATERIALIZE_BENCH_RECORDS", 1_000_000), envInt("KMATERIALIZE_BENCH_KEYS", 100_000))
	})
	if fixErr != nil {
		b.Fatal(fixErr)
	}
	return fix
}

// keyOf is the key of record i: i*7919 mod keys walks every key once per
// round of `keys` records (7919 is prime and shares no factor with 10^n), so
// the topic has exactly min(records, keys) distinct keys, spread out in time.
func keyOf(i, keys int) []byte {
	return fmt.Appendf(nil, "key-%08d", (i*7919)%keys)
}

// partitionOf keeps a key in one partition, as Kafka's default partitioner
// does.
func partitionOf(key []byte) int32 {
	h := fnv.New32a()
	_, _ = h.Write(key)
	return int32(h.Sum32() % partitions)
}

// benchFold is the fold the rebuild benchmark measures: "latest" (the
// default), or "count" (KMATERIALIZE_BENCH_FOLD=count), for which every
// value is a JSON event whose identity is the record's key, so the topic
// has min(records, keys) distinct identities, each in countGroups groups.
var benchFold = os.Getenv("KMATERIALIZE_BENCH_FOLD")

const countGroups = 100

// countArgs are the rebuild flags of the count fold over the benchmark's
// events.
var countArgs = []string{"--fold", "count", "--identity-field", "id", "--group-field", "g"}

// eventOf is the count fold's value for key: the same bytes every time the
// key comes back (a duplicate, never a conflict), padded to valueSize.
func eventOf(key []byte) []byte {
	h := fnv.New32a()
	_, _ = h.Write(key)
	v := fmt.Appendf(nil, `{"id":%q,"g":"g%02d","pad":"`, key, h.Sum32()%countGroups)
	for len(v) < valueSize-2 {
		v = append(v, 'x')
	}
	return append(v, '"', '}')
}

func valueOf(i int) []byte {
	v := make([]byte, valueSize)
	s := strconv.Itoa(i)
	for j := range v {
		v[j] = 'a' + byte((i+j)%26)
	}
	copy(v, s)
	return v
}

func build(dir, name, pkg string) (string, error) {
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

func newFixture(records, keys int) (*fixture, error) {
	dir, err := os.MkdirTemp("", "kmaterialize-bench-")
	if err != nil {
		return nil, err
	}
	f := &fixture{dir: dir, records: records, keys: min(records, keys)}
	if f.kmz, err = build(dir, "kmaterialize", "github.com/kmaterialize/kmaterialize/cmd/kmaterialize"); err != nil {
		return nil, err
	}
	if f.floor, err = build(dir, "floor", "github.com/kmaterialize/kmaterialize/bench/internal/floor"); err != nil {
		return nil, err
	}
	if err := printVersions(f.floor); err != nil {
		return nil, err
	}
	ep, external, err := kafkatest.FromEnv()
	if err != nil {
		return nil, err
	}
	var brokerLine string
	if external {
		// Its PLAINTEXT listener, as the tests use: no SASL handshake in
		// any of the timed clients.
		f.kafka, f.addr = true, ep.Addr
		f.topic = fmt.Sprintf("bench-%d-%d", os.Getpid(), time.Now().Unix())
		if err := f.createTopic(f.topic, partitions); err != nil {
			f.close()
			return nil, err
		}
		brokerLine = fmt.Sprintf("broker: Apache Kafka %s at %s", ep.Version, ep.Addr)
	} else {
		f.topic = "bench"
		if err := f.startKfake(); err != nil {
			f.close()
			return nil, err
		}
		brokerLine = fmt.Sprintf("broker: kfake in its own process (pid %d)", f.broker.Process.Pid)
	}
	if err := f.fillTopic(); err != nil {
		f.close()
		return nil, err
	}
	fmt.Printf("bench: filled %s: %d records, %d keys, %d partitions, %dB values in %s (%.0f records/s); %s; %d CPUs\n",
		f.topic, records, f.keys, partitions, valueSize, f.fill.Round(time.Millisecond),
		float64(records)/f.fill.Seconds(), brokerLine, runtime.NumCPU())
	return f, nil
}

// startKfake starts the kfake broker (bench/internal/kfakebroker) in a
// process of its own with the fixture's topic, and reads its address.
func (f *fixture) startKfake() error {
	brokerBin, err := build(f.dir, "kfakebroker", "github.com/kmaterialize/kmaterialize/bench/internal/kfakebroker")
	if err != nil {
		return err
	}
	f.broker = exec.Command(brokerBin, "-topic", f.topic, "-partitions", strconv.Itoa(partitions))
	f.broker.Stderr = os.Stderr
	if f.brokerIn, err = f.broker.StdinPipe(); err != nil {
		return err
	}
	out, err := f.broker.StdoutPipe()
	if err != nil {
		return err
	}
	if err := f.broker.Start(); err != nil {
		return fmt.Errorf("start kfakebroker: %w", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return fmt.Errorf("broker process: %w", err)
	}
	f.addr = strings.TrimSpace(line)
	return nil
}

// createTopic creates topic with parts partitions (one replica) and waits
// until every partition has a leader: Apache Kafka answers CreateTopics
// before its partitions can take records, and the daemon and librdkafka
// would otherwise start on a topic they cannot see yet. On Apache Kafka the
// topic is deleted by close.
func (f *fixture) createTopic(topic string, parts int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, parts, 1, nil, topic); err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	if f.kafka {
		f.created = append(f.created, topic)
	}
	for {
		md, err := adm.Metadata(ctx, topic)
		if err == nil {
			if td, ok := md.Topics[topic]; ok && td.Err == nil && len(td.Partitions) == int(parts) {
				ready := true
				for _, p := range td.Partitions {
					ready = ready && p.Err == nil && p.Leader >= 0
				}
				if ready {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s: no leader for every partition: %w", topic, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// printVersions prints, once per run, the librdkafka the floor (and so the
// replay) runs and kcat's version line, which names its own librdkafka.
func printVersions(floor string) error {
	out, err := exec.Command(floor, "-version").Output()
	if err != nil {
		return fmt.Errorf("floor -version: %w", err)
	}
	kcatVersion := "not found"
	if path, err := exec.LookPath("kcat"); err == nil {
		// kcat -V's first line is its name; the version (with its
		// librdkafka's) is on the line that starts with "Version".
		v, _ := exec.Command(path, "-V").Output()
		lines := strings.Split(strings.TrimSpace(string(v)), "\n")
		kcatVersion = lines[0]
		for _, l := range lines {
			if strings.HasPrefix(l, "Version ") {
				kcatVersion = l
				break
			}
		}
	}
	fmt.Printf("bench: floor and replay on %s (confluent-kafka-go's bundled); kcat: %s\n", strings.TrimSpace(string(out)), kcatVersion)
	return nil
}

func (f *fixture) fillTopic() error {
	started := time.Now()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(f.addr),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(f.topic),
		kgo.ProducerLinger(50*time.Millisecond),
		kgo.ProducerBatchMaxBytes(1<<20),
		kgo.MaxBufferedRecords(200_000),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	ctx := context.Background()
	for i := 0; i < f.records; i++ {
		k := keyOf(i, f.keys)
		v := valueOf(i)
		if benchFold == "count" {
			v = eventOf(k)
		}
		wg.Add(1)
		cl.Produce(ctx, &kgo.Record{Topic: f.topic, Partition: partitionOf(k), Key: k, Value: v},
			func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
				wg.Done()
			})
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("fill %s: %w", f.topic, firstErr)
	}
	f.fill = time.Since(started)
	return nil
}

func (f *fixture) close() {
	if len(f.created) > 0 {
		// The Apache Kafka broker outlives this run: leave it none of the
		// topics' records.
		if err := f.deleteTopics(f.created...); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
	}
	if f.brokerIn != nil {
		_ = f.brokerIn.Close()
	}
	if f.broker != nil && f.broker.Process != nil {
		done := make(chan struct{})
		go func() { _ = f.broker.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = f.broker.Process.Kill()
			<-done
		}
	}
	_ = os.RemoveAll(f.dir)
}

func (f *fixture) deleteTopics(topics ...string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resps, err := kadm.NewClient(cl).DeleteTopics(ctx, topics...)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		return fmt.Errorf("delete topics %v: %w", topics, err)
	}
	return nil
}

// proc is what a child process cost: wall time (start to exit), the peak of
// its resident anonymous memory (RssAnon: heap, stacks, librdkafka's
// buffers; not the database file bbolt maps, which is page cache) and of
// its whole resident set sampled every 10ms, the kernel's high-water mark
// of its resident set (VmHWM, read at the last sample), and its rusage
// maximum RSS. Both of the last count mapped file pages too; and on Linux
// ru_maxrss of a child started by fork/vfork+exec also counts the parent's
// resident set at the exec (the old mm's high-water mark is kept), so it
// reads as at least the benchmark process's own size: VmHWM is the child's.
type proc struct {
	took     time.Duration
	peakAnon int64
	peakRSS  int64
	hwm      int64
	maxRSS   int64
	cpu      time.Duration
	stdout   string
	stderr   string
}

// runChild runs cmd, sampling /proc/PID/status until it exits.
func runChild(cmd *exec.Cmd) (proc, error) {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	var p proc
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return p, err
	}
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			anon, rss, hwm := readStatus(status)
			p.peakAnon, p.peakRSS, p.hwm = max(p.peakAnon, anon), max(p.peakRSS, rss), max(p.hwm, hwm)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	err := cmd.Wait()
	p.took = time.Since(started)
	close(done)
	<-sampled
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		p.maxRSS = ru.Maxrss << 10
		p.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	p.stdout, p.stderr = out.String(), errb.String()
	if err != nil {
		return p, fmt.Errorf("%s: %w\n%s", filepath.Base(cmd.Path), err, errb.String())
	}
	return p, nil
}

// brokerCPU is the kfake broker process's CPU time so far (user and
// system, from /proc/PID/stat); -1 on Apache Kafka, whose process is not
// the fixture's. The difference across a phase is what the broker spent
// serving it: on two cores the broker's CPU is CPU a reader does not get.
func (f *fixture) brokerCPU() time.Duration {
	if f.broker == nil || f.broker.Process == nil {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", f.broker.Process.Pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields counted from after its closing one.
	_, rest, ok := strings.Cut(string(b), ") ")
	if !ok {
		return 0
	}
	fields := strings.Fields(rest)
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	// USER_HZ is 100 on Linux.
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// cpuSpent is what a process spent between two readings of brokerCPU, or
// "-" when they could not be taken.
func cpuSpent(from, to time.Duration) string {
	if from < 0 || to < 0 {
		return "-"
	}
	return (to - from).Round(time.Millisecond).String()
}

// readStatus returns RssAnon, VmRSS and VmHWM in bytes (0 once the process
// is gone).
func readStatus(path string) (anon, rss, hwm int64) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[0], 10, 64)
		switch name {
		case "RssAnon":
			anon = kb << 10
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			hwm = kb << 10
		}
	}
	return anon, rss, hwm
}

// rawConsume runs the raw-consume child and checks it read every record.
func (f *fixture) rawConsume() (proc, error) {
	self, err := os.Executable()
	if err != nil {
		return proc{}, err
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), envRaw+"="+f.addr, envRawTopic+"="+f.topic)
	p, err := runChild(cmd)
	if err != nil {
		return p, err
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(p.stdout)); n != f.records {
		return p, fmt.Errorf("raw consume read %q records, want %d", p.stdout, f.records)
	}
	return p, nil
}

// floorArgs is the floor's command line: the raw consume's properties
// (rawProps, over the replay's own), so that floor and raw differ only by
// the read loop.
func (f *fixture) floorArgs(perMessage bool) []string {
	args := []string{"-brokers", f.addr, "-topic", f.topic}
	for _, k := range slices.Sorted(maps.Keys(rawProps)) {
		args = append(args, "-X", k+"="+rawProps[k])
	}
	if perMessage {
		args = append(args, "-per-message")
	}
	return args
}

// floorRead runs the C floor (bench/internal/floor) over the topic and
// checks it read every record.
func (f *fixture) floorRead(perMessage bool) (proc, error) {
	p, err := runChild(exec.Command(f.floor, f.floorArgs(perMessage)...))
	if err != nil {
		return p, err
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(p.stdout)); n != f.records {
		return p, fmt.Errorf("floor read %q records, want %d", p.stdout, f.records)
	}
	return p, nil
}

// rebuild runs `kmaterialize rebuild` of the topic into db as a child.
func (f *fixture) rebuild(db string, extra ...string) (proc, error) {
	args := []string{"--log-format", "json", "rebuild", "--brokers", f.addr, "--topic", f.topic, "--db", db,
		"--readers", strconv.Itoa(benchReaders())}
	rows := f.keys
	if benchFold == "count" {
		args = append(args, countArgs...)
		rows = min(f.keys, countGroups)
	}
	p, err := runChild(exec.Command(f.kmz, append(args, extra...)...))
	if err != nil {
		return p, err
	}
	want := fmt.Sprintf("%d keys, %d records read", rows, f.records)
	if !strings.Contains(p.stdout, want) {
		return p, fmt.Errorf("rebuild printed %q, want %q", p.stdout, want)
	}
	return p, nil
}

// kcatArgs is the kcat command line the benchmark times: the issue's,
// reading with read_committed like the replay and printing key and value.
func kcatArgs(addr, topic string) []string {
	return []string{"-C", "-b", addr, "-t", topic, "-o", "beginning", "-e", "-q",
		"-X", "isolation.level=read_committed", "-f", "%k %s\n"}
}

// kcat times kcat over the same topic, its output to /dev/null, if kcat is
// on PATH. kcat -e exits once every partition reported its end, so it has
// read every record; it reaches the end by an empty fetch, which the broker
// holds for fetch.wait.max.ms (librdkafka's default, 500ms) before
// answering: that wait is part of its time, as it is of any kcat run.
func (f *fixture) kcat() (proc, error) {
	path, err := exec.LookPath("kcat")
	if err != nil {
		return proc{}, err
	}
	return runChild(exec.Command(path, kcatArgs(f.addr, f.topic)...))
}

// fileSize returns the database file's size and bbolt's high-water mark
// (the bytes of pages in use or free).
func fileSize(path string) (file, pages int64, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error { pages = tx.Size(); return nil })
	return fi.Size(), pages, err
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianF(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// BenchmarkRebuild runs rounds of: the C floor (bench/internal/floor: a C
// read loop over the same librdkafka with the replay's properties), a raw
// consume of the whole topic (the replay's read loop, no fold, no store), a
// full rebuild of it into a fresh file (the built binary, default
// --memory), and kcat when it is installed, each in its own process,
// against the broker in its own process. One op is one round; the reported
// times and ratios are medians over the rounds (use -benchtime 3x for
// three). The headline is rebuild/floor, beside rebuild/kcat and
// rebuild/raw, and raw/floor for the read loop alone.
// KMATERIALIZE_BENCH_FLOOR_PER_MESSAGE=1 adds the floor reading one
// message per rd_kafka_consumer_poll call to each round. The first round's
// file is then compacted, to compare the rebuild's file with the same table
// compacted. KMATERIALIZE_BENCH_CPUPROFILE=FILE profiles the first round's
// rebuild.
func BenchmarkRebuild(b *testing.B) {
	f := getFixture(b)
	var floors, floorsPM, raws, rebuilds, kcats []time.Duration
	var rebRaw, rebFloor, rawFloor, rebKcat []float64
	var rebAnon, rebRSS, rebHWM, rebMax, rawAnon, rawHWM, floorAnon int64
	_, kcatErr := exec.LookPath("kcat")
	if kcatErr != nil {
		fmt.Println("bench: kcat not found")
	}
	if os.Getenv("KMATERIALIZE_BENCH_KCAT") == "0" {
		kcatErr = fmt.Errorf("kcat skipped (KMATERIALIZE_BENCH_KCAT=0)")
		fmt.Println("bench:", kcatErr)
	}
	perMessage := os.Getenv("KMATERIALIZE_BENCH_FLOOR_PER_MESSAGE") == "1"
	var file, pages int64
	var dbFile string
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fl, err := f.floorRead(false)
		if err != nil {
			b.Fatal(err)
		}
		floorPMLine := ""
		if perMessage {
			pm, err := f.floorRead(true)
			if err != nil {
				b.Fatal(err)
			}
			floorsPM = append(floorsPM, pm.took)
			floorPMLine = fmt.Sprintf(" (one message per call %s)", pm.took.Round(time.Millisecond))
		}
		raw, err := f.rawConsume()
		if err != nil {
			b.Fatal(err)
		}
		db := filepath.Join(b.TempDir(), "bench.db")
		var extra []string
		if p := os.Getenv("KMATERIALIZE_BENCH_CPUPROFILE"); p != "" && i == 0 {
			extra = append(extra, "--cpuprofile", p)
		}
		reb, err := f.rebuild(db, extra...)
		if err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			dbFile = db
			if file, pages, err = fileSize(db); err != nil {
				b.Fatal(err)
			}
		} else if err := os.Remove(db); err != nil {
			// Only the first round's file is kept (for compact): the
			// others would fill the page cache under the next rounds.
			b.Fatal(err)
		}
		floors, raws, rebuilds = append(floors, fl.took), append(raws, raw.took), append(rebuilds, reb.took)
		rebRaw = append(rebRaw, reb.took.Seconds()/raw.took.Seconds())
		rebFloor = append(rebFloor, reb.took.Seconds()/fl.took.Seconds())
		rawFloor = append(rawFloor, raw.took.Seconds()/fl.took.Seconds())
		rebAnon, rebRSS, rebHWM, rebMax = max(rebAnon, reb.peakAnon), max(rebRSS, reb.peakRSS), max(rebHWM, reb.hwm), max(rebMax, reb.maxRSS)
		rawAnon, rawHWM, floorAnon = max(rawAnon, raw.peakAnon), max(rawHWM, raw.hwm), max(floorAnon, fl.peakAnon)
		kcatLine := ""
		if kcatErr == nil {
			k, err := f.kcat()
			if err != nil {
				b.Fatal(err)
			}
			kcats = append(kcats, k.took)
			rebKcat = append(rebKcat, reb.took.Seconds()/k.took.Seconds())
			kcatLine = fmt.Sprintf(", kcat %s", k.took.Round(time.Millisecond))
		}
		fmt.Printf("bench: round %d: floor %s (cpu %s)%s, raw consume %s (cpu %s, anon %.0f MiB), rebuild %s (cpu %s, anon %.0f MiB, hwm %.0f MiB)%s; rebuild/floor %.2fx, raw/floor %.2fx, rebuild/raw %.2fx\n", i+1,
			fl.took.Round(time.Millisecond), fl.cpu.Round(time.Millisecond), floorPMLine,
			raw.took.Round(time.Millisecond), raw.cpu.Round(time.Millisecond), mib(raw.peakAnon),
			reb.took.Round(time.Millisecond), reb.cpu.Round(time.Millisecond), mib(reb.peakAnon), mib(reb.hwm),
			kcatLine, rebFloor[i], rawFloor[i], rebRaw[i])
	}
	b.StopTimer()
	c, err := runChild(exec.Command(f.kmz, "compact", "--db", dbFile))
	if err != nil {
		b.Fatal(err)
	}
	compacted, _, err := fileSize(dbFile)
	if err != nil {
		b.Fatal(err)
	}
	recs := float64(f.records)
	fl, raw, reb := median(floors), median(raws), median(rebuilds)
	b.ReportMetric(recs/fl.Seconds(), "floor-rec/s")
	b.ReportMetric(recs/raw.Seconds(), "raw-rec/s")
	b.ReportMetric(recs/reb.Seconds(), "rebuild-rec/s")
	b.ReportMetric(medianF(rebFloor), "rebuild/floor")
	b.ReportMetric(medianF(rawFloor), "raw/floor")
	b.ReportMetric(medianF(rebRaw), "rebuild/raw")
	b.ReportMetric(mib(rebAnon), "rebuild-peak-anon-MiB")
	b.ReportMetric(mib(rebHWM), "rebuild-hwm-MiB")
	b.ReportMetric(float64(file)/float64(compacted), "file/compacted")
	kcatLine, kcatRatio := "kcat not run", "rebuild/kcat -"
	if len(kcats) > 0 {
		k := median(kcats)
		b.ReportMetric(recs/k.Seconds(), "kcat-rec/s")
		b.ReportMetric(medianF(rebKcat), "rebuild/kcat")
		kcatLine = fmt.Sprintf("kcat %s (%.0f records/s)", k.Round(time.Millisecond), recs/k.Seconds())
		kcatRatio = fmt.Sprintf("rebuild/kcat %.2fx", medianF(rebKcat))
	}
	pmLine := ""
	if len(floorsPM) > 0 {
		pm := median(floorsPM)
		b.ReportMetric(recs/pm.Seconds(), "floor-per-message-rec/s")
		pmLine = fmt.Sprintf(" (one message per call: %s, %.0f records/s)", pm.Round(time.Millisecond), recs/pm.Seconds())
	}
	fmt.Printf("bench: %d records, %d keys, median of %d rounds: floor %s (%.0f records/s)%s, raw consume %s (%.0f records/s), rebuild %s (%.0f records/s); %s\n",
		f.records, f.keys, b.N, fl.Round(time.Millisecond), recs/fl.Seconds(), pmLine,
		raw.Round(time.Millisecond), recs/raw.Seconds(), reb.Round(time.Millisecond), recs/reb.Seconds(), kcatLine)
	fmt.Printf("bench: headline: rebuild/floor %.2fx, %s, rebuild/raw %.2fx; raw/floor %.2fx (the read loop alone against the floor)\n",
		medianF(rebFloor), kcatRatio, medianF(rebRaw), medianF(rawFloor))
	fmt.Printf("bench: rebuild peak RssAnon %.0f MiB, peak VmRSS %.0f MiB, VmHWM %.0f MiB, rusage maxrss %.0f MiB (with the benchmark's own RSS at the exec); raw consume peak RssAnon %.0f MiB, VmHWM %.0f MiB; floor peak RssAnon %.0f MiB\n",
		mib(rebAnon), mib(rebRSS), mib(rebHWM), mib(rebMax), mib(rawAnon), mib(rawHWM), mib(floorAnon))
	fmt.Printf("bench: file after a fresh rebuild %.1f MiB (pages %.1f MiB); after compact %.1f MiB (%.2fx; compact took %s)\n",
		mib(file), mib(pages), mib(compacted), float64(file)/float64(compacted), c.took.Round(time.Millisecond))
}

// BenchmarkRebuildFileSize rebuilds the topic into one file 10 times in a
// row (one op) and compares the file with a fresh rebuild's and with the
// same file compacted.
func BenchmarkRebuildFileSize(b *testing.B) {
	f := getFixture(b)
	for i := 0; i < b.N; i++ {
		fresh := filepath.Join(b.TempDir(), "fresh.db")
		if _, err := f.rebuild(fresh); err != nil {
			b.Fatal(err)
		}
		freshFile, freshPages, err := fileSize(fresh)
		if err != nil {
			b.Fatal(err)
		}
		db := filepath.Join(b.TempDir(), "ten.db")
		var took []time.Duration
		for range 10 {
			p, err := f.rebuild(db)
			if err != nil {
				b.Fatal(err)
			}
			took = append(took, p.took)
		}
		file, pages, err := fileSize(db)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := runChild(exec.Command(f.kmz, "compact", "--db", db)); err != nil {
			b.Fatal(err)
		}
		compacted, _, err := fileSize(db)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(file)/float64(freshFile), "ten/fresh")
		b.ReportMetric(float64(file)/float64(compacted), "ten/compacted")
		fmt.Printf("bench: 10 rebuilds (median %s): file %.1f MiB (pages %.1f MiB) vs a fresh rebuild's %.1f MiB (pages %.1f MiB): %.2fx; compacted %.1f MiB\n",
			median(took).Round(time.Millisecond), mib(file), mib(pages), mib(freshFile), mib(freshPages), float64(file)/float64(freshFile), mib(compacted))
	}
}
