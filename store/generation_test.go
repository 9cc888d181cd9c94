package store

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
)

// publishOps builds and publishes a generation of table from ops and
// returns the oracle of its rows and the generation.
func publishOps(t *testing.T, db *DB, table string, seed uint64, n int) (oracle, *Generation) {
	t.Helper()
	o := oracle{}
	g, err := db.Begin(table)
	if err != nil {
		t.Fatal(err)
	}
	writeOps(t, g, o, randomOps(t, seed, n), 250)
	if err := g.Publish(TableMeta{Topic: "events", Fold: "latest", Records: int64(n)}, nil); err != nil {
		t.Fatal(err)
	}
	return o, g
}

func TestSecondPublishReplacesFirst(t *testing.T) {
	db := openTemp(t)
	seed := uint64(time.Now().UnixNano())
	_, g1 := publishOps(t, db, "t", seed, 1000)
	o2, g2 := publishOps(t, db, "t", seed+1, 800)
	if g2.ID() <= g1.ID() {
		t.Fatalf("generation ids not increasing: %d then %d", g1.ID(), g2.ID())
	}
	_, rows := scanAll(t, db, "t")
	if diff := cmp.Diff(map[string]string(o2), map[string]string(rows)); diff != "" {
		t.Errorf("readers see (-want second generation +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{g2.ID()}, generationKeys(t, db)); diff != "" {
		t.Errorf("generation buckets (-want +got):\n%s", diff)
	}
	m, err := db.Table("t")
	if err != nil || m.Generation != g2.ID() || m.Keys != int64(len(o2)) {
		t.Errorf("meta %+v, %v; want generation %d keys %d", m, err, g2.ID(), len(o2))
	}
	// Abort after Publish is a no-op.
	if err := g2.Abort(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint64{g2.ID()}, generationKeys(t, db)); diff != "" {
		t.Errorf("Abort after Publish removed something (-want +got):\n%s", diff)
	}
	if err := g2.Write(func(Rows) error { return nil }); !errors.Is(err, ErrGenerationDone) {
		t.Errorf("Write after Publish: %v", err)
	}
	if err := g2.Publish(TableMeta{}, nil); !errors.Is(err, ErrGenerationDone) {
		t.Errorf("Publish twice: %v", err)
	}
}

// TestFailedRebuildLeavesPreviousTable: Abort, a hook error, and a Write
// error each leave the published table byte for byte as it was.
func TestFailedRebuildLeavesPreviousTable(t *testing.T) {
	hookErr := errors.New("checkpoint refused")
	writeErr := errors.New("fold conflict")
	for _, tc := range []struct {
		name string
		fail func(t *testing.T, g *Generation)
	}{
		{"abort", func(t *testing.T, g *Generation) {
			if err := g.Abort(); err != nil {
				t.Fatal(err)
			}
			if err := g.Abort(); err != nil {
				t.Fatalf("second Abort: %v", err)
			}
		}},
		{"hook error", func(t *testing.T, g *Generation) {
			err := g.Publish(TableMeta{Topic: "other"}, func(tx *bolt.Tx) error {
				// The hook sees the new metadata in its transaction...
				if m, err := decodeMeta([]byte("t"), tx.Bucket(BucketTables).Get([]byte("t"))); err != nil || m.Generation != g.ID() {
					t.Errorf("hook sees meta %+v, %v", m, err)
				}
				return hookErr
			})
			if !errors.Is(err, hookErr) {
				t.Fatalf("Publish = %v, want the hook's error", err)
			}
			// ...but nothing committed; the generation is still unpublished
			// and Abort removes it.
			if err := g.Abort(); err != nil {
				t.Fatal(err)
			}
		}},
		{"write error", func(t *testing.T, g *Generation) {
			err := g.Write(func(tb Rows) error {
				if err := tb.Put([]byte("a/0001"), []byte("half-written")); err != nil {
					return err
				}
				return writeErr
			})
			if err != writeErr {
				t.Fatalf("Write = %v, want fn's error unchanged", err)
			}
			if err := g.Abort(); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openTemp(t)
			o, g1 := publishOps(t, db, "t", 7, 600)
			wantMeta, wantRows := rawTable(t, db, "t")

			g, err := db.Begin("t")
			if err != nil {
				t.Fatal(err)
			}
			writeOps(t, g, oracle{}, randomOps(t, 8, 300), 100)
			tc.fail(t, g)

			gotMeta, gotRows := rawTable(t, db, "t")
			if string(gotMeta) != string(wantMeta) {
				t.Errorf("meta changed:\n got %s\nwant %s", gotMeta, wantMeta)
			}
			if diff := cmp.Diff(wantRows, gotRows); diff != "" {
				t.Errorf("rows changed (-want +got):\n%s", diff)
			}
			_, rows := scanAll(t, db, "t")
			if diff := cmp.Diff(map[string]string(o), map[string]string(rows)); diff != "" {
				t.Errorf("readers see (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]uint64{g1.ID()}, generationKeys(t, db)); diff != "" {
				t.Errorf("generation buckets (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCrashCleanup(t *testing.T) {
	path := t.TempDir() + "/k.db"
	db, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	o, g1 := publishOps(t, db, "t", 11, 500)
	wantMeta, wantRows := rawTable(t, db, "t")

	// A rebuild that never publishes: Begin + Write, then the process
	// "dies" (Close without Abort), for the same table and a new one.
	for _, table := range []string{"t", "new"} {
		g, err := db.Begin(table)
		if err != nil {
			t.Fatal(err)
		}
		writeOps(t, g, oracle{}, randomOps(t, 12, 300), 100)
		if err := g.Write(func(tb Rows) error {
			ix, err := tb.Index("identity")
			if err != nil {
				return err
			}
			return ix.Put([]byte("id"), []byte("x"))
		}); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(generationKeys(t, db)); got != 3 {
		t.Fatalf("%d generation buckets before reopen, want 3", got)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// A read-only open cleans nothing.
	ro, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if ro.Cleaned() != 0 || len(generationKeys(t, ro)) != 3 {
		t.Errorf("read-only open cleaned %d, has %d generations", ro.Cleaned(), len(generationKeys(t, ro)))
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.Cleaned() != 2 {
		t.Errorf("Cleaned() = %d, want 2", db.Cleaned())
	}
	if diff := cmp.Diff([]uint64{g1.ID()}, generationKeys(t, db)); diff != "" {
		t.Errorf("generation buckets after cleanup (-want +got):\n%s", diff)
	}
	gotMeta, gotRows := rawTable(t, db, "t")
	if string(gotMeta) != string(wantMeta) || !cmp.Equal(wantRows, gotRows) {
		t.Errorf("published table changed by cleanup")
	}
	_, rows := scanAll(t, db, "t")
	if !cmp.Equal(map[string]string(o), map[string]string(rows)) {
		t.Errorf("readers see different rows after cleanup")
	}
	if _, err := db.Table("new"); !errors.Is(err, ErrTableNotFound) {
		t.Errorf("unpublished table visible: %v", err)
	}

	// Generation numbers are not reused after cleanup.
	g, err := db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	if g.ID() <= g1.ID()+2 {
		t.Errorf("new generation %d reuses a number (last handed out %d)", g.ID(), g1.ID()+2)
	}
	_ = g.Abort()

	// A clean reopen cleans nothing.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if db.Cleaned() != 0 {
		t.Errorf("Cleaned() = %d after a clean close, want 0", db.Cleaned())
	}
}

func TestIndexIsPrivateAndDroppedWithGeneration(t *testing.T) {
	db := openTemp(t)
	g, err := db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	err = g.Write(func(tb Rows) error {
		ix, err := tb.Index("identity")
		if err != nil {
			return err
		}
		ix2, err := tb.Index("identity")
		if err != nil || ix2 != ix {
			t.Errorf("Index twice in one Write: %v, same=%v", err, ix2 == ix)
		}
		if err := ix.Put([]byte("shared"), []byte("index value")); err != nil {
			return err
		}
		if err := ix.Put([]byte("only-in-index"), []byte("1")); err != nil {
			return err
		}
		if err := tb.Put([]byte("shared"), []byte("row value")); err != nil {
			return err
		}
		if v, _ := tb.Get([]byte("only-in-index")); v != nil {
			t.Errorf("row Get sees index key: %q", v)
		}
		if v, _ := ix.Get([]byte("shared")); string(v) != "index value" {
			t.Errorf("index Get = %q", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The index persists across Write transactions of the generation.
	err = g.Write(func(tb Rows) error {
		ix, err := tb.Index("identity")
		if err != nil {
			return err
		}
		if v, _ := ix.Get([]byte("only-in-index")); string(v) != "1" {
			t.Errorf("index value lost between Writes: %q", v)
		}
		if _, err := tb.Index(""); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Index(\"\") = %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Publish(TableMeta{}, nil); err != nil {
		t.Fatal(err)
	}
	_, rows := scanAll(t, db, "t")
	if diff := cmp.Diff(map[string]string{"shared": "row value"}, map[string]string(rows)); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if _, err := db.Get("t", []byte("only-in-index")); !errors.Is(err, ErrKeyNotFound) {
		t.Errorf("Get of index key: %v", err)
	}
	if m, _ := db.Table("t"); m.Keys != 1 {
		t.Errorf("Keys = %d, want 1 (index entries are not rows)", m.Keys)
	}

	// Replacing the generation drops its index too.
	g2, _ := db.Begin("t")
	if err := g2.Publish(TableMeta{}, nil); err != nil {
		t.Fatal(err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(BucketGenerations).Bucket(GenerationKey(g.ID())) != nil {
			t.Errorf("old generation (with its index) still present")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEmptyValuesAndKeys(t *testing.T) {
	db := openTemp(t)
	g, _ := db.Begin("t")
	err := g.Write(func(tb Rows) error {
		if err := tb.Put([]byte("empty"), []byte{}); err != nil {
			return err
		}
		if err := tb.Put([]byte("nil"), nil); err != nil {
			return err
		}
		for _, k := range []string{"empty", "nil"} {
			if v, err := tb.Get([]byte(k)); err != nil || v == nil || len(v) != 0 {
				t.Errorf("Table.Get(%q) = %v (nil %v), %v; want present and empty", k, v, v == nil, err)
			}
		}
		if v, err := tb.Get([]byte("absent")); v != nil || err != nil {
			t.Errorf("Table.Get(absent) = %q, %v; want nil", v, err)
		}
		if err := tb.Put(nil, []byte("v")); !errors.Is(err, ErrEmptyKey) {
			t.Errorf("Put(empty key) = %v, want ErrEmptyKey", err)
		}
		if err := tb.Delete([]byte("absent")); err != nil {
			t.Errorf("Delete(absent) = %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Publish(TableMeta{}, nil); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"empty", "nil"} {
		v, err := db.Get("t", []byte(k))
		if err != nil || v == nil || len(v) != 0 {
			t.Errorf("Get(%q) = %v (nil %v), %v; want present and empty", k, v, v == nil, err)
		}
	}
}

func TestPublishNameMismatch(t *testing.T) {
	db := openTemp(t)
	g, _ := db.Begin("t")
	if err := g.Publish(TableMeta{Name: "u"}, nil); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Publish as another table: %v", err)
	}
	if _, err := db.Begin(""); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Begin(\"\"): %v", err)
	}
}
