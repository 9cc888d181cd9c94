package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// BenchmarkCompactOnline: the writers' pause of a compaction under an open
// DB (CompactOnline) of a file holding KMATERIALIZE_BENCH_COMPACT_MIB MiB
// of rows (default 64; the figure is for 1024), 1 KiB values, half
// of them freed by a second publish of the other half: the pause is the
// copy of what is left, at disk speed. Reports the pause and the file's
// size before and after.
func BenchmarkCompactOnline(b *testing.B) {
	mib := benchMiB()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		db := benchFile(b, mib)
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

// benchMiB is KMATERIALIZE_BENCH_COMPACT_MIB, default 64.
func benchMiB() int {
	if v, err := strconv.Atoi(os.Getenv("KMATERIALIZE_BENCH_COMPACT_MIB")); err == nil && v > 0 {
		return v
	}
	return 64
}

// benchFile is a database with mib MiB of 1 KiB rows published, then half
// of them published again (the first generation's pages freed).
func benchFile(b *testing.B, mib int) *DB {
	b.Helper()
	db, err := Open(filepath.Join(b.TempDir(), "k.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	rows := mib << 10
	value := make([]byte, 1000)
	for i := range value {
		value[i] = byte('a' + i%26)
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
	return db
}

// BenchmarkBackup: BackupFile of the file BenchmarkCompactOnline makes
// (KMATERIALIZE_BENCH_COMPACT_MIB): its time and rate.
func BenchmarkBackup(b *testing.B) {
	mib := benchMiB()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		db := benchFile(b, mib)
		out := filepath.Join(b.TempDir(), "copy.db")
		b.StartTimer()
		start := time.Now()
		info, err := BackupFile(db, out)
		took := time.Since(start)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(info.Bytes)/took.Seconds()/(1<<20), "MiB/s")
		fmt.Printf("bench: backup: %d MiB in %s (%.0f MiB/s, fsynced)\n", info.Bytes>>20, took.Round(time.Millisecond), float64(info.Bytes)/took.Seconds()/(1<<20))
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
