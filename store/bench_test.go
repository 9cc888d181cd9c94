package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
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
