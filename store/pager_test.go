package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// publishPaged builds and publishes a generation of table from ops, applied
// to o as well.
func publishPaged(t *testing.T, db *DB, table string, o oracle, ops []op) uint64 {
	t.Helper()
	g, err := db.Begin(table)
	if err != nil {
		t.Fatal(err)
	}
	writeOps(t, g, o, ops, 97)
	if err := g.Publish(TableMeta{Name: table, Keys: int64(len(o))}, nil); err != nil {
		t.Fatal(err)
	}
	return g.ID()
}

// readPages reads the rest of p in pages of at most maxBytes, appending to
// got, starting after after.
func readPages(p *Pager, after []byte, maxBytes int, got oracle, keys *[]string) (pages int, err error) {
	for {
		last, more, err := p.Page(Range{}, after, 0, maxBytes, func(k, v []byte) error {
			got[string(k)] = string(v)
			*keys = append(*keys, string(k))
			return nil
		})
		if err != nil {
			return pages, err
		}
		pages++
		if !more {
			return pages, nil
		}
		after = last
	}
}

// TestPagerOneStateAcrossPublish: a Pager reads the generation it pinned,
// page by page in short transactions, while a publish replaces it: the
// rows read are exactly the old generation's (an oracle of its ops), the
// publish retired the old generation rather than deleting it, and Close
// deletes it.
func TestPagerOneStateAcrossPublish(t *testing.T) {
	db := openTemp(t)
	old := oracle{}
	gen1 := publishPaged(t, db, "t", old, randomOps(t, 7, 3000))
	p, err := db.NewPager("t", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Meta.Generation != gen1 {
		t.Fatalf("pager reads generation %d, published %d", p.Meta.Generation, gen1)
	}
	got, keys := oracle{}, []string{}
	// One small page, then a publish, then the rest.
	last, more, err := p.Page(Range{}, nil, 0, 512, func(k, v []byte) error {
		got[string(k)], keys = string(v), append(keys, string(k))
		return nil
	})
	if err != nil || !more {
		t.Fatalf("first page: more %v, %v", more, err)
	}
	if at, open := db.OldestReadTx(); open {
		t.Fatalf("a read transaction (begun %v) open between pages: want none", at)
	}
	newer := oracle{}
	gen2 := publishPaged(t, db, "t", newer, randomOps(t, 8, 3000))
	if !slices.Contains(generationKeys(t, db), gen1) {
		t.Fatalf("the publish deleted generation %d while a Pager read it", gen1)
	}
	pages, err := readPages(p, last, 512, got, &keys)
	if err != nil {
		t.Fatal(err)
	}
	if pages < 2 {
		t.Fatalf("%d pages after the first: want several", pages)
	}
	if !slices.IsSorted(keys) || len(keys) != len(old) {
		t.Fatalf("read %d keys (sorted %v), generation %d has %d", len(keys), slices.IsSorted(keys), gen1, len(old))
	}
	for k, v := range old {
		if got[k] != v {
			t.Fatalf("key %q: read %q, generation %d holds %q", k, got[k], gen1, v)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if gens := generationKeys(t, db); slices.Contains(gens, gen1) || !slices.Contains(gens, gen2) {
		t.Fatalf("after Close the generations are %v: want %d gone, %d there", gens, gen1, gen2)
	}
	if _, rows := scanAll(t, db, "t"); len(rows) != len(newer) {
		t.Fatalf("published table has %d rows, want %d", len(rows), len(newer))
	}
}

// TestPagerStaleOnApply: an in-place Apply between two pages makes the next
// page a *PagerStaleError: pages of two states are never mixed.
func TestPagerStaleOnApply(t *testing.T) {
	db := openTemp(t)
	o := oracle{}
	gen := publishPaged(t, db, "t", o, randomOps(t, 9, 2000))
	p, err := db.NewPager("t", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	last, more, err := p.Page(Range{}, nil, 0, 256, func(k, v []byte) error { return nil })
	if err != nil || !more {
		t.Fatalf("first page: more %v, %v", more, err)
	}
	if _, err := db.Apply("t", gen, func(r Rows) error { return r.Put([]byte("zz-new"), []byte("v")) }, nil, nil); err != nil {
		t.Fatal(err)
	}
	_, _, err = p.Page(Range{}, last, 0, 256, func(k, v []byte) error {
		t.Fatalf("a row was given after the generation changed in place")
		return nil
	})
	var se *PagerStaleError
	if !errors.As(err, &se) || !errors.Is(err, ErrPagerStale) || se.Reason != "changed in place" {
		t.Fatalf("page after an Apply: %v, want a PagerStaleError (changed in place)", err)
	}
}

// TestPagerRowAloneOverBudget: a row larger than the byte budget comes
// alone on its page, and the limit in rows holds too.
func TestPagerRowAloneOverBudget(t *testing.T) {
	db := openTemp(t)
	g, err := db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 10_000)
	err = g.Write(func(r Rows) error {
		for _, k := range []string{"a", "b", "c", "d"} {
			v := []byte("small")
			if k == "b" {
				v = big
			}
			if err := r.Put([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Publish(TableMeta{Name: "t", Keys: 4}, nil); err != nil {
		t.Fatal(err)
	}
	p, err := db.NewPager("t", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var pages [][]string
	var after []byte
	for {
		var page []string
		last, more, err := p.Page(Range{}, after, 2, 100, func(k, v []byte) error {
			page = append(page, string(k))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, page)
		if !more {
			break
		}
		after = last
	}
	// "a" fits; "b" would take the page past the budget, so it starts the
	// next one and comes alone; "c" and "d" fill the row limit of 2.
	want := [][]string{{"a"}, {"b"}, {"c", "d"}}
	if !slices.EqualFunc(pages, want, slices.Equal) {
		t.Fatalf("pages %v, want %v", pages, want)
	}
	var alone [][]string
	after = nil
	for {
		var page []string
		last, more, err := p.Page(Range{}, after, 0, 1, func(k, v []byte) error {
			page = append(page, string(k))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		alone = append(alone, page)
		if !more {
			break
		}
		after = last
	}
	if want := [][]string{{"a"}, {"b"}, {"c"}, {"d"}}; !slices.EqualFunc(alone, want, slices.Equal) {
		t.Fatalf("pages with a 1-byte budget %v, want a row each: %v", alone, want)
	}
}

// TestOpenRemovesSpoolLeftovers: a read-write Open removes the spool files
// a killed daemon left in SpoolDir (and the directory, once empty), and
// leaves a file that is not a spool file alone.
func TestOpenRemovesSpoolLeftovers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.db")
	db, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	dir := SpoolDir(path)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"123" + SpoolSuffix, "456" + SpoolSuffix} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("left"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	db, err = Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if db.CleanedFiles() != 2 {
		t.Fatalf("CleanedFiles %d, want the 2 spool files", db.CleanedFiles())
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("spool directory after Open: %v, want it removed", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// A file that is not ours stays, and so does the directory.
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(other, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err = Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := os.Stat(other); err != nil || db.CleanedFiles() != 0 {
		t.Fatalf("a file that is not a spool file: %v, CleanedFiles %d; want it kept, 0", err, db.CleanedFiles())
	}
}

// TestPagerDuringApply: a Pager made while an Apply is inside its
// transaction (not committed yet) reads one state: its metadata's key count
// is the number of rows its pages give, and those rows are the table before
// the Apply or after it (the oracles), never the metadata of one and the
// rows of the other.
func TestPagerDuringApply(t *testing.T) {
	db := openTemp(t)
	before := oracle{}
	gen := publishPaged(t, db, "t", before, randomOps(t, 11, 500))
	after := oracle{"zz-applied": "v"}
	for k, v := range before {
		after[k] = v
	}
	inside, release := make(chan struct{}), make(chan struct{})
	applied := make(chan error, 1)
	go func() {
		_, err := db.Apply("t", gen, func(r Rows) error {
			close(inside)
			<-release
			return r.Put([]byte("zz-applied"), []byte("v"))
		}, nil, nil)
		applied <- err
	}()
	<-inside
	made := make(chan *Pager, 1)
	madeErr := make(chan error, 1)
	go func() {
		p, err := db.NewPager("t", nil)
		madeErr <- err
		made <- p
	}()
	// Let the Apply commit once NewPager is pinned (inside its first
	// transaction) or waiting for the write to end.
	for {
		db.pins.mu.Lock()
		pinned := db.pins.count[gen] > 0 || db.pins.waiting > 0
		db.pins.mu.Unlock()
		if pinned {
			break
		}
		select {
		case err := <-madeErr:
			t.Fatalf("NewPager returned (%v) while an Apply was inside its transaction", err)
		default:
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	if err := <-madeErr; err != nil {
		t.Fatal(err)
	}
	p := <-made
	defer p.Close()
	got, keys := oracle{}, []string{}
	if _, err := readPages(p, nil, 256, got, &keys); err != nil {
		t.Fatal(err)
	}
	if int64(len(got)) != p.Meta.Keys {
		t.Fatalf("the Pager's metadata says %d keys, its pages gave %d: two states", p.Meta.Keys, len(got))
	}
	if fmt.Sprint(got) != fmt.Sprint(before) && fmt.Sprint(got) != fmt.Sprint(after) {
		t.Fatalf("the pages gave %d rows, neither the table before the Apply (%d) nor after it (%d)", len(got), len(before), len(after))
	}
}
