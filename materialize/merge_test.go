package materialize

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/cpushare"
	"github.com/kmaterialize/kmaterialize/store"
)

// TestLatestExternalSortMatchesMapFold drives the writer with the latest
// fold and budgets small enough to spill many runs, and compares the
// published rows with a plain map fold of the same records in the same
// order: records in forward and random key order over three partitions,
// tombstones that delete keys of earlier runs (and keys revived after), one
// key updated in every batch, null keys and present empty values. Each
// case runs unlimited and with the folds, spills and merge taking turns on
// a share of one slot (the daemon's, on two cores).
func TestLatestExternalSortMatchesMapFold(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, order := range []string{"forward", "random"} {
		for _, hold := range []int{1, 2 << 10, 16 << 10} {
			for _, slots := range []int{0, 1} {
				t.Run(fmt.Sprintf("%s/hold=%d/slots=%d", order, hold, slots), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(seed, uint64(hold)))
					batches := genBatches(rng, order, 4000, 600)
					want := map[string]string{}
					records := 0
					for _, b := range batches {
						for _, r := range b {
							records++
							switch {
							case len(r.Key) == 0:
							case r.Value == nil:
								delete(want, string(r.Key))
							default:
								want[string(r.Key)] = string(r.Value)
							}
						}
					}

					path := filepath.Join(t.TempDir(), "m.db")
					db, err := store.Open(path, nil)
					if err != nil {
						t.Fatal(err)
					}
					defer db.Close()
					gen, err := db.Begin("t")
					if err != nil {
						t.Fatal(err)
					}
					defer gen.Abort()
					f := fold.NewLatest()
					w := newWriter(gen, f, 1024, 4096, hold)
					if slots > 0 {
						w.share = cpushare.New(slots)
						gen.Pace(w.share)
					}
					w.start(context.Background())
					for _, b := range batches {
						if err := w.send(b); err != nil {
							t.Fatal(err)
						}
					}
					if err := w.close(); err != nil {
						t.Fatal(err)
					}
					if err := w.finish(context.Background()); err != nil {
						t.Fatal(err)
					}
					// hold=1 spills at every hand-off; 16 KiB holds a few
					// hundred rows: both must have spilled several runs.
					if w.runs < 3 {
						t.Fatalf("%d runs spilled, want several (the test would not exercise the merge)", w.runs)
					}
					if _, err := os.Stat(store.RunsDir(path)); !errors.Is(err, fs.ErrNotExist) {
						t.Fatalf("run files left after the merge: %v", err)
					}
					if err := gen.Publish(store.TableMeta{}, nil); err != nil {
						t.Fatal(err)
					}
					got := map[string]string{}
					if err := db.Scan("t", nil, 0, func(k, v []byte) error { got[string(k)] = string(v); return nil }); err != nil {
						t.Fatal(err)
					}
					if d := cmp.Diff(want, got); d != "" {
						t.Fatalf("rows (-map fold +external sort):\n%s", d)
					}
					m, err := db.Table("t")
					if err != nil {
						t.Fatal(err)
					}
					if m.Keys != int64(len(want)) {
						t.Fatalf("meta keys %d (counted by the merge), want %d", m.Keys, len(want))
					}
					if st := f.Stats(); st.Records != int64(records) {
						t.Fatalf("fold saw %d records, want %d", st.Records, records)
					}
					t.Logf("%d records, %d keys, %d runs", records, len(want), w.runs)
				})
			}
		}
	}
}

// genBatches returns n records over keys keys, in batches of 1 to 50, over
// three partitions (a key always in the same partition, offsets
// increasing). forward walks the keys in ascending order, round after
// round; random picks them at random. A fifth of the records are
// tombstones, some values are empty, some keys null, and the key "hot" is in
// every batch, deleted now and then.
func genBatches(rng *rand.Rand, order string, n, keys int) [][]fold.Record {
	var out [][]fold.Record
	offsets := map[int32]int64{}
	next := 0
	rec := func(key []byte, value []byte) fold.Record {
		p := int32(0)
		if len(key) > 0 {
			p = int32(key[len(key)-1] % 3)
		}
		offsets[p]++
		return fold.Record{Partition: p, Offset: offsets[p], Key: key, Value: value}
	}
	for i := 0; i < n; {
		size := 1 + rng.IntN(50)
		b := make([]fold.Record, 0, size+1)
		for j := 0; j < size && i < n; j, i = j+1, i+1 {
			var k int
			if order == "forward" {
				k = next % keys
				next++
			} else {
				k = rng.IntN(keys)
			}
			key := fmt.Appendf(nil, "key-%05d", k)
			var val []byte
			switch x := rng.IntN(20); {
			case x < 4: // tombstone
			case x == 4:
				val = []byte{}
			case x == 5:
				key = nil // null key: skipped
				val = []byte("v")
			default:
				val = fmt.Appendf(nil, "v%d-%d", i, rng.IntN(1000))
			}
			b = append(b, rec(key, val))
		}
		if rng.IntN(4) == 0 {
			b = append(b, rec([]byte("hot"), nil))
		} else {
			b = append(b, rec([]byte("hot"), fmt.Appendf(nil, "hot-%d", i)))
		}
		out = append(out, b)
	}
	return out
}
