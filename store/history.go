package store

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
)

// A table's history: the generations a publish keeps instead of dropping
// (Generation.Keep), what each publish changed (TableMeta.Changes), a
// rollback to a kept generation (DB.Rollback) and the keys two generations
// differ in (DB.Diff).
//
// A kept generation is a generation bucket in state StateKept that holds,
// besides its rows and indexes, the table's metadata (KeyGenerationMeta) and
// a copy of its checkpoint as they were while it was published. Package
// checkpoint keeps, restores and drops that copy (checkpoint.Keep, Restore,
// Drop) in the transaction store hands it: the checkpoint's layout, the
// copy's included, has that one owner.

// ErrGenerationNotFound is returned (as a *GenerationNotFoundError) by
// Rollback and Diff when the generation asked for is neither the table's
// published generation nor one of its kept ones, or when none is kept.
var ErrGenerationNotFound = errors.New("generation not found")

// GenerationNotFoundError names the table, the generation asked for (0 when
// the caller asked for "the latest kept") and the generations it has.
type GenerationNotFoundError struct {
	Table      string
	Generation uint64
	Published  uint64   // the published generation
	Kept       []uint64 // the kept generations, newest first
}

func (e *GenerationNotFoundError) Error() string {
	have := "none kept"
	if len(e.Kept) > 0 {
		have = fmt.Sprintf("kept: %v", e.Kept)
	}
	if e.Generation == 0 {
		return fmt.Sprintf("table %q keeps no earlier generation (published %d, %s): %v", e.Table, e.Published, have, ErrGenerationNotFound)
	}
	return fmt.Sprintf("table %q has no generation %d (published %d, %s): %v", e.Table, e.Generation, e.Published, have, ErrGenerationNotFound)
}

// Is reports whether target is ErrGenerationNotFound.
func (e *GenerationNotFoundError) Is(target error) bool { return target == ErrGenerationNotFound }

// Keep makes Publish keep the table's previous generation, with its
// metadata and checkpoint, instead of dropping it, and keep n generations
// in all: the previous one and the newest n-1 of those kept before. n <= 0 (the default) drops the previous
// generation and leaves kept ones alone. Call it before Publish.
func (g *Generation) Keep(n int) { g.keep = max(n, 0) }

// Guard sets fn to run inside Publish's transaction once the changes
// against the previous generation are counted: an error from fn refuses the
// publish (nothing is committed) and Publish returns it wrapped. Call it
// before Publish.
func (g *Generation) Guard(fn func(Changes) error) { g.guard = fn }

// genBucket returns generation gen's bucket, or nil.
func genBucket(tx *bolt.Tx, gen uint64) *bolt.Bucket {
	gens := tx.Bucket(BucketGenerations)
	if gens == nil {
		return nil
	}
	return gens.Bucket(GenerationKey(gen))
}

// generationRows returns the rows bucket of generation gen, or nil.
func generationRows(tx *bolt.Tx, gen uint64) *bolt.Bucket {
	if gb := genBucket(tx, gen); gb != nil {
		return gb.Bucket(BucketRows)
	}
	return nil
}

// compareRows walks old (nil: no previous generation) and cur in key order
// with one cursor each, counting keys added, removed and changed, and
// returns those and cur's number of keys. It holds no key in memory but
// what capt (nil: none) captures of the changes, up to its bound.
func compareRows(old, cur *bolt.Bucket, capt *capture) (Changes, int64) {
	var ch Changes
	var n int64
	walkDiff(old, cur, func(op DiffOp, k, _, v []byte) bool {
		switch op {
		case OpAdded:
			ch.Added++
			capt.put(k, v)
		case OpRemoved:
			ch.Removed++
			capt.del(k)
		case OpChanged:
			ch.Changed++
			capt.put(k, v)
		}
		return true
	}, func() { n++ })
	return ch, n
}

// DiffOp says how a key differs between two generations.
type DiffOp string

// Values of DiffOp.
const (
	OpAdded   DiffOp = "added"   // in the newer generation only
	OpRemoved DiffOp = "removed" // in the older generation only
	OpChanged DiffOp = "changed" // in both, with different values
)

