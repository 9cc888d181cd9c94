package store

import (
	"bytes"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// ErrGenerationChanged is returned (as a *GenerationChangedError) by Apply
// when the table's published generation is not the one the caller read its
// positions from: a rebuild published meanwhile, and applying records read
// from the old generation's checkpoint onto the new one could apply them
// twice or skip some.
var ErrGenerationChanged = errors.New("published generation changed")

// GenerationChangedError names the generation the caller expected and the
// one published. It matches ErrGenerationChanged.
type GenerationChangedError struct {
	Table     string
	Expected  uint64
	Published uint64
}

func (e *GenerationChangedError) Error() string {
	return fmt.Sprintf("table %q: published generation is %d, not %d (a rebuild published meanwhile): %v",
		e.Table, e.Published, e.Expected, ErrGenerationChanged)
}

// Is reports whether target is ErrGenerationChanged.
func (e *GenerationChangedError) Is(target error) bool { return target == ErrGenerationChanged }

// ApplyStats is what one Apply's fn changed in the rows (private indexes are
// not counted).
type ApplyStats struct {
	Added   int64 // rows inserted (keys that were absent)
	Removed int64 // rows deleted (keys that were present)
}

// Apply changes table's published generation in place, in one read-write
// bbolt transaction: an incremental update or a followed table applies its
// new records this way, so readers see the table before or after the whole
// batch, never a part of it.
//
// In that transaction, fn gets the generation's rows and private indexes as
// a Rows. Unlike a fresh generation's Write, pages are filled with
// bbolt's default fill percent: keys land anywhere in the tree, and full
// pages would split at every insert. Then meta, if not nil, may adjust the
// table's metadata: m.Keys is already adjusted for the rows fn added and
// removed; m.Name and m.Generation must not change. Then hook, if not nil,
// runs in the same transaction (the caller saves its checkpoint there, so
// rows and positions commit together). An error from any of them commits
// nothing and is returned wrapped.
//
// gen is the published generation the caller read its positions from. If
// the table now points at another one, Apply returns a
// *GenerationChangedError and changes nothing. A missing table is a
// *TableNotFoundError.
//
// Values given to Put are copied, so callers may reuse their buffers.
func (db *DB) Apply(table string, gen uint64, fn func(r Rows) error, meta func(m *TableMeta) error, hook func(tx *bolt.Tx) error) (ApplyStats, error) {
	var st ApplyStats
	if db.readOnly {
		return st, fmt.Errorf("apply to table %q in %s: %w", table, db.path, ErrReadOnly)
	}
	var a arena // bbolt refers to the values until the commit
	defer a.free()
	var inner error  // fn's, meta's or hook's error, returned as is (wrapped once)
	writing := false // pins.begin called: pins.end once Update is over
	capt := db.capture(CommitApply, table)
	var positions map[int32]int64 // after the commit, for the observer
	defer func() {
		if writing {
			db.pins.end(gen)
		}
	}()
	err := db.update(func(tx *bolt.Tx) error {
		st = ApplyStats{}
		capt.reset()
		m, rows, err := db.lookup(tx, table)
		if err != nil {
			return err
		}
		if m.Generation != gen {
			return &GenerationChangedError{Table: table, Expected: gen, Published: m.Generation}
		}
		if !writing {
			// Before the commit, and again once the transaction is over:
			// see pinSet.begin.
			db.pins.begin(gen)
			writing = true
		}
		gb := tx.Bucket(BucketGenerations).Bucket(GenerationKey(gen))
		index := gb.Bucket(BucketIndex)
		if index == nil {
			return fmt.Errorf("%w: generation %d has no index bucket", ErrCorrupt, gen)
		}
		if m.Keys == 0 {
			// Into no rows, every key is an insert, and the pages bbolt
			// splits them into at the commit are all new: packed full, as
			// a fresh generation's (rowsFillPercent), they are half as
			// many to write now and to rewrite at the next applies. A
			// tree with rows keeps the default, which leaves room for
			// inserts among them.
			rows.FillPercent = rowsFillPercent
		}
		t := &applyTable{genTable: genTable{kv: kv{b: rows, arena: &a}, index: index}, st: &st, capt: capt}
		if err := fn(t); err != nil {
			inner = err
			return err
		}
		m.Keys += st.Added - st.Removed
		if meta != nil {
			name, g := m.Name, m.Generation
			if err := meta(&m); err != nil {
				inner = err
				return err
			}
			if m.Name != name || m.Generation != g {
				return fmt.Errorf("apply to table %q: metadata hook changed the name or generation: %w", table, ErrInvalidName)
			}
		}
		if m.Keys < 0 {
			return fmt.Errorf("%w: table %q would have %d rows", ErrCorrupt, table, m.Keys)
		}
		enc, err := encodeMeta(m)
		if err != nil {
			return err
		}
		if err := tx.Bucket(BucketTables).Put([]byte(table), enc); err != nil {
			return err
		}
		if err := setGenerationState(gb, StatePublished, uint64(m.Keys)); err != nil {
			return err
		}
		if hook != nil {
			if err := hook(tx); err != nil {
				inner = err
				return err
			}
		}
		if capt != nil {
			positions = positionsIn(tx, table)
		}
		return nil
	})
	if inner != nil {
		return ApplyStats{}, fmt.Errorf("apply to table %q: %w", table, inner)
	}
	if err != nil {
		var changed *GenerationChangedError
		var nf *TableNotFoundError
		if errors.As(err, &changed) || errors.As(err, &nf) {
			return ApplyStats{}, err
		}
		return ApplyStats{}, fmt.Errorf("apply to table %q in %s: %w", table, db.path, err)
	}
	db.changed(table)
	db.observed(CommitApply, table, gen, positions, capt)
	return st, nil
}

// applyTable is the Rows of one Apply: the published generation's
// rows, counting the rows its Put and Delete add and remove so that the
// table's key count stays exact without walking the tree.
type applyTable struct {
	genTable
	st   *ApplyStats
	capt *capture // the observer's capture of the changes; nil: none
	// cur is the rows bucket's cursor that has seeks with, made once: a
	// bbolt Get makes a cursor and grows its stack for every key, and
	// an apply asks for every key it writes. Every use is a Seek, which
	// searches from the root again, so the Puts and Deletes between
	// them (which can change the nodes it last stood on) never leave it
	// pointing anywhere stale.
	cur *bolt.Cursor
}

// Put stores value under key, counting key as added if it was absent.
func (t *applyTable) Put(key, value []byte) error {
	if len(key) == 0 {
		return ErrEmptyKey
	}
	if !t.has(key) {
		t.st.Added++
	}
	if err := t.kv.Put(key, value); err != nil {
		return err
	}
	t.capt.put(key, value)
	return nil
}

// Delete removes key, counting it as removed if it was present.
func (t *applyTable) Delete(key []byte) error {
	if len(key) == 0 {
		return nil
	}
	if !t.has(key) {
		return nil
	}
	t.st.Removed++
	if err := t.kv.Delete(key); err != nil {
		return err
	}
	t.capt.del(key)
	return nil
}

// has reports whether key is in the rows bucket (which holds no nested
// bucket).
func (t *applyTable) has(key []byte) bool {
	if t.cur == nil {
		t.cur = t.kv.b.Cursor()
	}
	k, _ := t.cur.Seek(key)
	return k != nil && bytes.Equal(k, key)
}

var _ Rows = (*applyTable)(nil)
