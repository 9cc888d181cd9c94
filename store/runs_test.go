package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// sliceRows is a Sorted over rows given in order; a nil value is a
// tombstone.
type sliceRows struct {
	keys []string
	vals [][]byte
	i    int
}

func (s *sliceRows) Next() (key, value []byte, ok bool, err error) {
	if s.i == len(s.keys) {
		return nil, nil, false, nil
	}
	s.i++
	return []byte(s.keys[s.i-1]), s.vals[s.i-1], true, nil
}

// batchRows sorts a batch's last value per key into a sliceRows.
func batchRows(last map[string][]byte) *sliceRows {
	s := &sliceRows{}
	for k := range last {
		s.keys = append(s.keys, k)
	}
	slices.Sort(s.keys)
	for _, k := range s.keys {
		s.vals = append(s.vals, last[k])
	}
	return s
}

// TestWriteMergedMatchesMapFold spills random batches of puts and
// tombstones (some batches empty, some tombstones only, one hot key in
// every batch) as runs, merges them with a last in-memory batch, and
// compares the generation with a plain map fold of the same operations in
// the same order. Publish's key count (counted by the merge) must equal the
// rows.
func TestWriteMergedMatchesMapFold(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	for round := range 5 {
		db := openTemp(t)
		g, err := db.Begin("t")
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		runs := 3 + rng.IntN(10)
		var mem *sliceRows
		for b := 0; b <= runs; b++ {
			last := map[string][]byte{}
			n := rng.IntN(200)
			switch {
			case b%4 == 1:
				n = 0 // an empty run
			}
			tombsOnly := b%5 == 3
			for range n {
				k := fmt.Sprintf("k%04d", rng.IntN(300))
				if tombsOnly || rng.IntN(4) == 0 {
					last[k] = nil
					continue
				}
				v := make([]byte, rng.IntN(3)*8) // some present empty values
				for i := range v {
					v[i] = byte('a' + rng.IntN(26))
				}
				last[k] = v
			}
			// The hot key: in every batch, a tombstone in every third.
			if b%3 == 2 {
				last["hot"] = nil
			} else {
				last["hot"] = fmt.Appendf(nil, "hot-%d", b)
			}
			for k, v := range last {
				if v == nil {
					delete(want, k)
				} else {
					want[k] = string(v)
				}
			}
			if b == runs {
				mem = batchRows(last)
				break
			}
			if err := g.SpillRun(batchRows(last)); err != nil {
				t.Fatal(err)
			}
		}
		if g.Runs() != runs {
			t.Fatalf("round %d: %d runs spilled, want %d", round, g.Runs(), runs)
		}
		if err := g.WriteMerged(context.Background(), mem); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(RunsDir(db.Path())); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("round %d: the runs directory is still there after the merge: %v", round, err)
		}
		if err := g.Publish(TableMeta{}, nil); err != nil {
			t.Fatal(err)
		}
		_, got := scanAll(t, db, "t")
		gotS := map[string]string{}
		for k, v := range got {
			gotS[k] = string(v)
		}
		if d := cmp.Diff(want, gotS); d != "" {
			t.Fatalf("round %d: rows (-map fold +merged):\n%s", round, d)
		}
		m, err := db.Table("t")
		if err != nil {
			t.Fatal(err)
		}
		if m.Keys != int64(len(want)) {
			t.Fatalf("round %d: meta keys %d, want %d", round, m.Keys, len(want))
		}
	}
}