// walkDiff merges old and cur (either may be nil: no rows) in key order and
// calls fn for each key that differs, until fn returns false. seen, if not
// nil, is called once per key of cur.
func walkDiff(old, cur *bolt.Bucket, fn func(op DiffOp, k, oldV, newV []byte) bool, seen func()) {
	var oc, nc *bolt.Cursor
	var ok, ov, nk, nv []byte
	if old != nil {
		oc = old.Cursor()
		ok, ov = oc.First()
	}
	if cur != nil {
		nc = cur.Cursor()
		nk, nv = nc.First()
	}
	for ok != nil || nk != nil {
		c := 0
		switch {
		case ok == nil:
			c = 1
		case nk == nil:
			c = -1
		default:
			c = bytes.Compare(ok, nk)
		}
		switch {
		case c < 0: // only in old
			if !fn(OpRemoved, ok, nonNil(ov), nil) {
				return
			}
			ok, ov = oc.Next()
		case c > 0: // only in cur
			if seen != nil {
				seen()
			}
			if !fn(OpAdded, nk, nil, nonNil(nv)) {
				return
			}
			nk, nv = nc.Next()
		default:
			if seen != nil {
				seen()
			}
			if !bytes.Equal(ov, nv) && !fn(OpChanged, nk, nonNil(ov), nonNil(nv)) {
				return
			}
			ok, ov = oc.Next()
			nk, nv = nc.Next()
		}
	}
}

func nonNil(v []byte) []byte {
	if v == nil {
		return []byte{}
	}
	return v
}

// keepGeneration turns table's published generation gen into a kept one:
// it stores metaRaw (the table's metadata as stored in BucketTables) and,
// through checkpoint.Keep, a copy of the table's checkpoint in the
// generation's bucket, and marks it StateKept. The caller then points the
// table at another generation and replaces its checkpoint, in the same
// transaction.
func keepGeneration(tx *bolt.Tx, table string, gen uint64, metaRaw []byte) error {
	gb := tx.Bucket(BucketGenerations).Bucket(GenerationKey(gen))
	if gb == nil {
		return fmt.Errorf("%w: table %q: published generation %d is missing", ErrCorrupt, table, gen)
	}
	if err := gb.Put(KeyGenerationMeta, bytes.Clone(metaRaw)); err != nil {
		return fmt.Errorf("keep generation %d of table %q: %w", gen, table, err)
	}
	if err := checkpoint.Keep(tx, table, gb); err != nil {
		return fmt.Errorf("keep generation %d of table %q: %w", gen, table, err)
	}
	if err := gb.Put(KeyGenerationState, []byte(StateKept)); err != nil {
		return fmt.Errorf("keep generation %d of table %q: %w", gen, table, err)
	}
	return nil
}

// Kept is one kept generation of a table: its number and the table's
// metadata as it was while the generation was published.
type Kept struct {
	Generation uint64
	Meta       TableMeta
}

// KeptGenerations returns table's kept generations in tx, newest (highest
// number) first.
func KeptGenerations(tx *bolt.Tx, table string) ([]Kept, error) {
	gens := tx.Bucket(BucketGenerations)
	if gens == nil {
		return nil, nil
	}
	var out []Kept
	c := gens.Cursor()
	for k, v := c.Last(); k != nil; k, v = c.Prev() {
		if v != nil {
			continue
		}
		gb := gens.Bucket(k)
		if string(gb.Get(KeyGenerationState)) != StateKept || string(gb.Get(KeyGenerationTable)) != table {
			continue
		}
		n, ok := decodeUint64(k)
		if !ok {
			continue
		}
		m, err := decodeMeta([]byte(table), gb.Get(KeyGenerationMeta))
		if err != nil {
			return nil, fmt.Errorf("kept generation %d: %w", n, err)
		}
		out = append(out, Kept{Generation: n, Meta: m})
	}
	return out, nil
}

// KeptCheckpoint returns the checkpoint of table kept with generation gen
// in tx, as it was while gen was published; ok is false if gen is not there
// or keeps none.
func KeptCheckpoint(tx *bolt.Tx, table string, gen uint64) (cp checkpoint.Checkpoint, ok bool, err error) {
	return checkpoint.LoadKept(genBucket(tx, gen), table)
}

