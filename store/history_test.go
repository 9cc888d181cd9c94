package store

import (
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
)

// oracleChange is one key that differs between two oracles.
type oracleChange struct {
	Key, Op, Old, New string
}

// oracleDiff compares two plain maps, key by key, sorted: the independent
// model of DB.Diff and of Publish's change counts.
func oracleDiff(old, cur oracle) []oracleChange {
	keys := map[string]bool{}
	for k := range old {
		keys[k] = true
	}
	for k := range cur {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var out []oracleChange
	for _, k := range sorted {
		o, inOld := old[k]
		n, inNew := cur[k]
		switch {
		case inOld && !inNew:
			out = append(out, oracleChange{k, "removed", o, ""})
		case !inOld && inNew:
			out = append(out, oracleChange{k, "added", "", n})
		case o != n:
			out = append(out, oracleChange{k, "changed", o, n})
		}
	}
	return out
}

func countOps(cs []oracleChange) (added, removed, changed int64) {
	for _, c := range cs {
		switch c.Op {
		case "added":
			added++
		case "removed":
			removed++
		case "changed":
			changed++
		}
	}
	return
}

// saveMark stands in for package checkpoint (which imports store): it
// replaces the table's checkpoint bucket with one holding mark.
func saveMark(table, mark string) func(tx *bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		root := tx.Bucket(BucketCheckpoints)
		_ = root.DeleteBucket([]byte(table))
		b, err := root.CreateBucket([]byte(table))
		if err != nil {
			return err
		}
		sub, err := b.CreateBucket([]byte("partitions"))
		if err != nil {
			return err
		}
		if err := sub.Put([]byte{0, 0, 0, 1}, []byte(mark+"-p1")); err != nil {
			return err
		}
		return b.Put([]byte("mark"), []byte(mark))
	}
}

