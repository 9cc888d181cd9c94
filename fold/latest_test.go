package fold

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLatestBasics(t *testing.T) {
	rec := func(p int32, off int64, key, value *string) Record {
		r := Record{Partition: p, Offset: off}
		if key != nil {
			r.Key = []byte(*key)
		}
		if value != nil {
			r.Value = []byte(*value)
		}
		return r
	}
	s := func(v string) *string { return &v }
	tests := []struct {
		name    string
		batches [][]Record
		want    map[string]string
		stats   Stats
	}{
		{"empty", [][]Record{{}, nil}, map[string]string{}, Stats{}},
		{"last wins", [][]Record{{rec(0, 0, s("a"), s("1")), rec(0, 1, s("a"), s("2"))}},
			map[string]string{"a": "2"}, Stats{Records: 2}},
		{"null key skipped", [][]Record{{rec(0, 0, nil, s("x")), rec(0, 1, s("a"), s("1"))}},
			map[string]string{"a": "1"}, Stats{Records: 2, Skipped: 1, SkippedByReason: map[string]int64{ReasonNullKey: 1}}},
		{"tombstone deletes across batches", [][]Record{{rec(0, 0, s("a"), s("1")), rec(0, 1, s("b"), s("1"))}, {rec(0, 2, s("a"), nil)}},
			map[string]string{"b": "1"}, Stats{Records: 3}},
		{"tombstone then value in one batch", [][]Record{{rec(0, 0, s("a"), nil), rec(0, 1, s("a"), s("3"))}},
			map[string]string{"a": "3"}, Stats{Records: 2}},
		{"value then tombstone in one batch", [][]Record{{rec(0, 0, s("a"), s("3")), rec(0, 1, s("a"), nil)}},
			map[string]string{}, Stats{Records: 2}},
		{"tombstone of absent key", [][]Record{{rec(0, 0, s("zz"), nil)}}, map[string]string{}, Stats{Records: 1}},
		{"empty value is a value", [][]Record{{rec(0, 0, s("a"), s(""))}}, map[string]string{"a": ""}, Stats{Records: 1}},
		{"null key with null value", [][]Record{{rec(0, 0, nil, nil)}}, map[string]string{}, Stats{Records: 1, Skipped: 1, SkippedByReason: map[string]int64{ReasonNullKey: 1}}},
		{"empty key skipped", [][]Record{{rec(0, 0, s(""), s("x")), rec(0, 1, s("a"), s("1"))}},
			map[string]string{"a": "1"}, Stats{Records: 2, Skipped: 1, SkippedByReason: map[string]int64{ReasonEmptyKey: 1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tab := newMemTable()
			l := NewLatest()
			for _, b := range tc.batches {
				if err := l.Fold(tab, b); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Finish(tab); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, tab.rows()); d != "" {
				t.Errorf("rows (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.stats, l.Stats()); d != "" {
				t.Errorf("stats (-want +got):\n%s", d)
			}
			if l.Name() != "latest" || len(l.Params()) != 0 {
				t.Errorf("Name, Params = %q, %v", l.Name(), l.Params())
			}
		})
	}
}

// genPartitions generates records over parts partitions. A key always lands
// in the same partition (as with Kafka's default partitioner), so the final
// table does not depend on how partitions interleave.
func genPartitions(rng *rand.Rand, parts, n, keys int, nullKeyRate, tombRate float64) [][]Record {
	out := make([][]Record, parts)
	offs := make([]int64, parts)
	for range n {
		k := rng.IntN(keys)
		p := k % parts
		null := rng.Float64() < nullKeyRate
		if null {
			p = rng.IntN(parts)
		}
		offs[p] += 1 + int64(rng.IntN(3)) // gaps, as after compaction or markers
		r := Record{Partition: int32(p), Offset: offs[p], Timestamp: time.Unix(0, 0)}
		if !null {
			r.Key = []byte("key-" + strconv.Itoa(k))
			if k%7 == 0 {
				r.Key = []byte{byte(k % 256), 0, 'x'} // binary keys
			}
		}
		if rng.Float64() >= tombRate {
			r.Value = []byte(fmt.Sprintf("v%d-%d", k, rng.IntN(1000)))
			if rng.IntN(20) == 0 {
				r.Value = []byte{}
			}
		}
		out[p] = append(out[p], r)
	}
	return out
}

// interleave cuts each partition into batches of 1..maxBatch records and
// returns them in a random interleaving that keeps each partition's order.
func interleave(rng *rand.Rand, parts [][]Record, maxBatch int) [][]Record {
	var queues [][][]Record
	for _, recs := range parts {
		var q [][]Record
		for len(recs) > 0 {
			n := min(1+rng.IntN(maxBatch), len(recs))
			q = append(q, recs[:n])
			recs = recs[n:]
		}
		queues = append(queues, q)
	}
	var out [][]Record
	for {
		var live []int
		for i, q := range queues {
			if len(q) > 0 {
				live = append(live, i)
			}
		}
		if len(live) == 0 {
			return out
		}
		i := live[rng.IntN(len(live))]
		out = append(out, queues[i][0])
		queues[i] = queues[i][1:]
	}
}

// scratchCopy deep-copies batch into fresh buffers; wipe overwrites them, so
// that a fold keeping a reference to batch bytes after Fold is caught.
func scratchCopy(batch []Record) (cp []Record, wipe func()) {
	cp = make([]Record, len(batch))
	var bufs [][]byte
	for i, r := range batch {
		cp[i] = r
		if r.Key != nil {
			cp[i].Key = bytes.Clone(r.Key)
			if cp[i].Key == nil {
				cp[i].Key = []byte{}
			}
			bufs = append(bufs, cp[i].Key)
		}
		if r.Value != nil {
			cp[i].Value = bytes.Clone(r.Value)
			if cp[i].Value == nil {
				cp[i].Value = []byte{}
			}
			bufs = append(bufs, cp[i].Value)
		}
	}
	return cp, func() {
		for _, b := range bufs {
			for j := range b {
				b[j] = 0xA5
			}
		}
	}
}

func TestLatestRandom(t *testing.T) {
	tests := []struct {
		name                  string
		parts, n, keys, batch int
		nullKeyRate, tombRate float64
	}{
		{"one partition, few keys", 1, 500, 10, 7, 0.05, 0.1},
		{"many partitions, many keys", 6, 5000, 800, 64, 0.02, 0.05},
		{"mostly tombstones", 3, 2000, 50, 20, 0.01, 0.6},
		{"batch of one", 4, 400, 30, 1, 0.1, 0.2},
		{"big batches", 2, 10000, 3000, 4096, 0.0, 0.1},
		{"all null keys", 2, 100, 10, 9, 1.0, 0.3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
			parts := genPartitions(rng, tc.parts, tc.n, tc.keys, tc.nullKeyRate, tc.tombRate)

			// Oracle: a plain loop per partition.
			want := map[string]string{}
			var wantStats Stats
			for _, recs := range parts {
				for _, r := range recs {
					wantStats.Records++
					switch {
					case r.Key == nil:
						wantStats.Skipped++
						if wantStats.SkippedByReason == nil {
							wantStats.SkippedByReason = map[string]int64{}
						}
						wantStats.SkippedByReason[ReasonNullKey]++
					case r.Value == nil:
						delete(want, string(r.Key))
					default:
						want[string(r.Key)] = string(r.Value)
					}
				}
			}

			// budget 0: per-call mode (bytes wiped after each call, as
			// the contract allows); otherwise retained mode with a budget
			// that flushes after every batch, now and then, or never.
			for _, budget := range []int{0, 1, 4096, 1 << 30} {
				tab := newMemTable()
				tab.log = true
				l := NewLatest()
				if budget > 0 {
					l.RetainRecords(budget)
				}
				for _, b := range interleave(rng, parts, tc.batch) {
					cp, wipe := scratchCopy(b)
					if budget > 0 {
						cp, wipe = b, func() {}
					}
					tab.writes = tab.writes[:0]
					if err := l.Fold(tab, cp); err != nil {
						t.Fatal(err)
					}
					wipe()
					// Each write pass writes each key once, in ascending order.
					for i := 1; i < len(tab.writes); i++ {
						if bytes.Compare(tab.writes[i-1], tab.writes[i]) >= 0 {
							t.Fatalf("budget %d: writes not strictly ascending: %q then %q", budget, tab.writes[i-1], tab.writes[i])
						}
					}
				}
				if err := l.Finish(tab); err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(want, tab.rows()); d != "" {
					t.Errorf("budget %d: rows (-want +got):\n%s", budget, d)
				}
				if d := cmp.Diff(wantStats, l.Stats()); d != "" {
					t.Errorf("budget %d: stats (-want +got):\n%s", budget, d)
				}
				if len(tab.indexNames()) != 0 {
					t.Errorf("latest created indexes %v", tab.indexNames())
				}
			}
		})
	}
}

func BenchmarkLatestFold(b *testing.B) {
	for _, bc := range []struct {
		batch, keys int
		discard     bool
	}{{1000, 100_000, false}, {10_000, 100_000, false}, {10_000, 1_000, false}, {1000, 100_000, true}} {
		name := fmt.Sprintf("batch=%d/keys=%d", bc.batch, bc.keys)
		if bc.discard {
			name += "/table=discard"
		}
		b.Run(name, func(b *testing.B) {
			const n = 1 << 18
			rng := rand.New(rand.NewPCG(1, 2))
			recs := make([]Record, n)
			value := bytes.Repeat([]byte("v"), 100)
			for i := range recs {
				k := rng.IntN(bc.keys)
				recs[i] = Record{Partition: 0, Offset: int64(i), Key: []byte(fmt.Sprintf("account-%08d", k)), Value: value}
				if i%50 == 0 {
					recs[i].Value = nil
				}
			}
			var tab Table = newMemTable()
			if bc.discard {
				tab = discardTable{} // measures the fold alone
			}
			l := NewLatest()
			b.ReportAllocs()
			b.ResetTimer()
			folded := 0
			for i := 0; b.Loop(); i++ {
				start := (i * bc.batch) % (n - bc.batch)
				if err := l.Fold(tab, recs[start:start+bc.batch]); err != nil {
					b.Fatal(err)
				}
				folded += bc.batch
			}
			b.ReportMetric(float64(folded)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// discardTable drops every write.
type discardTable struct{}

func (discardTable) Get([]byte) ([]byte, error) { return nil, nil }
func (discardTable) Put(_, _ []byte) error      { return nil }
func (discardTable) Delete([]byte) error        { return nil }
func (discardTable) Index(string) (KV, error)   { return discardTable{}, nil }

// BenchmarkLatestFoldHeld folds the records of a rebuild into the held
// rows (SortExternally, as materialize's writer does): 1M records over
// 100k keys (the bench topic), or over as many keys as records, keys and
// values back to back in arenas of 4096 records, as the replay's batches
// hand them over.
func BenchmarkLatestFoldHeld(b *testing.B) {
	for _, keys := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			const n, batch = 1_000_000, 4096
			rng := rand.New(rand.NewPCG(1, 2))
			var batches [][]Record
			for i := 0; i < n; i += batch {
				arena := make([]byte, 0, batch*(12+100))
				recs := make([]Record, 0, batch)
				for j := i; j < min(i+batch, n); j++ {
					k := j
					if keys < n {
						k = rng.IntN(keys)
					}
					start := len(arena)
					arena = fmt.Appendf(arena, "key-%08d", k)
					kend := len(arena)
					for range 100 {
						arena = append(arena, byte('a'+rng.IntN(16)))
					}
					recs = append(recs, Record{Offset: int64(j), Key: arena[start:kend:kend], Value: arena[kend:len(arena):len(arena)]})
				}
				batches = append(batches, recs)
			}
			b.ResetTimer()
			for b.Loop() {
				l := NewLatest()
				l.SortExternally(1 << 30)
				for _, recs := range batches {
					if err := l.Fold(nil, recs); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
