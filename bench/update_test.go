package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// updateTopic is BenchmarkUpdate's topic (and table), apart from the other
// benchmarks'.
func (f *fixture) updateTopic() string { return f.topic + "-update" }

// Sizes of BenchmarkUpdate: a table of updateBase records, then updateNew
// more records on the topic (the same stream continued: record i has key
// keyOf(i, keys), so the new records update keys the table has).
// KMATERIALIZE_BENCH_UPDATE_RECORDS changes updateNew, to see how the
// update's cost grows with the new records alone.
const updateBase = 1_000_000

var updateNew = envInt("KMATERIALIZE_BENCH_UPDATE_RECORDS", 100_000)

// envUpdateNewKeys set to 1 gives BenchmarkUpdate's new records keys the
// table does not have ("new-%08d", sorting after every "key-" of the
// table), instead of the stream's keys: the update then appends rows at the
// end of the tree instead of touching every page.
const envUpdateNewKeys = "KMATERIALIZE_BENCH_UPDATE_NEW_KEYS"

// fillRange produces records [from, to) of the benchmark's stream to topic;
// with newKeys, each with a key of its own that the stream's first records
// do not have.
func (f *fixture) fillRange(topic string, from, to int, newKeys ...bool) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(f.addr),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(topic),
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
	for i := from; i < to; i++ {
		k := keyOf(i, f.keys)
		if len(newKeys) > 0 && newKeys[0] {
			k = fmt.Appendf(nil, "new-%08d", i)
		}
		wg.Add(1)
		cl.Produce(context.Background(), &kgo.Record{Topic: topic, Partition: partitionOf(k), Key: k, Value: valueOf(i)},
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
		return fmt.Errorf("fill %s: %w", topic, firstErr)
	}
	return nil
}

