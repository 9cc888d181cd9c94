package bench

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// shardSets are the two shards the benchmark rebuilds: half the fixture's
// partitions each.
var shardSets = []string{"0-2", "3-5"}

// shardCounts returns, for the partitions in set, how many records and
// distinct keys of the fixture they hold (keyOf and partitionOf are the
// fill's).
func (f *fixture) shardCounts(lo, hi int32) (records, keys int) {
	for i := 0; i < f.records; i++ {
		if p := partitionOf(keyOf(i, f.keys)); p >= lo && p <= hi {
			records++
		}
	}
	for j := 0; j < f.keys; j++ {
		if p := partitionOf(keyOf(j, f.keys)); p >= lo && p <= hi {
			keys++
		}
	}
	return records, keys
}

// egress returns the bytes the broker has sent so far: the kfake process's
// written bytes (/proc/PID/io wchar: its sockets, the fetch answers), or,
// for an Apache Kafka broker this benchmark did not start, the loopback
// interface's transmitted bytes (everything on lo, requests too).
func (f *fixture) egress() (int64, string, error) {
	if f.broker != nil {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", f.broker.Process.Pid))
		if err != nil {
			return 0, "", err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "wchar: "); ok {
				n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n, "the broker process's written bytes", err
			}
		}
		return 0, "", fmt.Errorf("no wchar in /proc/%d/io", f.broker.Process.Pid)
	}
	fh, err := os.Open("/proc/net/dev")
	if err != nil {
		return 0, "", err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		name, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || name != "lo" {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) < 9 {
			break
		}
		n, err := strconv.ParseInt(fields[8], 10, 64)
		return n, "loopback's transmitted bytes", err
	}
	return 0, "", fmt.Errorf("no lo in /proc/net/dev")
}

// BenchmarkShard rebuilds the whole fixture topic and each of two shards
// (partitions 0-2 and 3-5) in turn, each `kmaterialize rebuild` a process
// of its own, and measures what docs/shards.md plans with: the records a
// second one daemon materializes for one shard, and the broker's egress
// for one replica of a shard (what each further replica costs the
// broker). The shards run one after the other: on two cores shared with
// the broker, running them at once would measure the cores, not the
// shards; the speed-up of N hosts is computed from the per-shard rate.
func BenchmarkShard(b *testing.B) {
	f := getFixture(b)
	var whole, shard []time.Duration
	var shardRate, wholeRate []float64
	var egressPerRecord []float64
	var egressName string
	for i := 0; i < b.N; i++ {
		db := filepath.Join(b.TempDir(), "whole.db")
		w, err := f.rebuild(db)
		if err != nil {
			b.Fatal(err)
		}
		os.Remove(db)
		whole = append(whole, w.took)
		wholeRate = append(wholeRate, float64(f.records)/w.took.Seconds())
		line := fmt.Sprintf("bench: shard round %d: whole %s (%.0f records/s)", i+1, w.took.Round(time.Millisecond), float64(f.records)/w.took.Seconds())
		for s, set := range shardSets {
			lo, hi := int32(3*s), int32(3*s+2)
			records, keys := f.shardCounts(lo, hi)
			db := filepath.Join(b.TempDir(), fmt.Sprintf("shard%d.db", s))
			before, name, err := f.egress()
			if err != nil {
				b.Fatal(err)
			}
			egressName = name
			args := []string{"--log-format", "json", "rebuild", "--brokers", f.addr, "--topic", f.topic, "--db", db,
				"--readers", strconv.Itoa(benchReaders()), "--partitions", set}
			p, err := runChild(exec.Command(f.kmz, args...))
			if err != nil {
				b.Fatal(err)
			}
			after, _, err := f.egress()
			if err != nil {
				b.Fatal(err)
			}
			if want := fmt.Sprintf("%d keys, %d records read", keys, records); !strings.Contains(p.stdout, want) {
				b.Fatalf("shard %s: rebuild printed %q, want %q", set, p.stdout, want)
			}
			os.Remove(db)
			rate := float64(records) / p.took.Seconds()
			shard, shardRate = append(shard, p.took), append(shardRate, rate)
			perRecord := float64(after-before) / float64(records)
			egressPerRecord = append(egressPerRecord, perRecord)
			line += fmt.Sprintf(", shard %s %d records %s (%.0f records/s, anon %.0f MiB, egress %.1f MiB = %.0f B/record)",
				set, records, p.took.Round(time.Millisecond), rate, mib(p.peakAnon), mib(after-before), perRecord)
		}
		fmt.Println(line)
	}
	b.StopTimer()
	sr, wr, epr := medianF(shardRate), medianF(wholeRate), medianF(egressPerRecord)
	b.ReportMetric(sr, "shard-rec/s")
	b.ReportMetric(wr, "whole-rec/s")
	b.ReportMetric(epr, "egress-B/record")
	payload := float64(len(keyOf(0, f.keys)) + valueSize)
	fmt.Printf("bench: shards of %d partitions of %d: median %.0f records/s per shard, whole table %.0f records/s (one shard / whole %.2fx); "+
		"egress per replica %.0f B/record (%s; %.0f B of key and value: %.2fx)\n",
		3, partitions, sr, wr, sr/wr, epr, egressName, payload, epr/payload)
	// A rebuild's time is a fixed part (the process, the metadata, the
	// publish) and one per record: t = fixed + n/rate. The whole table
	// (all records) and a shard (about half) give both.
	wt, st := median(whole).Seconds(), median(shard).Seconds()
	half := float64(f.records) / float64(len(shardSets))
	rate := (float64(f.records) - half) / (wt - st)
	fixed := st - half/rate
	fmt.Printf("bench: a rebuild is %.2f s fixed plus %.0f records/s (from the medians: whole %.3f s for %d records, a shard %.3f s for about %.0f)\n",
		fixed, rate, wt, f.records, st, half)
	b.ReportMetric(rate, "marginal-rec/s")
	b.ReportMetric(fixed, "fixed-s")
	fmt.Printf("bench: computed for this topic: N shards on N hosts materialize it N x %.2f = %.2fx (2 shards), %.2fx (4), %.2fx (8) faster than one daemon; "+
		"for 1e9 records: one daemon %.0f s, 8 shards %.0f s each (%.1fx)\n",
		sr/wr, 2*sr/wr, 4*sr/wr, 8*sr/wr, fixed+1e9/rate, fixed+1e9/8/rate, (fixed+1e9/rate)/(fixed+1e9/8/rate))
}
