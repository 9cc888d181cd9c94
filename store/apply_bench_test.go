package store

import (
	"fmt"
	"testing"
	"time"
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
