package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// BenchmarkCompactOnline: the writers' pause of a compaction under an open
// DB (CompactOnline) of a file holding KMATERIALIZE_BENCH_COMPACT_MIB MiB
// of rows (default 64; the figure is for 1024), 1 KiB values, half
// of them freed by a second publish of the other half: the pause is the
// copy of what is left, at disk speed. Reports the pause and the file's
// size before and after.
func BenchmarkCompactOnline(b *testing.B) {
	mib := 64
	if v := os.Getenv("KMATERIALIZE_BENCH_COMPACT_MIB"); v != "" {
		mib, _ = strconv.Atoi(v)
	}
	rows := mib << 10 // 1 KiB values
	value := make([]byte, 1000)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		db, err := Open(filepath.Join(b.TempDir(), "k.db"), nil)
		if err != nil {
			b.Fatal(err)
		}
		for pass := 0; pass < 2; pass++ {
			g, err := db.Begin("t")
			if err != nil {
				b.Fatal(err)
			}
			n := rows
			if pass == 1 {
				n = rows / 2
			}
			for start := 0; start < n; start += 10000 {
				err := g.Write(func(tb Rows) error {
					for j := start; j < min(start+10000, n); j++ {
						if err := tb.Put([]byte(fmt.Sprintf("k%09d", j)), value); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			if err := g.Publish(TableMeta{Topic: "events", Fold: "latest"}, nil); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		res, err := db.CompactOnline()
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		b.ReportMetric(float64(res.Paused.Milliseconds()), "paused-ms")
		b.ReportMetric(float64(res.Before>>20), "before-MiB")
		b.ReportMetric(float64(res.After>>20), "after-MiB")
		fmt.Printf("bench: compact online: %d MiB -> %d MiB, writers paused %s, the switch %s\n", res.Before>>20, res.After>>20, res.Paused, res.Swap)
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