// History returns table's kept generations, newest first; none is not an
// error. A missing table is a *TableNotFoundError.
func (db *DB) History(table string) ([]Kept, error) {
	var out []Kept
	err := db.view(func(tx *bolt.Tx) error {
		var err error
		_, out, err = db.lookupHistory(tx, table)
		return err
	})
	return out, err
}

// lookupHistory returns table's metadata and its kept generations (newest
// first) in tx; a missing table is a *TableNotFoundError.
func (db *DB) lookupHistory(tx *bolt.Tx, table string) (TableMeta, []Kept, error) {
	cur, _, err := db.lookup(tx, table)
	if err != nil {
		return TableMeta{}, nil, err
	}
	kept, err := KeptGenerations(tx, table)
	return cur, kept, err
}

// pruneKept keeps n of table's kept generations and drops the others,
// returning how many it dropped. It keeps first the generation just
// replaced (last, 0 for none: after a rollback it may be older than other
// kept ones, and it is the most recently published), then the newest by
// number.
func pruneKept(tx *bolt.Tx, table string, n int, last uint64) (int, error) {
	kept, err := KeptGenerations(tx, table)
	if err != nil {
		return 0, err
	}
	if i := slices.IndexFunc(kept, func(k Kept) bool { return k.Generation == last }); i > 0 {
		k := kept[i]
		copy(kept[1:i+1], kept[:i])
		kept[0] = k
	}
	dropped := 0
	for i := n; i < len(kept); i++ {
		if err := tx.Bucket(BucketGenerations).DeleteBucket(GenerationKey(kept[i].Generation)); err != nil {
			return dropped, fmt.Errorf("drop kept generation %d of table %q: %w", kept[i].Generation, table, err)
		}
		dropped++
	}
	return dropped, nil
}

// DropKept removes every kept generation of table in tx and returns how many
// it removed: what removing a table must do with its history (a read-write
// Open removes the kept generations of a table that no longer exists
// anyway).
func DropKept(tx *bolt.Tx, table string) (int, error) {
	return pruneKept(tx, table, 0, 0)
}

