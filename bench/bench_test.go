package bench

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

const (
	topic      = "bench"
	partitions = 6
	valueSize  = 100
)

// fixture is the broker and the filled topic, shared by every benchmark
// iteration (filling is not what is measured).
type fixture struct {
	broker  *localkafka.Broker
	records int
	keys    int
	fill    time.Duration
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

func valueOf(i int) []byte {
	v := make([]byte, valueSize)
	s := strconv.Itoa(i)
	for j := range v {
		v[j] = 'a' + byte((i+j)%26)
	}
	copy(v, s)
	return v
}

func newFixture(records, keys int) (*fixture, error) {
	br, err := localkafka.Start()
	if err != nil {
		return nil, err
	}
	if err := br.CreateTopic(topic, partitions, nil); err != nil {
		br.Close()
		return nil, err
	}
	started := time.Now()
	cl, err := br.Client(
		kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(50*time.Millisecond),
		kgo.ProducerBatchMaxBytes(1<<20),
		kgo.MaxBufferedRecords(200_000),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	)
	if err != nil {
		br.Close()
		return nil, err
	}
	defer cl.Close()
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	ctx := context.Background()
	for i := 0; i < records; i++ {
		k := keyOf(i, keys)
		wg.Add(1)
		cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: partitionOf(k), Key: k, Value: valueOf(i)},
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
		br.Close()
		return nil, fmt.Errorf("fill %s: %w", topic, firstErr)
	}
	f := &fixture{broker: br, records: records, keys: min(records, keys), fill: time.Since(started)}
	fmt.Printf("bench: filled %s: %d records, %d keys, %d partitions, %dB values in %s (%.0f records/s), kfake in-process on %d CPUs\n",
		topic, records, f.keys, partitions, valueSize, f.fill.Round(time.Millisecond),
		float64(records)/f.fill.Seconds(), runtime.NumCPU())
	return f, nil
}

func (f *fixture) replayConfig() replay.Config {
	return replay.Config{
		Brokers:      f.broker.Addr,
		Topic:        topic,
		StallTimeout: 30 * time.Second,
		Log:          zerolog.Nop(),
	}
}

// rawConsume reads every partition to its high mark with the replay's own
// consumer and settings, and drops the records.
func (f *fixture) rawConsume(ctx context.Context) (time.Duration, int64, error) {
	started := time.Now()
	res, err := replay.Run(ctx, f.replayConfig(), func([]fold.Record) error { return nil })
	return time.Since(started), res.Records, err
}

// heapPeak is what the sampler saw while a rebuild ran, above the live heap
// measured (after a forced GC) just before it started: the broker's copy of
// the topic lives in the same heap and is not the rebuild's.
type heapPeak struct {
	live uint64 // peak of the heap marked live by a GC cycle
	heap uint64 // peak of heap objects, live or not yet swept
}

// rebuild runs a full rebuild into a fresh file under dir, and samples the
// Go heap while it runs.
func (f *fixture) rebuild(ctx context.Context, dir string) (time.Duration, materialize.Report, heapPeak, error) {
	db, err := store.Open(filepath.Join(dir, "bench.db"), nil)
	if err != nil {
		return 0, materialize.Report{}, heapPeak{}, err
	}
	defer db.Close()
	stop := make(chan struct{})
	peak := make(chan heapPeak)
	runtime.GC()
	base := readHeap()
	go func() {
		var max heapPeak
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			h := readHeap()
			if h.live > base.live {
				max.live = maxu(max.live, h.live-base.live)
			}
			if h.heap > base.live {
				max.heap = maxu(max.heap, h.heap-base.live)
			}
			select {
			case <-t.C:
			case <-stop:
				peak <- max
				return
			}
		}
	}()
	started := time.Now()
	rep, err := materialize.Rebuild(ctx, materialize.Options{DB: db, Table: "bench", Replay: f.replayConfig(), Log: zerolog.Nop()})
	took := time.Since(started)
	close(stop)
	return took, rep, <-peak, err
}

func maxu(a, b uint64) uint64 { return max(a, b) }

// readHeap reads the heap without stopping the world (unlike
// runtime.ReadMemStats).
func readHeap() heapPeak {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return heapPeak{live: s[0].Value.Uint64(), heap: s[1].Value.Uint64()}
}

// kcatArgs is the kcat command line the benchmark times: the issue's,
// reading with read_committed like the replay and printing key and value.
func kcatArgs(addr string) []string {
	return []string{"-C", "-b", addr, "-t", topic, "-o", "beginning", "-e", "-q",
		"-X", "isolation.level=read_committed", "-f", "%k %s\n"}
}

