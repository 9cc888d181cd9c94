package store

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/kmaterialize/kmaterialize/fold"
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
			err := g.Write(func(t fold.Table) error {
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