// DropKept removes every kept generation of table in one transaction.
func (db *DB) DropKept(table string) (int, error) {
	if db.readOnly {
		return 0, fmt.Errorf("drop the kept generations of table %q in %s: %w", table, db.path, ErrReadOnly)
	}
	var n int
	err := db.update(func(tx *bolt.Tx) error {
		var err error
		n, err = DropKept(tx, table)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("drop the kept generations of table %q in %s: %w", table, db.path, err)
	}
	return n, nil
}

// notFound builds the *GenerationNotFoundError for gen of table.
func notFound(table string, gen, published uint64, kept []Kept) error {
	e := &GenerationNotFoundError{Table: table, Generation: gen, Published: published}
	for _, k := range kept {
		e.Kept = append(e.Kept, k.Generation)
	}
	return e
}

// RollbackResult says what a rollback did.
type RollbackResult struct {
	// From is the table's metadata before the rollback; its generation is
	// now kept.
	From TableMeta
	// To is the table's metadata now: the kept generation's, as it was
	// published.
	To TableMeta
}

// Rollback makes gen, a kept generation of table, the published one again,
// in one transaction: the table's metadata and checkpoint become those kept
// with gen, and the generation published until then is kept in its place
// (with its own metadata and checkpoint), so a rollback can be rolled back.
// gen 0 means the newest kept generation. A crash leaves the table as it was
// before the call or after it, never between.
//
// Errors: a *TableNotFoundError; a *GenerationNotFoundError when gen is not
// kept for table (or none is).
func (db *DB) Rollback(table string, gen uint64) (RollbackResult, error) {
	var res RollbackResult
	if db.readOnly {
		return res, fmt.Errorf("roll back table %q in %s: %w", table, db.path, ErrReadOnly)
	}
	capt := db.capture(CommitRollback, table)
	defer capt.discard()          // a failed rollback's spooled changes
	var positions map[int32]int64 // after the commit, for the observer
	err := db.update(func(tx *bolt.Tx) error {
		capt.reset()
		cur, kept, err := db.lookupHistory(tx, table)
		if err != nil {
			return err
		}
		if gen == 0 && len(kept) > 0 {
			gen = kept[0].Generation
		}
		i := slices.IndexFunc(kept, func(k Kept) bool { return k.Generation == gen })
		if i < 0 || gen == 0 {
			return notFound(table, gen, cur.Generation, kept)
		}
		tables := tx.Bucket(BucketTables)
		curRaw := bytes.Clone(tables.Get([]byte(table)))
		gb := tx.Bucket(BucketGenerations).Bucket(GenerationKey(gen))
		toRaw := bytes.Clone(gb.Get(KeyGenerationMeta))
		// The published generation takes the current metadata and
		// checkpoint, then the kept one gives its own back.
		if err := keepGeneration(tx, table, cur.Generation, curRaw); err != nil {
			return err
		}
		if err := tables.Put([]byte(table), toRaw); err != nil {
			return err
		}
		if err := checkpoint.Restore(tx, table, gb); err != nil {
			return fmt.Errorf("generation %d: %w", gen, err)
		}
		if err := checkpoint.Drop(gb); err != nil {
			return fmt.Errorf("generation %d: %w", gen, err)
		}
		if err := gb.Delete(KeyGenerationMeta); err != nil {
			return err
		}
		if err := gb.Put(KeyGenerationState, []byte(StatePublished)); err != nil {
			return err
		}
		res.From, res.To = cur, kept[i].Meta
		if capt != nil {
			compareRows(generationRows(tx, cur.Generation), generationRows(tx, gen), capt)
			positions = positionsIn(tx, table)
		}
		return nil
	})
	if err != nil {
		var nf *TableNotFoundError
		var gnf *GenerationNotFoundError
		if errors.As(err, &nf) || errors.As(err, &gnf) {
			return res, err
		}
		return res, fmt.Errorf("roll back table %q in %s to generation %d: %w", table, db.path, gen, err)
	}
	db.changed(table)
	db.observed(CommitRollback, table, gen, positions, capt)
	return res, nil
}

// Change is one key that differs between two generations. Old is nil for
// OpAdded, New nil for OpRemoved. The slices are valid only during the
// call to Diff's fn.
type Change struct {
	Key      []byte
	Op       DiffOp
	Old, New []byte
}

// DiffRange is the pair of generations a Diff compared.
type DiffRange struct {
	From, To uint64
}

// Diff calls fn for each key that differs between generations from and to
// of table, in ascending key order, walking both with one cursor each in
// one read transaction; it stops after limit keys (limit <= 0: no limit) or
// at fn's first error, which it returns unchanged. to 0 means the published
// generation; from 0 means the generation to replaced (its
// Changes.From), which must still be kept. Either may be the published
// generation or a kept one.
//
// Errors: a *TableNotFoundError; a *GenerationNotFoundError for a
// generation that is neither published nor kept for table.
func (db *DB) Diff(table string, from, to uint64, limit int, fn func(c Change) error) (DiffRange, error) {
	var r DiffRange
	err := db.view(func(tx *bolt.Tx) error {
		cur, kept, err := db.lookupHistory(tx, table)
		if err != nil {
			return err
		}
		metaOf := func(gen uint64) (TableMeta, bool) {
			if gen == cur.Generation {
				return cur, true
			}
			for _, k := range kept {
				if k.Generation == gen {
					return k.Meta, true
				}
			}
			return TableMeta{}, false
		}
		if to == 0 {
			to = cur.Generation
		}
		toMeta, ok := metaOf(to)
		if !ok {
			return notFound(table, to, cur.Generation, kept)
		}
		if from == 0 && toMeta.Changes != nil {
			from = toMeta.Changes.From
		}
		if _, ok := metaOf(from); !ok {
			return notFound(table, from, cur.Generation, kept)
		}
		r = DiffRange{From: from, To: to}
		oldRows, newRows := generationRows(tx, from), generationRows(tx, to)
		if oldRows == nil || newRows == nil {
			return fmt.Errorf("%w: table %q: generation %d or %d has no rows bucket", ErrCorrupt, table, from, to)
		}
		n := 0
		var fnErr error
		walkDiff(oldRows, newRows, func(op DiffOp, k, o, v []byte) bool {
			if limit > 0 && n >= limit {
				return false
			}
			n++
			c := Change{Key: k, Op: op}
			if op != OpAdded {
				c.Old = o
			}
			if op != OpRemoved {
				c.New = v
			}
			fnErr = fn(c)
			return fnErr == nil
		}, nil)
		return fnErr
	})
	return r, err
}
