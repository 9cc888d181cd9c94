package store_test

// Damaged files: each test damages a real file at offsets computed from its
// layout (internal/dbdamage) and checks what every way in reports. Reads
// that bbolt would turn into a panic or a memory fault must return a
// *CorruptError instead, in this process; read-write opens and Check run
// bbolt's page walk in a child process (store.TestPageCheck: this test
// binary), whose crash must also become a *CorruptError.
//
// Which damage reaches which path:
//
//	damage                        caught by
//	file shorter than its pages   preflight (size vs the meta page's page count): every Open
//	both meta pages bad           preflight: every Open
//	one meta page bad             nothing to catch: bbolt uses the other (a warning in Check)
//	garbage row page              reads (guard: bbolt's page assertion); rw Open and Check (page walk)
//	page number past the file     reads (guard: memory fault); rw Open and Check (page walk)
//	freed page referenced         not reads (a well-formed stale leaf); rw Open and Check (the
//	                              page walk crashes in bbolt's goroutine, in the child) and
//	                              Check's row counts

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/internal/dbdamage"
	"github.com/kmaterialize/kmaterialize/store"
)

// buildTable publishes table with n rows "<prefix>%05d" -> "value-%d-<pad>"
// (enough to span many pages) and an empty checkpoint bucket, and returns
// the rows written: the oracle.
func buildTable(t *testing.T, path, table, prefix string, n int) map[string]string {
	return buildTablePad(t, path, table, prefix, n, 40)
}

