package store

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
)

// publishRandom publishes a table of random rows and returns its oracle.
func publishRandom(t *testing.T, db *DB, table string, seed uint64) oracle {
	t.Helper()
	o := oracle{}
	g, err := db.Begin(table)
	if err != nil {
		t.Fatal(err)
	}
	writeOps(t, g, o, randomOps(t, seed, 300), 100)
	if err := g.Publish(TableMeta{Topic: table, Fold: "latest"}, nil); err != nil {
		t.Fatal(err)
	}
	return o
}

// TestDropTable: a hook that fails leaves the file exactly as it was
// (entry, rows, generations, the hook's own write); a successful drop
// removes the entry and the published generation (not a rebuild's
// unpublished one, which publishes afterwards), commits the hook's write with it, and leaves the
// other table byte for byte. A second drop is ErrTableNotFound; a read-only
// DB refuses.
func TestDropTable(t *testing.T) {
	db := openTemp(t)
	seed := uint64(time.Now().UnixNano())
	publishRandom(t, db, "keep", seed)
	publishRandom(t, db, "gone", seed+1)
	// A rebuild of "gone" in progress: not the table's yet, so kept, and
	// its publish writes the table anew.
	running, err := db.Begin("gone")
	if err != nil {
		t.Fatal(err)
	}
	keepMeta, keepRows := rawTable(t, db, "keep")
	goneMeta, goneRows := rawTable(t, db, "gone")
	gensBefore := generationKeys(t, db)
	if len(gensBefore) != 3 {
		t.Fatalf("generations before: %v, want 3", gensBefore)
	}
	side := []byte("side")
	mark := func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(side)
		if err != nil {
			return err
		}
		return b.Put([]byte("dropped"), []byte("gone"))
	}

	boom := errors.New("boom")
	_, err = db.DropTable("gone", func(tx *bolt.Tx) error {
		if err := mark(tx); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("DropTable with a failing hook: %v, want boom", err)
	}
	m, r := rawTable(t, db, "gone")
	if !cmp.Equal(goneMeta, m) || !cmp.Equal(goneRows, r) || !cmp.Equal(gensBefore, generationKeys(t, db)) {
		t.Fatalf("a failed drop changed the table or the generations")
	}
	if db.Bolt().View(func(tx *bolt.Tx) error {
		if tx.Bucket(side) != nil {
			return errors.New("the failed hook's write was committed")
		}
		return nil
	}) != nil {
		t.Fatal("the failed hook's write was committed")
	}

	dropped, err := db.DropTable("gone", mark)
	if err != nil {
		t.Fatal(err)
	}
	if dropped.Name != "gone" || dropped.Keys != int64(len(goneRows)) {
		t.Fatalf("DropTable returned %+v, want table gone with %d keys", dropped, len(goneRows))
	}
	if _, err := db.Table("gone"); !errors.Is(err, ErrTableNotFound) {
		t.Fatalf("Table after drop: %v, want ErrTableNotFound", err)
	}
	keepGen := decodeMetaT(t, keepMeta).Generation
	if diff := cmp.Diff([]uint64{keepGen, running.ID()}, generationKeys(t, db)); diff != "" {
		t.Fatalf("generations after drop (-want +got):\n%s", diff)
	}
	m, r = rawTable(t, db, "keep")
	if !cmp.Equal(keepMeta, m) || !cmp.Equal(keepRows, r) {
		t.Fatalf("the drop changed the other table")
	}
	if err := db.Bolt().View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(side); b == nil || string(b.Get([]byte("dropped"))) != "gone" {
			return errors.New("the hook's write is missing")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.DropTable("gone", nil); !errors.Is(err, ErrTableNotFound) {
		t.Fatalf("second drop: %v, want ErrTableNotFound", err)
	}
	if err := running.Publish(TableMeta{Topic: "gone", Fold: "latest"}, nil); err != nil {
		t.Fatalf("publish of the rebuild that ran during the drop: %v", err)
	}
	if m, err := db.Table("gone"); err != nil || m.Generation != running.ID() || m.Keys != 0 {
		t.Fatalf("after the running rebuild's publish: %+v, %v", m, err)
	}
	path := db.Path()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.DropTable("keep", nil); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only drop: %v, want ErrReadOnly", err)
	}
}

func decodeMetaT(t *testing.T, b []byte) TableMeta {
	t.Helper()
	m, err := decodeMeta(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