// checkpointOf reads back what saveMark wrote.
func checkpointOf(t *testing.T, db *DB, table string) string {
	t.Helper()
	var mark string
	err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(BucketCheckpoints).Bucket([]byte(table))
		if b == nil {
			return fmt.Errorf("no checkpoint bucket")
		}
		mark = string(b.Get([]byte("mark")))
		if p := b.Bucket([]byte("partitions")); p == nil || string(p.Get([]byte{0, 0, 0, 1})) != mark+"-p1" {
			return fmt.Errorf("checkpoint's nested bucket not restored with mark %q", mark)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return mark
}

func diffAll(t *testing.T, db *DB, table string, from, to uint64, limit int) (DiffRange, []oracleChange) {
	t.Helper()
	var got []oracleChange
	r, err := db.Diff(table, from, to, limit, func(c Change) error {
		got = append(got, oracleChange{string(c.Key), string(c.Op), string(c.Old), string(c.New)})
		return nil
	})
	if err != nil {
		t.Fatalf("Diff(%d, %d): %v", from, to, err)
	}
	return r, got
}

// TestKeepRollbackDiff publishes four generations keeping two, and checks
// against plain-map oracles: each publish's change counts, the kept
// generations and their metadata, Diff, Rollback (rows, metadata and
// checkpoint back as they were), a reopen that keeps them, Check, and the
// cleanup of a removed table's history.
func TestKeepRollbackDiff(t *testing.T) {
	db := openTemp(t)
	seed := uint64(time.Now().UnixNano())
	var (
		oracles []oracle
		metas   []TableMeta
	)
	prev := oracle{}
	for i := 0; i < 4; i++ {
		o := oracle{}
		g, err := db.Begin("t")
		if err != nil {
			t.Fatal(err)
		}
		writeOps(t, g, o, randomOps(t, seed+uint64(i), 600), 250)
		g.Keep(2)
		if err := g.Publish(TableMeta{Topic: "events", Fold: "latest", Records: int64(100 + i)}, saveMark("t", fmt.Sprintf("cp-%d", i))); err != nil {
			t.Fatal(err)
		}
		m, err := db.Table("t")
		if err != nil {
			t.Fatal(err)
		}
		a, r, c := countOps(oracleDiff(prev, o))
		want := Changes{Added: a, Removed: r, Changed: c, FromKeys: int64(len(prev))}
		if i > 0 {
			want.From = metas[i-1].Generation
		}
		if diff := cmp.Diff(&want, m.Changes); diff != "" {
			t.Errorf("publish %d: changes (-oracle +recorded):\n%s", i, diff)
		}
		if m.Keys != int64(len(o)) {
			t.Errorf("publish %d: %d keys, oracle %d", i, m.Keys, len(o))
		}
		oracles, metas, prev = append(oracles, o), append(metas, m), o
	}
	gens := []uint64{metas[0].Generation, metas[1].Generation, metas[2].Generation, metas[3].Generation}
	if diff := cmp.Diff(gens[1:], generationKeys(t, db)); diff != "" {
		t.Errorf("generation buckets after 4 publishes keeping 2 (-want +got):\n%s", diff)
	}
	history, err := db.History("t")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Kept{{gens[2], metas[2]}, {gens[1], metas[1]}}, history); diff != "" {
		t.Errorf("History (-want +got):\n%s", diff)
	}

	// Diff: the published generation against the one it replaced, an
	// older kept one, and with a limit.
	r, got := diffAll(t, db, "t", 0, 0, 0)
	if r != (DiffRange{gens[2], gens[3]}) {
		t.Errorf("default diff range %+v, want %d..%d", r, gens[2], gens[3])
	}
	if diff := cmp.Diff(oracleDiff(oracles[2], oracles[3]), got); diff != "" {
		t.Errorf("Diff default (-oracle +got):\n%s", diff)
	}
	_, got = diffAll(t, db, "t", gens[1], gens[3], 0)
	if diff := cmp.Diff(oracleDiff(oracles[1], oracles[3]), got); diff != "" {
		t.Errorf("Diff %d..%d (-oracle +got):\n%s", gens[1], gens[3], diff)
	}
	_, got = diffAll(t, db, "t", gens[3], gens[1], 3)
	if diff := cmp.Diff(oracleDiff(oracles[3], oracles[1])[:3], got); diff != "" {
		t.Errorf("Diff backwards, limit 3 (-oracle +got):\n%s", diff)
	}
	if _, err := db.Diff("t", gens[0], 0, 0, func(Change) error { return nil }); !errors.Is(err, ErrGenerationNotFound) {
		t.Errorf("Diff from a dropped generation: %v, want ErrGenerationNotFound", err)
	}

	// Roll back to the newest kept one, then back again.
	res, err := db.Rollback("t", 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.From.Generation != gens[3] || res.To.Generation != gens[2] {
		t.Errorf("rollback from %d to %d, want %d to %d", res.From.Generation, res.To.Generation, gens[3], gens[2])
	}
	checkPublished := func(what string, i int) {
		t.Helper()
		_, rows := scanAll(t, db, "t")
		if diff := cmp.Diff(map[string]string(oracles[i]), map[string]string(rows)); diff != "" {
			t.Errorf("%s: rows (-generation %d's oracle +got):\n%s", what, gens[i], diff)
		}
		m, err := db.Table("t")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(metas[i], m); diff != "" {
			t.Errorf("%s: metadata (-as published +now):\n%s", what, diff)
		}
		if mark := checkpointOf(t, db, "t"); mark != fmt.Sprintf("cp-%d", i) {
			t.Errorf("%s: checkpoint %q, want cp-%d", what, mark, i)
		}
	}
	checkPublished("after rollback", 2)
	history, _ = db.History("t")
	if diff := cmp.Diff([]Kept{{gens[3], metas[3]}, {gens[1], metas[1]}}, history); diff != "" {
		t.Errorf("History after rollback: the rolled-back-from generation is kept (-want +got):\n%s", diff)
	}
	if _, err := db.Rollback("t", gens[0]); !errors.Is(err, ErrGenerationNotFound) {
		t.Errorf("Rollback to a dropped generation: %v, want ErrGenerationNotFound", err)
	}
	if _, err := db.Rollback("nope", 0); !errors.Is(err, ErrTableNotFound) {
		t.Errorf("Rollback of a missing table: %v, want ErrTableNotFound", err)
	}

	// A reopen keeps the history; Check finds it sound.
	path := db.Path()
	db.Close()
	if r, err := Check(path, &CheckOptions{PageCheck: testPageCheck}); err != nil || !r.OK() || len(r.Warnings) != 0 || r.Generations != 3 {
		t.Fatalf("Check with kept generations: %+v, %v; want clean with 3 generations", r, err)
	}
	db, err = Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.Cleaned() != 0 {
		t.Errorf("reopen removed %d generations, want none (kept ones are not leftovers)", db.Cleaned())
	}
	if _, err := db.Rollback("t", gens[3]); err != nil {
		t.Fatal(err)
	}
	checkPublished("after rolling forward again", 3)

	// A guard that refuses: nothing published, nothing kept or dropped.
	g, err := db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	writeOps(t, g, oracle{}, randomOps(t, seed+9, 300), 300)
	g.Keep(2)
	refuse := errors.New("too much")
	var seen Changes
	g.Guard(func(c Changes) error { seen = c; return refuse })
	if err := g.Publish(TableMeta{}, nil); !errors.Is(err, refuse) {
		t.Fatalf("Publish with a refusing guard: %v", err)
	}
	if seen.From != gens[3] || seen.Total() == 0 {
		t.Errorf("guard saw %+v, want changes from %d", seen, gens[3])
	}
	if err := g.Abort(); err != nil {
		t.Fatal(err)
	}
	checkPublished("after a refused publish", 3)
	if diff := cmp.Diff([]uint64{gens[1], gens[2], gens[3]}, generationKeys(t, db)); diff != "" {
		t.Errorf("generations after a refused publish (-want +got):\n%s", diff)
	}

	// DropKept removes the history; a table removed without it loses its
	// history at the next read-write open.
	if n, err := db.DropKept("t"); err != nil || n != 2 {
		t.Fatalf("DropKept: %d, %v; want 2", n, err)
	}
	if diff := cmp.Diff([]uint64{gens[3]}, generationKeys(t, db)); diff != "" {
		t.Errorf("generations after DropKept (-want +got):\n%s", diff)
	}
}

// TestKeptOfRemovedTableCleaned: kept generations whose table is removed
// (its entry, checkpoint and published generation, without DropKept) are
// leftovers: Check warns of them and a read-write open removes them.
func TestKeptOfRemovedTableCleaned(t *testing.T) {
	db := openTemp(t)
	seed := uint64(time.Now().UnixNano())
	for i := 0; i < 3; i++ {
		g, err := db.Begin("t")
		if err != nil {
			t.Fatal(err)
		}
		writeOps(t, g, oracle{}, randomOps(t, seed+uint64(i), 100), 100)
		g.Keep(5)
		if err := g.Publish(TableMeta{}, saveMark("t", "x")); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(generationKeys(t, db)); n != 3 {
		t.Fatalf("%d generations, want 3 (one published, two kept)", n)
	}
	err := db.Bolt().Update(func(tx *bolt.Tx) error {
		m, err := decodeMeta([]byte("t"), tx.Bucket(BucketTables).Get([]byte("t")))
		if err != nil {
			return err
		}
		if err := tx.Bucket(BucketGenerations).DeleteBucket(GenerationKey(m.Generation)); err != nil {
			return err
		}
		if err := tx.Bucket(BucketTables).Delete([]byte("t")); err != nil {
			return err
		}
		return tx.Bucket(BucketCheckpoints).DeleteBucket([]byte("t"))
	})
	if err != nil {
		t.Fatal(err)
	}
	path := db.Path()
	db.Close()
	r, err := Check(path, nil)
	if err != nil || !r.OK() || len(r.Warnings) != 3 {
		t.Fatalf("Check: %+v, %v; want OK with the skipped page walk and 2 kept leftovers as warnings", r, err)
	}
	db, err = Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.Cleaned() != 2 || len(generationKeys(t, db)) != 0 {
		t.Errorf("reopen cleaned %d, left %v; want both kept generations gone", db.Cleaned(), generationKeys(t, db))
	}
}

// TestDropTableDropsKept: dropping a table removes its kept generations in
// the same transaction, and leaves another table's history alone.
func TestDropTableDropsKept(t *testing.T) {
	db := openTemp(t)
	seed := uint64(time.Now().UnixNano())
	for i := 0; i < 3; i++ {
		for _, table := range []string{"gone", "stays"} {
			g, err := db.Begin(table)
			if err != nil {
				t.Fatal(err)
			}
			writeOps(t, g, oracle{}, randomOps(t, seed+uint64(i), 100), 100)
			g.Keep(2)
			if err := g.Publish(TableMeta{}, saveMark(table, "x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	staysBefore, err := db.History("stays")
	if err != nil || len(staysBefore) != 2 {
		t.Fatalf("History(stays): %v, %v; want 2 kept", staysBefore, err)
	}
	dropCheckpoint := func(tx *bolt.Tx) error { return tx.Bucket(BucketCheckpoints).DeleteBucket([]byte("gone")) }
	if _, err := db.DropTable("gone", dropCheckpoint); err != nil {
		t.Fatal(err)
	}
	m, err := db.Table("stays")
	if err != nil {
		t.Fatal(err)
	}
	want := []uint64{staysBefore[1].Generation, staysBefore[0].Generation, m.Generation}
	if diff := cmp.Diff(want, generationKeys(t, db)); diff != "" {
		t.Errorf("generations after dropping a table with history (-only the other table's +got):\n%s", diff)
	}
	path := db.Path()
	db.Close()
	if r, err := Check(path, nil); err != nil || !r.OK() || len(r.Warnings) != 1 {
		t.Fatalf("Check after the drop: %+v, %v; want clean but the skipped page walk", r, err)
	}
}
