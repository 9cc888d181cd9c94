package store

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
)

// applyOps applies ops to the published generation gen of table in one
// Apply, and to o, and returns the stats.
func applyOps(t *testing.T, db *DB, table string, gen uint64, o oracle, ops []op) ApplyStats {
	t.Helper()
	st, err := db.Apply(table, gen, func(tb Rows) error {
		var vbuf []byte
		for _, op := range ops {
			if op.del {
				if err := tb.Delete(op.key); err != nil {
					return err
				}
				continue
			}
			vbuf = append(vbuf[:0], op.value...)
			if err := tb.Put(op.key, vbuf); err != nil {
				return err
			}
			for i := range vbuf {
				vbuf[i] = 0xEE // the store must have copied
			}
		}
		return nil
	}, nil, nil)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for _, op := range ops {
		if op.del {
			delete(o, string(op.key))
		} else {
			o[string(op.key)] = string(op.value)
		}
	}
	return st
}

func TestApplyChangesPublishedGenerationInPlace(t *testing.T) {
	db := openTemp(t)
	seed := uint64(time.Now().UnixNano())
	o, g := publishOps(t, db, "t", seed, 1000)
	for i := range 5 {
		before := len(o)
		st := applyOps(t, db, "t", g.ID(), o, randomOps(t, seed+uint64(i)+1, 300))
		if got, want := st.Added-st.Removed, int64(len(o)-before); got != want {
			t.Errorf("apply %d: stats %+v: net %d rows, oracle changed by %d", i, st, got, want)
		}
		_, rows := scanAll(t, db, "t")
		if diff := cmp.Diff(map[string]string(o), map[string]string(rows)); diff != "" {
			t.Fatalf("apply %d: rows (-oracle +got):\n%s", i, diff)
		}
		m, err := db.Table("t")
		if err != nil {
			t.Fatal(err)
		}
		if m.Keys != int64(len(o)) || m.Generation != g.ID() {
			t.Fatalf("apply %d: meta keys %d generation %d; want %d rows in generation %d", i, m.Keys, m.Generation, len(o), g.ID())
		}
	}
	if diff := cmp.Diff([]uint64{g.ID()}, generationKeys(t, db)); diff != "" {
		t.Errorf("generations (-want +got):\n%s", diff)
	}
}

func TestApplyIsAllOrNothing(t *testing.T) {
	db := openTemp(t)
	o, g := publishOps(t, db, "t", uint64(time.Now().UnixNano()), 200)
	metaBefore, rowsBefore := rawTable(t, db, "t")
	boom := errors.New("boom")
	hookRan := false
	for name, call := range map[string]func() error{
		"fn": func() error {
			_, err := db.Apply("t", g.ID(), func(tb Rows) error {
				if err := tb.Put([]byte("new"), []byte("v")); err != nil {
					return err
				}
				return boom
			}, nil, nil)
			return err
		},
		"meta": func() error {
			_, err := db.Apply("t", g.ID(), func(tb Rows) error { return tb.Put([]byte("new"), []byte("v")) },
				func(m *TableMeta) error { m.Records = 1; return boom }, nil)
			return err
		},
		"hook": func() error {
			_, err := db.Apply("t", g.ID(), func(tb Rows) error { return tb.Delete([]byte("a/0001")) },
				nil, func(tx *bolt.Tx) error { hookRan = true; return boom })
			return err
		},
	} {
		if err := call(); !errors.Is(err, boom) {
			t.Errorf("%s fails: Apply returned %v, want the cause wrapped", name, err)
		}
	}
	if !hookRan {
		t.Error("the hook never ran")
	}
	metaAfter, rowsAfter := rawTable(t, db, "t")
	if string(metaBefore) != string(metaAfter) {
		t.Errorf("failed applies changed the metadata:\n%s\n%s", metaBefore, metaAfter)
	}
	if diff := cmp.Diff(rowsBefore, rowsAfter); diff != "" {
		t.Errorf("failed applies changed the rows (-before +after):\n%s", diff)
	}
	if _, rows := scanAll(t, db, "t"); len(rows) != len(o) {
		t.Errorf("%d rows after failed applies, want %d", len(rows), len(o))
	}
}

func TestApplyRefusesAnotherGeneration(t *testing.T) {
	db := openTemp(t)
	seed := uint64(time.Now().UnixNano())
	_, g1 := publishOps(t, db, "t", seed, 100)
	o2, g2 := publishOps(t, db, "t", seed+1, 100)
	called := false
	_, err := db.Apply("t", g1.ID(), func(tb Rows) error { called = true; return nil }, nil, nil)
	var changed *GenerationChangedError
	if !errors.As(err, &changed) || !errors.Is(err, ErrGenerationChanged) || changed.Expected != g1.ID() || changed.Published != g2.ID() {
		t.Fatalf("Apply on the replaced generation: %v, want *GenerationChangedError %d -> %d", err, g1.ID(), g2.ID())
	}
	if called {
		t.Error("fn ran although the generation changed")
	}
	if _, rows := scanAll(t, db, "t"); !cmp.Equal(map[string]string(o2), map[string]string(rows)) {
		t.Error("rows changed")
	}
	if _, err := db.Apply("missing", 1, func(Rows) error { return nil }, nil, nil); !errors.Is(err, ErrTableNotFound) {
		t.Errorf("Apply to a missing table: %v, want ErrTableNotFound", err)
	}
}

func TestApplyHookCommitsWithRows(t *testing.T) {
	db := openTemp(t)
	_, g := publishOps(t, db, "t", uint64(time.Now().UnixNano()), 50)
	bucket := []byte("apply-test-positions")
	_, err := db.Apply("t", g.ID(), func(tb Rows) error {
		idx, err := tb.Index("ids")
		if err != nil {
			return err
		}
		if err := idx.Put([]byte("id-1"), []byte("fp")); err != nil {
			return err
		}
		return tb.Put([]byte("k-new"), []byte("v"))
	}, func(m *TableMeta) error { m.Records += 1; return nil }, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucket)
		if err != nil {
			return err
		}
		return b.Put([]byte("p0"), []byte("42"))
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucket).Get([]byte("p0")); string(v) != "42" {
			t.Errorf("hook's write: %q", v)
		}
		idx := tx.Bucket(BucketGenerations).Bucket(GenerationKey(g.ID())).Bucket(BucketIndex).Bucket([]byte("ids"))
		if idx == nil || string(idx.Get([]byte("id-1"))) != "fp" {
			t.Error("index write missing")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := db.Get("t", []byte("k-new")); err != nil || string(v) != "v" {
		t.Errorf("Get(k-new) = %q, %v", v, err)
	}
	if m, _ := db.Table("t"); m.Records != 51 {
		t.Errorf("records %d, want 51 (meta hook)", m.Records)
	}
}
