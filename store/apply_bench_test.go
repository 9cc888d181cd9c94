package store

import (
	"fmt"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// BenchmarkApplyRewrite is a followed table catching up: a table of 100k
// rows (12-byte keys, 100-byte values) rewritten whole, in key order, by
// one Apply per op, as a latest fold's apply of a batch that updates every
// key writes it. It reports the time in fn (the Puts) and in the rest
// (spill, write, fsync) separately.
func BenchmarkApplyRewrite(b *testing.B) {
	const rows = 100_000
	db, err := Open(b.TempDir()+"/bench.db", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	g, err := db.Begin("t")
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Publish(TableMeta{Name: "t"}, nil); err != nil {
		b.Fatal(err)
	}
	gen := g.ID()
	keys := make([][]byte, rows)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%08d", i)
	}
	val := make([]byte, 100)
	var inFn time.Duration
	b.ReportAllocs()
	round := 0
	for b.Loop() {
		round++
		val[0] = byte(round)
		var st time.Time
		_, err := db.Apply("t", gen, func(r Rows) error {
			st = time.Now()
			defer func() { inFn += time.Since(st) }()
			for _, k := range keys {
				if err := r.Put(k, val); err != nil {
					return err
				}
			}
			return nil
		}, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(inFn.Nanoseconds())/float64(b.N), "fn-ns/op")
}

// BenchmarkApplyIntoEmpty is a followed table's first apply after an
// empty rebuild: 100k rows (12-byte keys, 100-byte values) put in key
// order into a table with none, one Apply per op (each into a table of
// its own). It reports the rows bucket's pages after the apply.
func BenchmarkApplyIntoEmpty(b *testing.B) {
	const rows = 100_000
	db, err := Open(b.TempDir()+"/bench.db", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	keys := make([][]byte, rows)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%08d", i)
	}
	val := make([]byte, 100)
	var pages int
	n := 0
	for b.Loop() {
		n++
		b.StopTimer()
		table := fmt.Sprintf("t%d", n)
		g, err := db.Begin(table)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Publish(TableMeta{Name: table}, nil); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		_, err = db.Apply(table, g.ID(), func(r Rows) error {
			for _, k := range keys {
				if err := r.Put(k, val); err != nil {
					return err
				}
			}
			return nil
		}, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		err = db.handle().View(func(tx *bolt.Tx) error {
			rb := tx.Bucket(BucketGenerations).Bucket(GenerationKey(g.ID())).Bucket(BucketRows)
			pages = rb.Stats().LeafPageN
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(pages), "leaf-pages")
}