func buildTablePad(t *testing.T, path, table, prefix string, n, pad int) map[string]string {
	t.Helper()
	db, err := store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	want := map[string]string{}
	for i := 0; i < n; i++ {
		want[fmt.Sprintf("%s%05d", prefix, i)] = fmt.Sprintf("value-%d-%s", i, strings.Repeat("x", pad))
	}
	g, err := db.Begin(table)
	if err != nil {
		t.Fatal(err)
	}
	err = g.Write(func(tb store.Rows) error {
		for k, v := range want {
			if err := tb.Put([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = g.Publish(store.TableMeta{Topic: "topic", Fold: "latest"}, func(tx *bolt.Tx) error {
		_ = tx.Bucket(store.BucketCheckpoints).DeleteBucket([]byte(table))
		_, err := tx.Bucket(store.BucketCheckpoints).CreateBucket([]byte(table))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return want
}

// wantCorrupt fails unless err is a *CorruptError for path whose reason
// contains every one of reason.
func wantCorrupt(t *testing.T, what string, err error, path string, reason ...string) *store.CorruptError {
	t.Helper()
	var ce *store.CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("%s: err = %v, want a *CorruptError", what, err)
	}
	if ce.Path != path {
		t.Errorf("%s: CorruptError.Path = %q, want %q", what, ce.Path, path)
	}
	for _, r := range reason {
		if !strings.Contains(ce.Reason, r) {
			t.Errorf("%s: reason %q does not say %q", what, ce.Reason, r)
		}
	}
	if !strings.Contains(err.Error(), "database is corrupt") || !strings.Contains(err.Error(), path) {
		t.Errorf("%s: message %q does not say the database at %s is corrupt", what, err, path)
	}
	return ce
}

// checkProblems runs Check with the child page walk and fails unless it
// reports at least one problem containing want.
func checkProblems(t *testing.T, path, want string) *store.CheckReport {
	t.Helper()
	r, err := store.Check(path, &store.CheckOptions{PageCheck: store.TestPageCheck})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	t.Logf("Check: problems %q, warnings %q", r.Problems, r.Warnings)
	if r.OK() {
		t.Fatalf("Check found no problem")
	}
	for _, p := range r.Problems {
		if strings.Contains(p, want) {
			return r
		}
	}
	t.Fatalf("Check problems %q: none says %q", r.Problems, want)
	return r
}

// openAll tries every way in: a read-only open, a read-write open (with the
// page walk in a child) and, if the read-only open worked, a Get of key and
// a Scan. It returns the errors by name.
func openAll(t *testing.T, path, key string) map[string]error {
	t.Helper()
	errs := map[string]error{}
	db, err := store.Open(path, &store.Options{ReadOnly: true})
	errs["open read-only"] = err
	if err == nil {
		_, errs["get"] = db.Get("t", []byte(key))
		errs["scan"] = db.Scan("t", nil, 0, func(k, v []byte) error { return nil })
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	db, err = store.Open(path, &store.Options{PageCheck: store.TestPageCheck})
	errs["open read-write"] = err
	if err == nil {
		db.Close()
	}
	for k, v := range errs {
		t.Logf("%s: %v", k, v)
	}
	return errs
}

func TestTruncatedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.db")
	buildTable(t, path, "t", "k-", 3000)
	l, err := dbdamage.Inspect(path, "t")
	if err != nil {
		t.Fatal(err)
	}
	// One page short of what the meta page says is in use: the last page
	// (written by the last commit) is gone, and reading it would be SIGBUS.
	if err := os.Truncate(path, int64(l.Pgid-1)*int64(l.PageSize)); err != nil {
		t.Fatal(err)
	}
	for what, err := range openAll(t, path, "k-00000") {
		wantCorrupt(t, what, err, path, "truncated", fmt.Sprintf("%d pages of %d bytes", l.Pgid, l.PageSize))
	}
	checkProblems(t, path, "truncated")
}

func TestZeroedMetaPages(t *testing.T) {
	t.Run("both", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "k.db")
		buildTable(t, path, "t", "k-", 100)
		if err := dbdamage.ZeroMetas(path, store.PageSize); err != nil {
			t.Fatal(err)
		}
		for what, err := range openAll(t, path, "k-00000") {
			wantCorrupt(t, what, err, path, "both meta pages")
		}
		checkProblems(t, path, "both meta pages")
	})
	t.Run("one", func(t *testing.T) {
		// bbolt falls back to the other meta page (the previous commit):
		// a torn meta write after a crash. Not corruption, a warning.
		path := filepath.Join(t.TempDir(), "k.db")
		want := buildTable(t, path, "t", "k-", 100)
		ps := store.PageSize
		var txid [2]uint64
		for i := range txid {
			b, err := dbdamage.ReadPage(path, ps, uint64(i))
			if err != nil {
				t.Fatal(err)
			}
			txid[i] = binary.LittleEndian.Uint64(b[16+48:])
		}
		older := uint64(0)
		if txid[1] < txid[0] {
			older = 1
		}
		if err := dbdamage.WritePage(path, ps, older, make([]byte, ps)); err != nil {
			t.Fatal(err)
		}
		db, err := store.Open(path, &store.Options{ReadOnly: true})
		if err != nil {
			t.Fatalf("read-only open with one intact meta page: %v", err)
		}
		got := map[string]string{}
		err = db.Scan("t", nil, 0, func(k, v []byte) error { got[string(k)] = string(v); return nil })
		db.Close()
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("scan after one meta page zeroed: err %v, %d rows, want the %d written", err, len(got), len(want))
		}
		r, err := store.Check(path, &store.CheckOptions{PageCheck: store.TestPageCheck})
		if err != nil || !r.OK() || len(r.Warnings) != 2 || !strings.Contains(r.Warnings[0], fmt.Sprintf("meta page %d", older)) {
			t.Fatalf("Check: %+v, %v; want OK with a warning about meta page %d and one about the page check", r, err, older)
		}
	})
}

func TestDamagedRowPages(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(path string, l dbdamage.Layout) error
		// fault: the read must be a memory fault turned into an error.
		fault bool
	}{
		{name: "garbage leaf", damage: func(path string, l dbdamage.Layout) error {
			return dbdamage.Garbage(path, l.PageSize, l.Leaves[0], 1)
		}},
		{name: "garbage branch", damage: func(path string, l dbdamage.Layout) error {
			return dbdamage.Garbage(path, l.PageSize, l.RowsRoot, 2)
		}},
		{name: "child past the high-water mark", damage: func(path string, l dbdamage.Layout) error {
			return dbdamage.SetBranchChild(path, l.PageSize, l.RowsRoot, 0, l.Pgid+3)
		}},
		{name: "child past the end of the file", fault: true, damage: func(path string, l dbdamage.Layout) error {
			// Grow the file by a page so that its size is no power of
			// two: bbolt maps whole powers of two, so a page past the
			// end of the file, inside the map, is a SIGBUS.
			st, err := os.Stat(path)
			if err != nil {
				return err
			}
			if err := os.Truncate(path, st.Size()+int64(l.PageSize)); err != nil {
				return err
			}
			return dbdamage.SetBranchChild(path, l.PageSize, l.RowsRoot, 0, uint64(st.Size())/uint64(l.PageSize)+3)
		}},
		{name: "child past the end of the map", fault: true, damage: func(path string, l dbdamage.Layout) error {
			return dbdamage.SetBranchChild(path, l.PageSize, l.RowsRoot, 0, (1<<40)/uint64(l.PageSize))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "k.db")
			buildTable(t, path, "t", "k-", 3000)
			l, err := dbdamage.Inspect(path, "t")
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Leaves) < 2 {
				t.Fatalf("layout %+v: want the rows under a branch page", l)
			}
			if err := tc.damage(path, l); err != nil {
				t.Fatal(err)
			}
			errs := openAll(t, path, "k-00000")
			if errs["open read-only"] != nil {
				t.Fatalf("read-only open: %v; the meta pages are intact, the damage is for reads to find", errs["open read-only"])
			}
			for _, what := range []string{"get", "scan"} {
				ce := wantCorrupt(t, what, errs[what], path, "reading it failed")
				var fault interface{ Addr() uintptr }
				if tc.fault && !errors.As(ce.Err, &fault) {
					t.Errorf("%s: cause %v (%T) is not a memory fault", what, ce.Err, ce.Err)
				}
			}
			wantCorrupt(t, "open read-write", errs["open read-write"], path)
			checkProblems(t, path, "")

			// The damage is in the rows: the metadata still reads.
			db, err := store.Open(path, &store.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if ts, err := db.Tables(); err != nil || len(ts) != 1 || ts[0].Keys != 3000 {
				t.Fatalf("Tables: %v, %v; want table t with 3000 keys", ts, err)
			}
		})
	}
}

// TestFreedPageReferenced: a branch of the published rows points at a page
// of the generation the publish freed (a stale leaf with another key range).
// Reads cannot tell (the page is a well-formed leaf), so Check must: bbolt's
// walk finds the keys out of order, and the schema check the row count.
func TestFreedPageReferenced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.db")
	// Shorter values than the second generation's: a stale leaf holds more
	// rows than the one it replaces, so the row count is off.
	buildTablePad(t, path, "t", "z-", 3000, 5)
	old, err := dbdamage.Inspect(path, "t")
	if err != nil {
		t.Fatal(err)
	}
	buildTable(t, path, "t", "k-", 1000)
	cur, err := dbdamage.Inspect(path, "t")
	if err != nil {
		t.Fatal(err)
	}
	if len(cur.Leaves) < 2 {
		t.Fatalf("layout %+v: want the rows under a branch page", cur)
	}
	for _, p := range append([]uint64{cur.RowsRoot}, cur.Leaves...) {
		if p == old.Leaves[0] {
			t.Fatalf("page %d of the first generation was reused; pick another", p)
		}
	}
	if err := dbdamage.SetBranchChild(path, cur.PageSize, cur.RowsRoot, 0, old.Leaves[0]); err != nil {
		t.Fatal(err)
	}
	r := checkProblems(t, path, "bbolt")
	found := false
	for _, p := range r.Problems {
		found = found || strings.Contains(p, "metadata says 1000 keys")
	}
	if !found {
		t.Errorf("Check problems %q: none says the row count is off", r.Problems)
	}
	_, err = store.Open(path, &store.Options{PageCheck: store.TestPageCheck})
	wantCorrupt(t, "open read-write", err, path)
}
