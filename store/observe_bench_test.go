package store

import (
	"encoding/binary"
	"testing"
	"time"
)

// BenchmarkPublishCapture times the publish of a 200k-row generation over a
// 200k-row table whose rows all changed, without an observer and with one
// that captures the changes (the change feed's cost at a publish: issue 23
// asks for at most 1.5x): in memory (with-memory), or spooled to a file
// (with-spool, what the daemon does past its memory threshold). Only the
// Publish is timed, the observer's call included. A spool file is removed
// after the Publish, untimed: the daemon's feed removes it when it drops
// the commit, minutes later (1.3 ms for this one's 23 MB on ext4).
func BenchmarkPublishCapture(b *testing.B) {
	const rows, batch = 200_000, 20_000
	for _, tc := range []struct {
		name    string
		observe bool
		bound   CaptureBound
	}{
		{"without", false, CaptureBound{}},
		{"with-memory", true, CaptureBound{Memory: 128 << 20}},
		{"with-spool", true, CaptureBound{Memory: 0, Spool: 4 << 30}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			db, err := Open(b.TempDir()+"/bench.db", nil)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			var captured int
			var spools []*Spool
			if tc.observe {
				db.SetObserver(func(c Commit) {
					captured += len(c.Changes)
					if c.Spool != nil {
						captured += int(c.Spool.Count)
						spools = append(spools, c.Spool)
					}
				}, func(CommitKind, string) CaptureBound { return tc.bound })
			}
			remove := func() {
				for _, sp := range spools {
					if err := sp.Remove(); err != nil {
						b.Error(err)
					}
				}
				spools = spools[:0]
			}
			key := make([]byte, 16)
			val := make([]byte, 100)
			round := 0
			write := func() *Generation {
				g, err := db.Begin("t")
				if err != nil {
					b.Fatal(err)
				}
				round++
				for done := 0; done < rows; done += batch {
					err := g.Write(func(t Rows) error {
						for i := done; i < done+batch; i++ {
							binary.BigEndian.PutUint64(key, uint64(i)*0x9E3779B97F4A7C15)
							binary.BigEndian.PutUint64(key[8:], uint64(i))
							binary.BigEndian.PutUint64(val, uint64(round))
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
				return g
			}
			if err := write().Publish(TableMeta{}, nil); err != nil {
				b.Fatal(err)
			}
			captured = 0
			remove()
			for b.Loop() {
				b.StopTimer()
				remove()
				g := write()
				b.StartTimer()
				if err := g.Publish(TableMeta{}, nil); err != nil {
					b.Fatal(err)
				}
			}
			remove()
			if tc.observe && captured != b.N*rows {
				b.Fatalf("captured %d changes in %d publishes of %d changed rows", captured, b.N, rows)
			}
		})
	}
}

// BenchmarkPublishCapturePaired is BenchmarkPublishCapture's without and
// with-spool, interleaved: each iteration publishes the same 200k changed
// rows into a DB without an observer and into one that spools, timing each
// Publish, so that the load of a shared machine weighs on both alike. It
// reports each one's ms/publish and their ratio (issue 23: at most 1.5).
func BenchmarkPublishCapturePaired(b *testing.B) {
	const rows, batch = 200_000, 20_000
	open := func(observe bool) (*DB, *[]*Spool) {
		db, err := Open(b.TempDir()+"/bench.db", nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = db.Close() })
		spools := &[]*Spool{}
		if observe {
			db.SetObserver(func(c Commit) {
				if c.Spool == nil || c.Spool.Count != rows {
					b.Errorf("a publish of %d changed rows handed over %+v", rows, c)
					return
				}
				*spools = append(*spools, c.Spool)
			}, func(CommitKind, string) CaptureBound { return CaptureBound{Spool: 4 << 30} })
		}
		return db, spools
	}
	key := make([]byte, 16)
	val := make([]byte, 100)
	write := func(db *DB, round int) *Generation {
		g, err := db.Begin("t")
		if err != nil {
			b.Fatal(err)
		}
		for done := 0; done < rows; done += batch {
			err := g.Write(func(t Rows) error {
				for i := done; i < done+batch; i++ {
					binary.BigEndian.PutUint64(key, uint64(i)*0x9E3779B97F4A7C15)
					binary.BigEndian.PutUint64(key[8:], uint64(i))
					binary.BigEndian.PutUint64(val, uint64(round))
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
		return g
	}
	plain, _ := open(false)
	spooling, spools := open(true)
	for _, db := range []*DB{plain, spooling} {
		if err := write(db, 0).Publish(TableMeta{}, nil); err != nil {
			b.Fatal(err)
		}
	}
	var took [2]time.Duration
	round := 0
	b.ResetTimer()
	b.StopTimer()
	for range b.N {
		round++
		for i, db := range []*DB{plain, spooling} {
			g := write(db, round)
			start := time.Now()
			if err := g.Publish(TableMeta{}, nil); err != nil {
				b.Fatal(err)
			}
			took[i] += time.Since(start)
		}
		for _, sp := range *spools {
			if err := sp.Remove(); err != nil {
				b.Error(err)
			}
		}
		*spools = (*spools)[:0]
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(b.N) }
	b.ReportMetric(ms(took[0]), "ms-without/op")
	b.ReportMetric(ms(took[1]), "ms-spool/op")
	b.ReportMetric(float64(took[1])/float64(took[0]), "ratio")
	b.ReportMetric(0, "ns/op")
}
