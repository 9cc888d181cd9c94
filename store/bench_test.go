package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkRebuild writes 200k rows with random 16-byte keys and 100-byte
// values in Write batches of 20k, then publishes: the shape of a rebuild.
// Report per op = one whole rebuild.
func BenchmarkRebuild(b *testing.B) {
	const rows, batch = 200_000, 20_000
	db, err := Open(b.TempDir()+"/bench.db", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	r := rand.New(rand.NewPCG(1, 2))
	key := make([]byte, 16)
	val := make([]byte, 100)
	b.ReportAllocs()
	for b.Loop() {
		g, err := db.Begin("t")
		if err != nil {
			b.Fatal(err)
		}
		for done := 0; done < rows; done += batch {
			err := g.Write(func(t Rows) error {
				for range batch {
					binary.BigEndian.PutUint64(key, r.Uint64())
					binary.BigEndian.PutUint64(key[8:], r.Uint64())
					if err := t.Put(key, val); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		if err := g.Publish(TableMeta{}, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(rows, "rows/op")
}

// sliceSorted is a Sorted over rows generated in key order: key i is
// "key-%08d" of i, its value valueLen bytes.
type sliceSorted struct {
	i, n int
	key  []byte
	val  []byte
}

func (s *sliceSorted) Next() ([]byte, []byte, bool, error) {
	if s.i == s.n {
		return nil, nil, false, nil
	}
	s.key = fmt.Appendf(s.key[:0], "key-%08d", s.i)
	s.val[0] = byte(s.i)
	s.i++
	return s.key, s.val, true, nil
}

// BenchmarkWriteMerged is the end of a rebuild of distinct keys: 1M rows of
// 12-byte keys and 100-byte values, in key order, merged into a fresh
// generation of a fresh file (WriteMerged with no runs) and published.
// This is the serial tail of a rebuild whose rows did not fit in memory:
// bbolt's Put and commits, after the replay has ended.
func BenchmarkWriteMerged(b *testing.B) {
	const rows = 1_000_000
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		path := filepath.Join(b.TempDir(), "bench.db")
		db, err := Open(path, nil)
		if err != nil {
			b.Fatal(err)
		}
		g, err := db.Begin("t")
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := g.WriteMerged(context.Background(), &sliceSorted{n: rows, val: make([]byte, 100)}); err != nil {
			b.Fatal(err)
		}
		if err := g.Publish(TableMeta{}, nil); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		db.Close()
		_ = os.Remove(path)
		b.StartTimer()
	}
	b.ReportMetric(rows, "rows/op")
}

// benchRuns is the rows of a rebuild of distinct keys cut into runs the
// way the latest fold spills them: record i (of runs*perRun) has bench's
// key "key-%08d" of (i*7919)%total (bench/bench_test.go keyOf) and a
// 100-byte value; run r holds records [r*perRun, (r+1)*perRun), sorted by
// key, so every run spans the whole key space. Values are bench's valueOf
// (an alphabet cycle after the record number: compresses very well) or,
// random, incompressible bytes (the worst case for a compressed run file).
type benchRuns struct {
	data [][]byte // per run: rows back to back
	ends [][][2]int
}

func newBenchRuns(runs, perRun int, random bool) *benchRuns {
	total := runs * perRun
	rng := rand.New(rand.NewPCG(3, 4))
	br := &benchRuns{}
	for r := range runs {
		idx := make([]int, perRun)
		for j := range idx {
			idx[j] = r*perRun + j
		}
		key := func(i int) int { return (i * 7919) % total }
		slices.SortFunc(idx, func(a, b int) int { return key(a) - key(b) })
		var data []byte
		ends := make([][2]int, 0, perRun)
		for _, i := range idx {
			data = fmt.Appendf(data, "key-%08d", key(i))
			ke := len(data)
			if random {
				for range 100 / 8 {
					data = binary.LittleEndian.AppendUint64(data, rng.Uint64())
				}
				data = append(data, 1, 2, 3, 4)
			} else {
				v := make([]byte, 100)
				for j := range v {
					v[j] = 'a' + byte((i+j)%26)
				}
				copy(v, strconv.Itoa(i))
				data = append(data, v...)
			}
			ends = append(ends, [2]int{ke, len(data)})
		}
		br.data = append(br.data, data)
		br.ends = append(br.ends, ends)
	}
	return br
}

// run returns run r as a Sorted.
func (br *benchRuns) run(r int) Sorted { return &blockSorted{data: br.data[r], ends: br.ends[r]} }

type blockSorted struct {
	data  []byte
	ends  [][2]int
	i     int
	start int
}

func (s *blockSorted) Next() ([]byte, []byte, bool, error) {
	if s.i == len(s.ends) {
		return nil, nil, false, nil
	}
	e := s.ends[s.i]
	k, v := s.data[s.start:e[0]], s.data[e[0]:e[1]]
	s.i++
	s.start = e[1]
	return k, v, true, nil
}

// BenchmarkSpillMerge is the end of a rebuild of distinct keys that did
// not fit in memory: 14 runs (the 5M-key bench spills 14) of 40k rows,
// each spilled as a run file (SpillRun), then merged into a fresh
// generation (WriteMerged) and published. One op is the whole spill and
// merge; spill-ms and merge-ms split it (wall time; -cpu-ms the
// process's CPU time, GC included), run-MB is the run files' size.
// Sub-benchmarks: each run codec (EnvRunCompression), with the bench's
// compressible values and with random ones.
func BenchmarkSpillMerge(b *testing.B) {
	const runs, perRun = 14, 40_000
	for _, bc := range []struct {
		codec  string
		random bool
	}{{"none", false}, {"s2", false}, {"zstd", false}, {"none", true}, {"s2", true}, {"zstd", true}} {
		name := "codec=" + bc.codec + "/values=bench"
		if bc.random {
			name = "codec=" + bc.codec + "/values=random"
		}
		random := bc.random
		b.Run(name, func(b *testing.B) {
			b.Setenv(EnvRunCompression, bc.codec)
			br := newBenchRuns(runs, perRun, random)
			var spill, merge, spillCPU, mergeCPU time.Duration
			var runBytes int64
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				path := filepath.Join(b.TempDir(), "bench.db")
				db, err := Open(path, nil)
				if err != nil {
					b.Fatal(err)
				}
				g, err := db.Begin("t")
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				t0, c0 := time.Now(), cpuTime(b)
				for r := range runs {
					if err := g.SpillRun(br.run(r)); err != nil {
						b.Fatal(err)
					}
				}
				t1, c1 := time.Now(), cpuTime(b)
				b.StopTimer()
				for _, p := range g.runs {
					fi, err := os.Stat(p)
					if err != nil {
						b.Fatal(err)
					}
					runBytes += fi.Size()
				}
				b.StartTimer()
				t2, c2 := time.Now(), cpuTime(b)
				if err := g.WriteMerged(context.Background(), nil); err != nil {
					b.Fatal(err)
				}
				if err := g.Publish(TableMeta{}, nil); err != nil {
					b.Fatal(err)
				}
				spill += t1.Sub(t0)
				merge += time.Since(t2)
				spillCPU += c1 - c0
				mergeCPU += cpuTime(b) - c2
				b.StopTimer()
				if g.keys != runs*perRun {
					b.Fatalf("%d keys, want %d", g.keys, runs*perRun)
				}
				db.Close()
				_ = os.Remove(path)
				b.StartTimer()
			}
			b.ReportMetric(float64(spill.Milliseconds())/float64(b.N), "spill-ms/op")
			b.ReportMetric(float64(merge.Milliseconds())/float64(b.N), "merge-ms/op")
			b.ReportMetric(float64(spillCPU.Milliseconds())/float64(b.N), "spill-cpu-ms/op")
			b.ReportMetric(float64(mergeCPU.Milliseconds())/float64(b.N), "merge-cpu-ms/op")
			b.ReportMetric(float64(runBytes)/1e6/float64(b.N), "run-MB/op")
			b.ReportMetric(runs*perRun, "rows/op")
		})
	}
}

// cpuTime is the process's user and system CPU time so far, all threads:
// on a shared machine it moves less with the load than the wall time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRunFiles is the run files' share of BenchmarkSpillMerge, without
// bbolt: the 14 runs spilled, then read back through the merge (openRuns,
// newMerge) to the end, as WriteMerged's reading goroutine does
// (spill-ms and read-ms split it). Its allocations and time are all the
// store's own.
func BenchmarkRunFiles(b *testing.B) {
	const runs, perRun = 14, 40_000
	for _, codec := range []string{"none", "s2", "zstd"} {
		b.Run("codec="+codec, func(b *testing.B) {
			b.Setenv(EnvRunCompression, codec)
			br := newBenchRuns(runs, perRun, false)
			db, err := Open(filepath.Join(b.TempDir(), "bench.db"), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			var spill, read time.Duration
			b.ReportAllocs()
			for b.Loop() {
				g, err := db.Begin("t")
				if err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				for r := range runs {
					if err := g.SpillRun(br.run(r)); err != nil {
						b.Fatal(err)
					}
				}
				t1 := time.Now()
				srcs, closeRuns, err := g.openRuns()
				if err != nil {
					b.Fatal(err)
				}
				m, err := newMerge(srcs, nil)
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for {
					_, _, ok, err := m.Next()
					if err != nil {
						b.Fatal(err)
					}
					if !ok {
						break
					}
					n++
				}
				spill += t1.Sub(t0)
				read += time.Since(t1)
				closeRuns()
				g.removeRuns()
				if err := g.Abort(); err != nil {
					b.Fatal(err)
				}
				if n != runs*perRun {
					b.Fatalf("%d rows, want %d", n, runs*perRun)
				}
			}
			b.ReportMetric(float64(spill.Milliseconds())/float64(b.N), "spill-ms/op")
			b.ReportMetric(float64(read.Milliseconds())/float64(b.N), "read-ms/op")
			b.ReportMetric(runs*perRun, "rows/op")
		})
	}
}
