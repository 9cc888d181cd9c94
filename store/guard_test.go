package store_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/internal/dbdamage"
	"github.com/kmaterialize/kmaterialize/store"
)

// TestCallbackPanicIsInternal: a panic in a caller's callback under a read
// is a *PanicError (ErrInternal), not corruption, whatever the panic (a
// value, a runtime error); bbolt rolled the read back, so the DB keeps
// answering. The same callbacks over a damaged page still report
// corruption: the panic is then bbolt's.
func TestCallbackPanicIsInternal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.db")
	want := buildTable(t, path, "t", "k-", 3000)
	db, err := store.Open(path, &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	var nilMap map[string]int
	var rows []int
	for _, tc := range []struct {
		name string
		read func() error
	}{
		{"ReadTable panic(value)", func() error {
			return db.ReadTable("t", func(*store.Snapshot) error { panic("caller's bug") })
		}},
		{"Scan index out of range", func() error {
			return db.Scan("t", nil, 0, func(k, v []byte) error { _ = rows[len(k)]; return nil })
		}},
		{"View nil map write", func() error {
			return db.View(func(*bolt.Tx) error { nilMap["x"]++; return nil })
		}},
		{"Scan nil dereference", func() error {
			var s *store.Snapshot
			return db.Scan("t", nil, 1, func(k, v []byte) error { _ = s.Meta; return nil })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.read()
			var pe *store.PanicError
			if !errors.As(err, &pe) || !errors.Is(err, store.ErrInternal) {
				t.Fatalf("err = %v (%T), want a *PanicError", err, err)
			}
			if errors.Is(err, store.ErrCorrupt) || errors.As(err, new(*store.CorruptError)) {
				t.Fatalf("err = %v: a caller's panic reported as corruption", err)
			}
			if !strings.Contains(pe.Function, "TestCallbackPanicIsInternal") {
				t.Errorf("Function = %q, want the test's callback", pe.Function)
			}
			if !strings.Contains(string(pe.Stack), "guard_test.go") || pe.Path != path {
				t.Errorf("PanicError{Path: %q, Stack: %s}: want the path and the callback's frame", pe.Path, pe.Stack)
			}
			if !strings.HasPrefix(err.Error(), "internal error") {
				t.Errorf("message %q does not start with internal error", err)
			}
			// The read transaction was rolled back: the DB answers.
			for _, k := range []string{"k-00000", "k-02999"} {
				v, err := db.Get("t", []byte(k))
				if err != nil || string(v) != want[k] {
					t.Fatalf("after the panic, Get(%s) = %q, %v; want %q", k, v, err, want[k])
				}
			}
		})
	}

	// The same kind of callback over a damaged leaf: bbolt panics inside
	// the scan's cursor, called from the callback's Snapshot.Rows.
	bad := filepath.Join(t.TempDir(), "bad.db")
	buildTable(t, bad, "t", "k-", 3000)
	l, err := dbdamage.Inspect(bad, "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := dbdamage.Garbage(bad, l.PageSize, l.Leaves[0], 1); err != nil {
		t.Fatal(err)
	}
	bdb, err := store.Open(bad, &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	err = bdb.ReadTable("t", func(s *store.Snapshot) error {
		return s.Rows(nil, 0, func(k, v []byte) error { return nil })
	})
	ce := wantCorrupt(t, "ReadTable over a damaged leaf", err, bad, "reading it failed", "go.etcd.io/bbolt")
	if errors.Is(err, store.ErrInternal) {
		t.Errorf("damage reported as internal error too: %v", ce)
	}
}