// TestWriteMergedManyBlocks merges about 17 MiB of rows, so the merge
// fills blocks of every size from mergeFirstCommit up to mergeCommitBytes
// (each block reused at a larger size, rows that end past a block's limit,
// values bigger than a page), and compares the generation with a map fold
// of the same runs.
func TestWriteMergedManyBlocks(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	db := openTemp(t)
	g, err := db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	const keys = 60_000
	var mem *sliceRows
	total := 0
	for b := 0; b < 4; b++ {
		last := map[string][]byte{}
		for range 18_000 {
			k := fmt.Sprintf("key-%06d", rng.IntN(keys))
			if rng.IntN(10) == 0 {
				last[k] = nil
				continue
			}
			n := 200 + rng.IntN(400)
			if rng.IntN(500) == 0 {
				n = PageSize + rng.IntN(3*PageSize) // an overflow value
			}
			v := make([]byte, n)
			for i := range v {
				v[i] = byte('a' + rng.IntN(26))
			}
			last[k] = v
		}
		for k, v := range last {
			if v == nil {
				delete(want, k)
			} else {
				want[k] = string(v)
			}
		}
		if b == 3 {
			mem = batchRows(last)
			break
		}
		if err := g.SpillRun(batchRows(last)); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range want {
		total += len(k) + len(v)
	}
	if total < mergeFirstCommit+2*mergeFirstCommit+4*mergeFirstCommit+mergeCommitBytes/2 {
		t.Fatalf("only %d bytes of rows: not enough to reach the largest block", total)
	}
	if err := g.WriteMerged(context.Background(), mem); err != nil {
		t.Fatal(err)
	}
	if err := g.Publish(TableMeta{}, nil); err != nil {
		t.Fatal(err)
	}
	_, got := scanAll(t, db, "t")
	gotS := make(map[string]string, len(got))
	for k, v := range got {
		gotS[k] = string(v)
	}
	if len(gotS) != len(want) {
		t.Fatalf("%d rows, want %d", len(gotS), len(want))
	}
	for k, v := range want {
		if gotS[k] != v {
			t.Fatalf("key %q: %d bytes, want %d bytes (or a different value)", k, len(gotS[k]), len(v))
		}
	}
	m, err := db.Table("t")
	if err != nil {
		t.Fatal(err)
	}
	if m.Keys != int64(len(want)) {
		t.Fatalf("meta keys %d, want %d", m.Keys, len(want))
	}
}

// TestOpenRemovesLeftoverFiles leaves run files and a compaction temporary
// as a killed process would, and checks a read-only open keeps them and a
// read-write open removes exactly them (not a FILE.runs that is a plain
// file, not other files).
func TestOpenRemovesLeftoverFiles(t *testing.T) {
	db := openTemp(t)
	path := db.Path()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(RunsDir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	left := []string{RunPath(path, 3, 1), RunPath(path, 3, 2), path + CompactTempPrefix + "123"}
	for _, p := range append(left, path+".other") {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ro, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = ro.Close()
	for _, p := range left {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("a read-only open touched %s: %v", p, err)
		}
	}
	rw, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	if rw.CleanedFiles() != len(left) {
		t.Fatalf("CleanedFiles %d, want %d", rw.CleanedFiles(), len(left))
	}
	for _, p := range append(left, RunsDir(path)) {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s survived the read-write open: %v", p, err)
		}
	}
	if _, err := os.Stat(path + ".other"); err != nil {
		t.Fatalf("the open removed a file that is not its own: %v", err)
	}
}

// TestWriteCountsKeys writes random puts (new keys, overwrites, present
// empty values) and deletes (present and absent keys) in several Write
// transactions, some of which fail and roll back, and checks that Publish
// records the number of rows a map of the committed operations holds: the
// generation counts its rows as they are written, without walking the
// tree.
func TestWriteCountsKeys(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	db := openTemp(t)
	g, err := db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	errRollback := errors.New("roll back")
	for tx := range 20 {
		fail := tx%4 == 3
		next := maps.Clone(want)
		err := g.Write(func(tab Rows) error {
			for range 300 {
				k := []byte(fmt.Sprintf("k%03d", rng.IntN(400)))
				if rng.IntN(3) == 0 {
					if err := tab.Delete(k); err != nil {
						return err
					}
					delete(next, string(k))
					continue
				}
				if err := tab.Put(k, make([]byte, rng.IntN(2)*5)); err != nil {
					return err
				}
				next[string(k)] = true
			}
			if fail {
				return errRollback
			}
			return nil
		})
		if fail {
			if !errors.Is(err, errRollback) {
				t.Fatalf("write %d: %v, want the rollback", tx, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		want = next
	}
	if err := g.Publish(TableMeta{}, nil); err != nil {
		t.Fatal(err)
	}
	m, err := db.Table("t")
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := scanAll(t, db, "t")
	if m.Keys != int64(len(want)) || len(keys) != len(want) {
		t.Fatalf("meta keys %d, rows scanned %d, want %d", m.Keys, len(keys), len(want))
	}
}

// TestWriteMergedIndexCombines spills random sorted runs, merges them with
// a last in-memory batch into an index with a combine that joins a key's
// values, and checks the index holds, for every key, its values from every
// source in source order (oldest first), that the combine saw the keys in
// ascending order, and that the index's keys are not counted as rows.
func TestWriteMergedIndexCombines(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	db := openTemp(t)
	g, err := db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	runs := 4 + rng.IntN(8)
	var mem *sliceRows
	for b := 0; b <= runs; b++ {
		last := map[string][]byte{}
		for range rng.IntN(150) {
			k := fmt.Sprintf("id%03d", rng.IntN(200))
			last[k] = fmt.Appendf(nil, "r%d.%s", b, k)
		}
		last["hot"] = fmt.Appendf(nil, "r%d.hot", b) // in every source
		for k, v := range last {
			want[k] += string(v) + ";"
		}
		if b == runs {
			mem = batchRows(last)
			break
		}
		if err := g.SpillRun(batchRows(last)); err != nil {
			t.Fatal(err)
		}
	}
	var prev string
	var out []byte
	combine := func(key []byte, values [][]byte) ([]byte, error) {
		if prev != "" && string(key) <= prev {
			return nil, fmt.Errorf("key %q after %q", key, prev)
		}
		prev = string(key)
		out = out[:0]
		for _, v := range values {
			out = append(append(out, v...), ';')
		}
		return out, nil
	}
	if err := g.WriteMergedIndex(context.Background(), "ix", mem, combine); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(RunsDir(db.Path())); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the runs directory is still there after the merge: %v", err)
	}
	got := map[string]string{}
	err = g.Write(func(tab Rows) error {
		ix, err := tab.Index("ix")
		if err != nil {
			return err
		}
		for k := range want {
			v, err := ix.Get([]byte(k))
			if err != nil {
				return err
			}
			got[k] = string(v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("index (-sources in order +merged):\n%s", d)
	}
	if err := g.Publish(TableMeta{}, nil); err != nil {
		t.Fatal(err)
	}
	if m, err := db.Table("t"); err != nil || m.Keys != 0 {
		t.Fatalf("meta keys %d (%v), want 0: index keys are not rows", m.Keys, err)
	}
}