// kcat times kcat over the same topic, its output to /dev/null, if kcat is
// on PATH. kcat -e exits once every partition reported its end, so it has
// read every record; it reaches the end by an empty fetch, which the broker
// holds for fetch.wait.max.ms (librdkafka's default, 500ms) before
// answering: that wait is part of its time, as it is of any kcat run.
func (f *fixture) kcat(ctx context.Context) (time.Duration, error) {
	path, err := exec.LookPath("kcat")
	if err != nil {
		return 0, err
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	defer devnull.Close()
	cmd := exec.CommandContext(ctx, path, kcatArgs(f.broker.Addr)...)
	cmd.Stdout = devnull
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	started := time.Now()
	err = cmd.Run()
	took := time.Since(started)
	if err != nil {
		return took, fmt.Errorf("kcat: %w: %s", err, stderr.String())
	}
	return took, nil
}

// cpuTime is the process's user+system CPU time so far: the broker's, the
// clients' (librdkafka threads included) and the writer's.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkRebuild runs rounds of: a raw consume of the whole topic, a full
// rebuild of it, and kcat when it is installed. One op is one round; the
// reported rates and ratio are medians over the rounds (use -benchtime 5x
// for five; the ratio is the median of the rounds' ratios), because the broker, the clients and the writer share the
// machine's cores and single runs vary.
func BenchmarkRebuild(b *testing.B) {
	f := getFixture(b)
	ctx := context.Background()
	var raws, rebuilds, kcats []time.Duration
	var ratios []float64
	var peak heapPeak
	_, kcatErr := exec.LookPath("kcat")
	if kcatErr != nil {
		fmt.Println("bench: kcat not found")
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cpu0 := cpuTime()
		rawTook, n, err := f.rawConsume(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if n != int64(f.records) {
			b.Fatalf("raw consume read %d records, want %d", n, f.records)
		}
		cpu1 := cpuTime()
		rebTook, rep, heap, err := f.rebuild(ctx, b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		if rep.Meta.Records != int64(f.records) || rep.Meta.Keys != int64(f.keys) {
			b.Fatalf("rebuild folded %d records into %d keys, want %d into %d", rep.Meta.Records, rep.Meta.Keys, f.records, f.keys)
		}
		cpu2 := cpuTime()
		raws, rebuilds = append(raws, rawTook), append(rebuilds, rebTook)
		ratios = append(ratios, rebTook.Seconds()/rawTook.Seconds())
		peak.live = max(peak.live, heap.live)
		peak.heap = max(peak.heap, heap.heap)
		kcatLine := ""
		if kcatErr == nil {
			took, err := f.kcat(ctx)
			if err != nil {
				b.Fatal(err)
			}
			kcats = append(kcats, took)
			kcatLine = fmt.Sprintf(", kcat %s", took.Round(time.Millisecond))
		}
		fmt.Printf("bench: round %d: raw consume %s (cpu %s), rebuild %s (cpu %s), %.2fx%s\n", i+1,
			rawTook.Round(time.Millisecond), (cpu1 - cpu0).Round(time.Millisecond),
			rebTook.Round(time.Millisecond), (cpu2 - cpu1).Round(time.Millisecond),
			rebTook.Seconds()/rawTook.Seconds(), kcatLine)
	}
	b.StopTimer()
	recs := float64(f.records)
	raw, reb := median(raws), median(rebuilds)
	// The ratio is the median of each round's ratio: a round's raw
	// consume and rebuild run back to back, under the same conditions.
	slices.Sort(ratios)
	ratio := ratios[len(ratios)/2]
	if len(ratios)%2 == 0 {
		ratio = (ratios[len(ratios)/2-1] + ratios[len(ratios)/2]) / 2
	}
	b.ReportMetric(recs/raw.Seconds(), "raw-rec/s")
	b.ReportMetric(recs/reb.Seconds(), "rebuild-rec/s")
	b.ReportMetric(ratio, "rebuild/raw")
	b.ReportMetric(float64(peak.live)/(1<<20), "rebuild-peak-live-MiB")
	b.ReportMetric(float64(peak.heap)/(1<<20), "rebuild-peak-heap-MiB")
	kcatLine := "kcat not found"
	if len(kcats) > 0 {
		k := median(kcats)
		b.ReportMetric(recs/k.Seconds(), "kcat-rec/s")
		kcatLine = fmt.Sprintf("kcat %.0f records/s (%s)", recs/k.Seconds(), k.Round(time.Millisecond))
	}
	fmt.Printf("bench: %d records, median of %d rounds: raw consume %.0f records/s (%s), rebuild %.0f records/s (%s), rebuild/raw %.2fx; %s; rebuild peak Go heap +%.0f MiB live (+%.0f MiB with garbage)\n",
		f.records, b.N, recs/raw.Seconds(), raw.Round(time.Millisecond), recs/reb.Seconds(), reb.Round(time.Millisecond),
		ratio, kcatLine, float64(peak.live)/(1<<20), float64(peak.heap)/(1<<20))
}