// kmzChild runs the built kmaterialize with args as a child and checks that
// its stdout contains want.
func (f *fixture) kmzChild(want string, args ...string) (proc, error) {
	p, err := runChild(exec.Command(f.kmz, append([]string{"--log-format", "json"}, args...)...))
	if err != nil {
		return p, fmt.Errorf("kmaterialize %s: %w\n%s", strings.Join(args, " "), err, p.stderr)
	}
	if !strings.Contains(p.stdout, want) {
		return p, fmt.Errorf("kmaterialize %s printed %q, want %q", strings.Join(args, " "), p.stdout, want)
	}
	return p, nil
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

var (
	updateOnce   sync.Once
	updateBaseDB string
	updateErr    error
)

// updateSetup creates f.updateTopic(), fills it with updateBase records,
// rebuilds them into a table file, then adds updateNew records, and returns
// the table file (in the fixture's directory).
func (f *fixture) updateSetup() (string, error) {
	if err := f.createTopic(f.updateTopic(), partitions); err != nil {
		return "", err
	}
	if err := f.fillRange(f.updateTopic(), 0, updateBase); err != nil {
		return "", err
	}
	base := filepath.Join(f.dir, "update-base.db")
	if _, err := f.kmzChild(fmt.Sprintf("%d records read", updateBase),
		"rebuild", "--brokers", f.addr, "--topic", f.updateTopic(), "--db", base); err != nil {
		return "", err
	}
	return base, f.fillRange(f.updateTopic(), updateBase, updateBase+updateNew, os.Getenv(envUpdateNewKeys) == "1")
}

// BenchmarkUpdate times `kmaterialize update` of updateNew new records onto
// a table of updateBase records, against a full rebuild of the same
// updateBase+updateNew records, each in its own process: the update with
// the default --memory (applied in place: one write transaction on the
// published table) and with --memory 64MiB (too big for that: merged with
// the table's rows into a new generation). Each round starts the updates
// from a copy of the same table file. One op is one round; the times are
// medians over the rounds.
//
//	go test -run '^$' -bench Update -benchtime 3x ./bench/
func BenchmarkUpdate(b *testing.B) {
	f := getFixture(b)
	// Go runs the benchmark once with b.N 1 first: the topic and the table
	// are made once, in the fixture's directory.
	updateOnce.Do(func() { updateBaseDB, updateErr = f.updateSetup() })
	if updateErr != nil {
		b.Fatal(updateErr)
	}
	dir, base := b.TempDir(), updateBaseDB
	keys := f.keys // after the update
	if os.Getenv(envUpdateNewKeys) == "1" {
		keys += updateNew
	}
	var inPlace, merged, rebuilds, inCPU, mergedCPU, rebCPU []time.Duration
	var inAnon, mergedAnon, rebAnon int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		db := filepath.Join(dir, fmt.Sprintf("update-%d.db", i))
		if err := copyFile(db, base); err != nil {
			b.Fatal(err)
		}
		up, err := f.kmzChild(fmt.Sprintf("(in-place): generation 1, %d keys, %d new records read", keys, updateNew),
			"update", "--brokers", f.addr, "--db", db, "--table", f.updateTopic())
		if err != nil {
			b.Fatal(err)
		}
		if err := copyFile(db, base); err != nil {
			b.Fatal(err)
		}
		mg, err := f.kmzChild(fmt.Sprintf("(merged): generation 2, %d keys, %d new records read", keys, updateNew),
			"update", "--brokers", f.addr, "--db", db, "--table", f.updateTopic(), "--memory", "64MiB")
		if err != nil {
			b.Fatal(err)
		}
		fresh := filepath.Join(dir, fmt.Sprintf("rebuild-%d.db", i))
		reb, err := f.kmzChild(fmt.Sprintf("%d keys, %d records read", keys, updateBase+updateNew),
			"rebuild", "--brokers", f.addr, "--topic", f.updateTopic(), "--db", fresh)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range []string{db, fresh} {
			if err := os.Remove(p); err != nil {
				b.Fatal(err)
			}
		}
		inPlace, merged, rebuilds = append(inPlace, up.took), append(merged, mg.took), append(rebuilds, reb.took)
		inCPU, mergedCPU, rebCPU = append(inCPU, up.cpu), append(mergedCPU, mg.cpu), append(rebCPU, reb.cpu)
		inAnon, mergedAnon, rebAnon = max(inAnon, up.peakAnon), max(mergedAnon, mg.peakAnon), max(rebAnon, reb.peakAnon)
		fmt.Printf("bench: round %d: update in place %s (cpu %s, anon %.0f MiB), update merged %s (cpu %s, anon %.0f MiB), full rebuild %s (cpu %s, anon %.0f MiB)\n", i+1,
			up.took.Round(time.Millisecond), up.cpu.Round(time.Millisecond), mib(up.peakAnon),
			mg.took.Round(time.Millisecond), mg.cpu.Round(time.Millisecond), mib(mg.peakAnon),
			reb.took.Round(time.Millisecond), reb.cpu.Round(time.Millisecond), mib(reb.peakAnon))
	}
	b.StopTimer()
	ip, mg, rb := median(inPlace), median(merged), median(rebuilds)
	b.ReportMetric(ip.Seconds(), "update-in-place-s")
	b.ReportMetric(mg.Seconds(), "update-merged-s")
	b.ReportMetric(rb.Seconds(), "rebuild-s")
	b.ReportMetric(rb.Seconds()/ip.Seconds(), "rebuild/update")
	fmt.Printf("bench: %d new records (new keys: %v) onto %d (%d keys), median of %d rounds: update in place %s (cpu %s, peak anon %.0f MiB), update merged (--memory 64MiB) %s (cpu %s, %.0f MiB), full rebuild %s (cpu %s, %.0f MiB): the in-place update takes %.2f of the rebuild's time, %.2f of its CPU\n",
		updateNew, os.Getenv(envUpdateNewKeys) == "1", updateBase, f.keys, b.N, ip.Round(time.Millisecond), median(inCPU).Round(time.Millisecond), mib(inAnon),
		mg.Round(time.Millisecond), median(mergedCPU).Round(time.Millisecond), mib(mergedAnon),
		rb.Round(time.Millisecond), median(rebCPU).Round(time.Millisecond), mib(rebAnon), ip.Seconds()/rb.Seconds(),
		median(inCPU).Seconds()/median(rebCPU).Seconds())
}
