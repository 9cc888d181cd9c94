package store

import (
	"os"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestOldestReadTx: a read transaction the package opened is reported
// while it is open (its start no later than now, no earlier than before it
// began), the oldest of two wins, and none is reported once they end.
func TestOldestReadTx(t *testing.T) {
	db := openTemp(t)
	if _, ok := db.OldestReadTx(); ok {
		t.Fatal("a read transaction reported before any was opened")
	}
	before := time.Now()
	err := db.View(func(*bolt.Tx) error {
		outer, ok := db.OldestReadTx()
		if !ok || outer.Before(before) || outer.After(time.Now()) {
			t.Errorf("inside View: oldest %v, %v; want between %v and now", outer, ok, before)
		}
		return db.View(func(*bolt.Tx) error {
			if got, ok := db.OldestReadTx(); !ok || !got.Equal(outer) {
				t.Errorf("inside a second View: oldest %v, %v; want the first's %v", got, ok, outer)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if at, ok := db.OldestReadTx(); ok {
		t.Fatalf("read transaction from %v still reported after View returned", at)
	}
}

// TestFileStats: the size is the file's as os.Stat sees it, and pages a
// write freed while a read transaction was open are pending, not free.
func TestFileStats(t *testing.T) {
	db := openTemp(t)
	st, err := db.FileStats()
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(db.Path())
	if err != nil {
		t.Fatal(err)
	}
	if st.Size != fi.Size() || st.Size == 0 {
		t.Fatalf("FileStats size %d, os.Stat %d", st.Size, fi.Size())
	}
	write := func(v string) {
		t.Helper()
		if err := db.Bolt().Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("readtx-test"))
			if err != nil {
				return err
			}
			return b.Put([]byte("k"), []byte(v))
		}); err != nil {
			t.Fatal(err)
		}
	}
	write("a")
	err = db.View(func(*bolt.Tx) error {
		write("b") // frees the pages "a" was on; the open read may see them
		st, err := db.FileStats()
		if err != nil {
			return err
		}
		if st.PendingPages == 0 || st.OpenReadTxs == 0 {
			t.Errorf("with a read open across a write: %+v, want pending pages and an open read", st)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
