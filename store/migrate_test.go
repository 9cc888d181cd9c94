package store_test

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/store"
)

// v1Want is testdata/store/v1/want.json: what the program that made the v1
// fixture wrote into it, computed from its inputs (not read back).
type v1Want map[string]struct {
	Meta       store.TableMeta       `json:"meta"`
	Rows       map[string]string     `json:"rows"`
	Checkpoint checkpoint.Checkpoint `json:"checkpoint"`
}

// copyV1 copies the v1 fixture into a temp dir and returns its path and the
// oracle.
func copyV1(t *testing.T) (string, v1Want) {
	t.Helper()
	src := filepath.Join("..", "testdata", "store", "v1")
	// Kept gzipped: the file is 16 MiB, nearly all of it the zeros of
	// bbolt's preallocation.
	gz, err := os.Open(filepath.Join(src, "tables.db.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer gz.Close()
	zr, err := gzip.NewReader(gz)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tables.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	wb, err := os.ReadFile(filepath.Join(src, "want.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want v1Want
	if err := json.Unmarshal(wb, &want); err != nil {
		t.Fatal(err)
	}
	return path, want
}

// readAll reads every table's metadata, rows and checkpoint.
func readAll(t *testing.T, db *store.DB) v1Want {
	t.Helper()
	got := v1Want{}
	metas, err := db.Tables()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range metas {
		rows := map[string]string{}
		var cp checkpoint.Checkpoint
		err := db.ReadTable(m.Name, func(s *store.Snapshot) error {
			var ok bool
			var err error
			if cp, ok, err = checkpoint.Load(s.Tx, m.Name); err != nil || !ok {
				t.Errorf("checkpoint of %q: present %v, %v", m.Name, ok, err)
			}
			return s.Rows(nil, 0, func(k, v []byte) error { rows[string(k)] = string(v); return nil })
		})
		if err != nil {
			t.Fatal(err)
		}
		e := got[m.Name]
		e.Meta, e.Rows, e.Checkpoint = m, rows, cp
		got[m.Name] = e
	}
	return got
}

func TestMigrateV1Fixture(t *testing.T) {
	path, want := copyV1(t)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	// A read-only open reads v1 as it is (v2 only adds to generation
	// buckets) and changes nothing.
	ro, err := store.Open(path, &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open of v1: %v", err)
	}
	if v := ro.FormatVersion(); v != 1 {
		t.Fatalf("read-only open: version %d, want 1", v)
	}
	if diff := cmp.Diff(want, readAll(t, ro)); diff != "" {
		t.Fatalf("v1 read as it is (-written +read):\n%s", diff)
	}
	ro.Close()
	r, err := store.Check(path, &store.CheckOptions{PageCheck: store.TestPageCheck, Table: checkCheckpoint})
	if err != nil || !r.OK() || !hasWarning(r, "format version 1") || !hasWarning(r, "unpublished") {
		t.Fatalf("Check of v1: %+v, %v; want OK, warning of the version and the unpublished generation", r, err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("read-only open or Check changed the file")
	}

	db, err := store.Open(path, &store.Options{PageCheck: store.TestPageCheck})
	if err != nil {
		t.Fatalf("read-write open of v1: %v", err)
	}
	if db.Migrated() != 1 || db.FormatVersion() != store.FormatVersion || store.FormatVersion != 3 {
		t.Fatalf("migrated from %d to %d, want 1 to 3", db.Migrated(), db.FormatVersion())
	}
	if db.Cleaned() != 1 {
		t.Errorf("cleaned %d generations, want the fixture's 1 unpublished", db.Cleaned())
	}
	if diff := cmp.Diff(want, readAll(t, db)); diff != "" {
		t.Fatalf("after migration (-written by v1 +read):\n%s", diff)
	}
	// v2's additions, read raw: every published generation says so and
	// records its row count.
	err = db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(store.BucketMeta).Get(store.KeyFormatVersion); string(v) != string(store.GenerationKey(3)) {
			t.Errorf("stored format version %x, want 3", v)
		}
		for name, w := range want {
			gb := tx.Bucket(store.BucketGenerations).Bucket(store.GenerationKey(w.Meta.Generation))
			if st := string(gb.Get(store.KeyGenerationState)); st != store.StatePublished {
				t.Errorf("table %s: generation state %q, want published", name, st)
			}
			if k := gb.Get(store.KeyGenerationKeys); string(k) != string(store.GenerationKey(uint64(len(w.Rows)))) {
				t.Errorf("table %s: generation keys %x, want %d", name, k, len(w.Rows))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	r, err = store.Check(path, &store.CheckOptions{PageCheck: store.TestPageCheck, Table: checkCheckpoint})
	if err != nil || !r.OK() || len(r.Warnings) != 0 || r.FormatVersion != 3 || r.Tables != 2 || r.Generations != 2 {
		t.Fatalf("Check after migration: %+v, %v; want clean, version 3, 2 tables, 2 generations", r, err)
	}
	// Migrated once: the next open has nothing to do.
	db, err = store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if db.Migrated() != 0 {
		t.Errorf("second open migrated again from %d", db.Migrated())
	}
	// The fixture was made with 4 KiB pages, before new files got
	// store.PageSize: it keeps them, through the migration's writes and a
	// compaction.
	if ps := pageSize(t, db); ps != 4096 {
		t.Errorf("page size after migration %d, want the fixture's 4096", ps)
	}
	db.Close()
	if _, err := store.Compact(path, nil); err != nil {
		t.Fatal(err)
	}
	db, err = store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ps := pageSize(t, db); ps != 4096 {
		t.Errorf("page size after compact %d, want 4096", ps)
	}
	if diff := cmp.Diff(want, readAll(t, db)); diff != "" {
		t.Fatalf("after compact (-written by v1 +read):\n%s", diff)
	}
	db.Close()
}

// A new file gets store.PageSize pages (an older one keeps its own:
// TestMigrateV1Fixture), and so does its compacted copy.
func TestNewFilePageSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.db")
	db, err := store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ps := pageSize(t, db); ps != store.PageSize {
		t.Errorf("new file: page size %d, want %d", ps, store.PageSize)
	}
	db.Close()
	if _, err := store.Compact(path, nil); err != nil {
		t.Fatal(err)
	}
	db, err = store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if ps := pageSize(t, db); ps != store.PageSize {
		t.Errorf("compacted: page size %d, want %d", ps, store.PageSize)
	}
}

func pageSize(t *testing.T, db *store.DB) int {
	t.Helper()
	ps := 0
	if err := db.View(func(tx *bolt.Tx) error { ps = tx.DB().Info().PageSize; return nil }); err != nil {
		t.Fatal(err)
	}
	return ps
}

func checkCheckpoint(tx *bolt.Tx, m store.TableMeta) []string {
	if _, ok, err := checkpoint.Load(tx, m.Name); err != nil || !ok {
		return []string{"checkpoint does not load"}
	}
	return nil
}

func hasWarning(r *store.CheckReport, s string) bool {
	for _, w := range r.Warnings {
		if strings.Contains(w, s) {
			return true
		}
	}
	return false
}

func TestNewerFormatRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.db")
	buildTable(t, path, "t", "k-", 10)
	db, err := store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Bolt().Update(func(tx *bolt.Tx) error {
		return tx.Bucket(store.BucketMeta).Put(store.KeyFormatVersion, store.GenerationKey(store.FormatVersion+1))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		_, err := store.Open(path, &store.Options{ReadOnly: ro})
		if !errors.Is(err, store.ErrFormat) || errors.Is(err, store.ErrCorrupt) ||
			!strings.Contains(err.Error(), fmt.Sprintf("format version %d was written by a newer kmaterialize; this build reads versions up to %d", store.FormatVersion+1, store.FormatVersion)) {
			t.Errorf("read-only=%v: err = %v, want ErrFormat saying the file is newer", ro, err)
		}
	}
	// Not corruption: Check cannot judge a layout it does not know.
	r, err := store.Check(path, &store.CheckOptions{PageCheck: store.TestPageCheck})
	if !errors.Is(err, store.ErrFormat) || errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Check: %+v, %v; want ErrFormat saying the version is newer", r, err)
	}
}

// TestCheckSchemaInvariants breaks one invariant at a time in a sound file
// and checks that Check names it (and that the sound file is clean).
func TestCheckSchemaInvariants(t *testing.T) {
	clean := filepath.Join(t.TempDir(), "k.db")
	buildTable(t, clean, "t", "k-", 50)
	r, err := store.Check(clean, &store.CheckOptions{PageCheck: store.TestPageCheck})
	if err != nil || !r.OK() || len(r.Warnings) != 0 || r.Tables != 1 || r.Generations != 1 {
		t.Fatalf("Check of a sound file: %+v, %v", r, err)
	}
	setMeta := func(f func(m map[string]any)) func(tx *bolt.Tx) error {
		return func(tx *bolt.Tx) error {
			var m map[string]any
			if err := json.Unmarshal(tx.Bucket(store.BucketTables).Get([]byte("t")), &m); err != nil {
				return err
			}
			f(m)
			b, _ := json.Marshal(m)
			return tx.Bucket(store.BucketTables).Put([]byte("t"), b)
		}
	}
	gen := func(tx *bolt.Tx) *bolt.Bucket {
		return tx.Bucket(store.BucketGenerations).Bucket(store.GenerationKey(1))
	}
	for _, tc := range []struct {
		name    string
		mutate  func(tx *bolt.Tx) error
		problem string // "" for a warning only
		warning string
	}{
		{name: "keys off", mutate: setMeta(func(m map[string]any) { m["keys"] = 49 }), problem: `metadata says 49 keys, generation 1 holds 50 rows`},
		{name: "missing generation", mutate: setMeta(func(m map[string]any) { m["generation"] = 7 }), problem: `published generation 7 does not exist`},
		{name: "no checkpoint", mutate: func(tx *bolt.Tx) error { return tx.Bucket(store.BucketCheckpoints).DeleteBucket([]byte("t")) }, problem: `table "t" has no checkpoint`},
		{name: "stray checkpoint", mutate: func(tx *bolt.Tx) error {
			_, err := tx.Bucket(store.BucketCheckpoints).CreateBucket([]byte("gone"))
			return err
		}, problem: `checkpoint "gone" belongs to no table`},
		{name: "state building", mutate: func(tx *bolt.Tx) error { return gen(tx).Put(store.KeyGenerationState, []byte(store.StateBuilding)) }, problem: `generation 1 is published but its state is "building"`},
		{name: "recorded keys off", mutate: func(tx *bolt.Tx) error { return gen(tx).Put(store.KeyGenerationKeys, store.GenerationKey(51)) }, problem: `recorded 51 rows at publish, holds 50`},
		{name: "no format version", mutate: func(tx *bolt.Tx) error { return tx.Bucket(store.BucketMeta).Delete(store.KeyFormatVersion) }, problem: `format version is , not a version number`},
		{name: "orphan generation", mutate: func(tx *bolt.Tx) error {
			if err := tx.Bucket(store.BucketMeta).Put(store.KeyGenerationSeq, store.GenerationKey(2)); err != nil {
				return err
			}
			gb, err := tx.Bucket(store.BucketGenerations).CreateBucket(store.GenerationKey(2))
			if err != nil {
				return err
			}
			if err := gb.Put(store.KeyGenerationTable, []byte("t")); err != nil {
				return err
			}
			return gb.Put(store.KeyGenerationState, []byte(store.StateBuilding))
		}, warning: `generation 2 of table "t" is unpublished`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "k.db")
			b, err := os.ReadFile(clean)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			bdb, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = bdb.Update(tc.mutate)
			bdb.Close()
			if err != nil {
				t.Fatal(err)
			}
			r, err := store.Check(path, &store.CheckOptions{PageCheck: store.TestPageCheck})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("problems %q warnings %q", r.Problems, r.Warnings)
			if tc.problem == "" {
				if !r.OK() || !hasWarning(r, tc.warning) {
					t.Fatalf("want OK with warning %q", tc.warning)
				}
				return
			}
			found := false
			for _, p := range r.Problems {
				found = found || strings.Contains(p, tc.problem)
			}
			if !found {
				t.Fatalf("no problem says %q", tc.problem)
			}
			if err := r.Err(); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Err() = %v, want a CorruptError naming %s", err, path)
			}
		})
	}
}

// TestMigrateV2: a v2 file (the layout before kept generations: v3 only
// allows a new generation state) is read as it is by a read-only open and
// migrated by a read-write one, its table untouched.
func TestMigrateV2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.db")
	want := buildTable(t, path, "t", "k-", 50)
	db, err := store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Bolt().Update(func(tx *bolt.Tx) error {
		return tx.Bucket(store.BucketMeta).Put(store.KeyFormatVersion, store.GenerationKey(2))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	rows := func(db *store.DB) map[string]string {
		got := map[string]string{}
		if err := db.Scan("t", nil, 0, func(k, v []byte) error { got[string(k)] = string(v); return nil }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	ro, err := store.Open(path, &store.Options{ReadOnly: true})
	if err != nil || ro.FormatVersion() != 2 {
		t.Fatalf("read-only open of v2: %v, version %d", err, ro.FormatVersion())
	}
	if diff := cmp.Diff(want, rows(ro)); diff != "" {
		t.Errorf("v2 read as it is (-written +read):\n%s", diff)
	}
	ro.Close()
	db, err = store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.Migrated() != 2 || db.FormatVersion() != 3 || db.Cleaned() != 0 {
		t.Fatalf("read-write open: migrated from %d to %d, cleaned %d; want 2 to 3, nothing cleaned", db.Migrated(), db.FormatVersion(), db.Cleaned())
	}
	if diff := cmp.Diff(want, rows(db)); diff != "" {
		t.Errorf("after migration (-written +read):\n%s", diff)
	}
}
