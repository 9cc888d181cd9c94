package store

import (
	"bytes"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/kmaterialize/kmaterialize/internal/failpoint"
)

// Generation is a new, unpublished version of one table. Nothing written to
// it is visible to readers until Publish commits; if Publish never commits
// (Abort, an error, a crash, a kill), the previous version stays in place and
// the generation's bucket is removed by Abort or by the next read-write Open.
//
// A Generation is not safe for concurrent use: call Write, Publish and Abort
// from one goroutine. Generations of different tables may be built at the
// same time; their write transactions take turns.
type Generation struct {
	db    *DB
	table string
	id    uint64
	key   []byte
	done  bool // published or aborted
	arena arena
	// runs are the run files SpillRun wrote, oldest first (runfile.go).
	runs []string
	// keys is the number of rows, counted as they are written (Write,
	// WriteMerged): Publish records it instead of walking the tree
	// (bbolt's Bucket.Stats reads every page of a table).
	keys int64
	// keep and guard are set by Keep and Guard (history.go) for Publish.
	keep  int
	guard func(Changes) error
	// pacer, set by Pace (sortedwrite.go), shares the merge's CPU.
	pacer Pacer
}

// Begin creates a new, empty generation of table in its own committed
// transaction. Generation numbers increase monotonically within a file and
// are never reused.
func (db *DB) Begin(table string) (*Generation, error) {
	if db.readOnly {
		return nil, fmt.Errorf("begin a generation of table %q in %s: %w", table, db.path, ErrReadOnly)
	}
	if table == "" || len(table) > bolt.MaxKeySize {
		return nil, fmt.Errorf("begin a generation: table name %q: %w", table, ErrInvalidName)
	}
	g := &Generation{db: db, table: table}
	err := db.update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(BucketMeta)
		gens := tx.Bucket(BucketGenerations)
		if meta == nil || gens == nil {
			return fmt.Errorf("%w: top-level buckets missing", ErrCorrupt)
		}
		var seq uint64
		if v := meta.Get(KeyGenerationSeq); v != nil {
			var ok bool
			if seq, ok = decodeUint64(v); !ok {
				return fmt.Errorf("%w: generation counter is %x", ErrCorrupt, v)
			}
		}
		seq++
		g.id = seq
		g.key = GenerationKey(seq)
		if err := meta.Put(KeyGenerationSeq, g.key); err != nil {
			return err
		}
		gb, err := gens.CreateBucket(g.key)
		if err != nil {
			return err
		}
		if err := gb.Put(KeyGenerationTable, []byte(table)); err != nil {
			return err
		}
		if err := setGenerationState(gb, StateBuilding, 0); err != nil {
			return err
		}
		if _, err := gb.CreateBucket(BucketRows); err != nil {
			return err
		}
		_, err = gb.CreateBucket(BucketIndex)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("begin a generation of table %q in %s: %w", table, db.path, err)
	}
	// A crash from here on leaves an empty unpublished generation, removed by
	// the next read-write Open.
	return g, nil
}

// ID returns the generation number.
func (g *Generation) ID() uint64 { return g.id }

// Table returns the name of the table the generation was begun for.
func (g *Generation) Table() string { return g.table }

// Write runs fn in one read-write bbolt transaction over the generation. The
// Rows handed to fn writes rows into the generation; its Index method
// returns private namespaces stored inside the generation (never returned
// as rows, dropped with it). If fn returns an error, nothing it wrote is
// committed and the error is returned as is. The Rows, and any KV from
// Index, must not be used after fn returns.
//
// Put copies the value (into an arena reused across Write calls), so callers
// may pass slices they will reuse. Get returns a non-nil empty slice for a
// present empty value and nil for an absent key; its result is valid until
// fn returns.
//
// Commit cost dominates: write in batches (10k-100k rows per Write), not a
// row per call. Each committed Write is fsynced.
func (g *Generation) Write(fn func(r Rows) error) error {
	if g.done {
		return fmt.Errorf("write generation %d of table %q: %w", g.id, g.table, ErrGenerationDone)
	}
	// bbolt keeps references to values until the transaction ends; the arena
	// is reset only after it has.
	defer g.arena.reset()
	var fnErr error
	var added int64 // rows the transaction added (deleted: negative)
	err := g.db.update(func(tx *bolt.Tx) error {
		gb := g.bucket(tx)
		if gb == nil {
			return ErrGenerationGone
		}
		rows := gb.Bucket(BucketRows)
		index := gb.Bucket(BucketIndex)
		if rows == nil || index == nil {
			return fmt.Errorf("%w: generation %d has no rows or index bucket", ErrCorrupt, g.id)
		}
		// Folds write each transaction's rows in ascending key order
		// (fold.Latest does), and a rebuild rewrites most pages at every
		// commit: full pages mean half the pages to split, write and
		// rewrite of the default 50%.
		rows.FillPercent = rowsFillPercent
		t := &genTable{kv: kv{b: rows, arena: &g.arena, count: &added}, index: index}
		if err := fn(t); err != nil {
			fnErr = err
			return err
		}
		failpoint.Hit(failpoint.FoldCommitBefore) // a crash here leaves the old table; the next open removes the unpublished generation
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("write generation %d of table %q to %s: %w", g.id, g.table, g.db.path, err)
	}
	// Committed: the rows it added count.
	g.keys += added
	failpoint.Hit(failpoint.FoldCommitAfter) // a crash here leaves the old table; the next open removes the unpublished generation and its committed rows
	return nil
}

func (g *Generation) bucket(tx *bolt.Tx) *bolt.Bucket {
	gens := tx.Bucket(BucketGenerations)
	if gens == nil {
		return nil
	}
	return gens.Bucket(g.key)
}

// rowsBucket returns the generation's bucket and its rows bucket in tx:
// ErrGenerationGone when the generation was dropped, ErrCorrupt when its
// rows bucket is missing.
func (g *Generation) rowsBucket(tx *bolt.Tx) (gb, rows *bolt.Bucket, err error) {
	if gb = g.bucket(tx); gb == nil {
		return nil, nil, ErrGenerationGone
	}
	if rows = gb.Bucket(BucketRows); rows == nil {
		return nil, nil, fmt.Errorf("%w: generation %d has no rows bucket", ErrCorrupt, g.id)
	}
	return gb, rows, nil
}

// HasRows reports whether the unpublished generation has at least one row.
// It is cheap (one cursor step), so a caller can check before Publish that
// it is not about to replace a table with an empty one.
func (g *Generation) HasRows() (bool, error) {
	if g.done {
		return false, fmt.Errorf("read generation %d of table %q: %w", g.id, g.table, ErrGenerationDone)
	}
	has := false
	err := g.db.boltView(func(tx *bolt.Tx) error {
		_, rows, err := g.rowsBucket(tx)
		if err != nil {
			return err
		}
		k, _ := rows.Cursor().First()
		has = k != nil
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("read generation %d of table %q: %w", g.id, g.table, err)
	}
	return has, nil
}

// rowsFillPercent is how full bbolt packs the rows bucket's pages when it
// splits them. bbolt's default (0.5) suits random inserts into a long-lived
// tree; a generation is written in sorted runs and never updated after
// publication.
const rowsFillPercent = 1.0

// Publish makes the generation the table's published version, in one bbolt
// transaction that:
//
//  1. checks the generation's bucket still exists;
//  2. sets meta.Generation to ID(), meta.Keys to the number of rows, and
//     meta.Name to the table name if empty (a different name is an error);
//  3. writes meta into the tables bucket, pointing the table at this
//     generation;
//  4. calls hook(tx) if not nil: the caller saves its checkpoint there, so
//     rows and the positions they came from commit together;
//  5. deletes the table's previous generation, or keeps it (see Keep).
//
// Between 2 and 3 it walks the previous generation and this one in key
// order (two cursors) and records in meta.Changes how many keys were added,
// removed and changed; a guard set with Guard may refuse the publish then.
//
// If any step fails, hook included, nothing is committed: readers keep the
// previous version and the generation stays unpublished (call Abort, or let
// the next read-write Open remove it). Publish on a published or aborted
// generation returns ErrGenerationDone.
func (g *Generation) Publish(meta TableMeta, hook func(tx *bolt.Tx) error) error {
	if g.done {
		return fmt.Errorf("publish generation %d of table %q: %w", g.id, g.table, ErrGenerationDone)
	}
	if meta.Name == "" {
		meta.Name = g.table
	}
	if meta.Name != g.table {
		return fmt.Errorf("publish generation %d of table %q as %q: %w", g.id, g.table, meta.Name, ErrInvalidName)
	}
	var hookErr, guardErr error
	// deleted is the previous generation this publish deletes or retires
	// (claimed: deletes); settled once the transaction is over, whatever
	// its outcome.
	var deleted uint64
	claimed, committed := false, false
	defer func() {
		if deleted != 0 && g.db.pins.settle(deleted, claimed, committed) {
			// Its Pagers let go before the publish ended. A failure here
			// leaves it retired: the next read-write open removes it.
			_ = g.db.dropRetired(deleted)
		}
	}()
	capt := g.db.capture(CommitPublish, g.table)
	defer capt.discard()          // a failed publish's spooled changes
	var positions map[int32]int64 // after the commit, for the observer
	err := g.db.update(func(tx *bolt.Tx) error {
		capt.reset()
		gb, rows, err := g.rowsBucket(tx)
		if err != nil {
			return err
		}
		tables := tx.Bucket(BucketTables)
		var prev uint64
		var prevRows *bolt.Bucket
		var old TableMeta
		oldRaw := tables.Get([]byte(g.table))
		if oldRaw != nil {
			if old, err = decodeMeta([]byte(g.table), oldRaw); err != nil {
				return err
			}
			prev = old.Generation
			if prev != g.id {
				if prevRows = generationRows(tx, prev); prevRows == nil {
					return fmt.Errorf("%w: table %q: published generation %d is missing", ErrCorrupt, g.table, prev)
				}
			}
		}

		meta.Generation = g.id
		meta.Keys = g.keys
		// What changed: one walk of both generations in key order, with
		// a cursor each (no key held in memory). A first publish has
		// nothing to compare: every row is added, and its count is the
		// one kept while writing (no walk of the new tree).
		ch := Changes{Added: g.keys}
		if prevRows != nil || capt != nil {
			// With an observer, a first publish is walked too: its
			// changes are every row.
			ch, meta.Keys = compareRows(prevRows, rows, capt)
		}
		ch.From, ch.FromKeys = prev, old.Keys
		meta.Changes = &ch
		if g.guard != nil {
			if err := g.guard(ch); err != nil {
				guardErr = err
				return err
			}
		}
		if err := setGenerationState(gb, StatePublished, uint64(meta.Keys)); err != nil {
			return err
		}
		meta.BuiltAt = meta.BuiltAt.UTC()
		enc, err := encodeMeta(meta)
		if err != nil {
			return err
		}
		// From here to the commit, a crash leaves the old state: bbolt
		// writes these pages to free space and switches to them only by
		// the final meta page write. After the commit, the new state.
		if g.keep > 0 && prev != 0 && prev != g.id {
			// Before the hook replaces the table's checkpoint: the kept
			// generation takes the metadata and checkpoint it was
			// published with.
			if err := keepGeneration(tx, g.table, prev, oldRaw); err != nil {
				return err
			}
		}
		if err := tables.Put([]byte(g.table), enc); err != nil {
			return err
		}
		if hook != nil {
			if err := hook(tx); err != nil {
				hookErr = err
				return err
			}
		}
		if capt != nil {
			positions = positionsIn(tx, g.table)
		}
		failpoint.Hit(failpoint.PublishCommitBefore) // a crash here leaves the old table and checkpoint; the next open removes the unpublished generation
		// Dropping the old generation in the same transaction: a crash
		// either keeps it published (no commit) or has it gone and
		// unreferenced (commit). Never a table pointing at nothing.
		// A generation a Pager reads is retired instead (pager.go): no
		// table points at it either way, and the next read-write open
		// removes a retired one a crash left.
		if prev != 0 && prev != g.id && g.keep == 0 {
			deleted = prev
			if claimed = g.db.pins.claim(prev); !claimed {
				if err := retire(tx, prev); err != nil {
					return fmt.Errorf("retire previous generation %d: %w", prev, err)
				}
			} else if err := tx.Bucket(BucketGenerations).DeleteBucket(GenerationKey(prev)); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
				return fmt.Errorf("drop previous generation %d: %w", prev, err)
			}
			failpoint.Hit(failpoint.PublishDropOld) // a crash here leaves the old table and its generation whole (the deletion is uncommitted); the next open removes the new one
		}
		if g.keep > 0 {
			// Kept generations beyond the newest g.keep go, in the same
			// transaction: a crash keeps them all (no commit) or has
			// them gone (commit).
			if _, err := pruneKept(tx, g.table, g.keep, prev); err != nil {
				return err
			}
			failpoint.Hit(failpoint.PublishDropOld) // a crash here leaves the old table, its kept generations and the old one published, all whole (uncommitted); the next open removes the new one
		}
		return nil
	})
	committed = err == nil
	if guardErr != nil {
		return fmt.Errorf("publish generation %d of table %q refused: %w", g.id, g.table, guardErr)
	}
	if hookErr != nil {
		return fmt.Errorf("publish generation %d of table %q: hook: %w", g.id, g.table, hookErr)
	}
	if err != nil {
		return fmt.Errorf("publish generation %d of table %q to %s: %w", g.id, g.table, g.db.path, err)
	}
	failpoint.Hit(failpoint.PublishCommitAfter) // a crash here leaves the new table and no old generation: nothing to clean
	g.db.changed(g.table)
	g.db.observed(CommitPublish, g.table, g.id, positions, capt)
	g.removeRuns()
	g.done = true
	g.arena.free()
	return nil
}

// Abort deletes the unpublished generation. It is idempotent, and a no-op
// after a successful Publish, so `defer g.Abort()` is the usual pattern.
func (g *Generation) Abort() error {
	g.removeRuns()
	if g.done {
		return nil
	}
	err := g.db.update(func(tx *bolt.Tx) error {
		// Never delete a generation a table points at, whatever happened.
		if tables := tx.Bucket(BucketTables); tables != nil {
			if v := tables.Get([]byte(g.table)); v != nil {
				if m, err := decodeMeta([]byte(g.table), v); err == nil && m.Generation == g.id {
					return nil
				}
			}
		}
		// A crash before the commit leaves the generation, which the next
		// read-write Open removes.
		err := tx.Bucket(BucketGenerations).DeleteBucket(g.key)
		if errors.Is(err, bolterrors.ErrBucketNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("abort generation %d of table %q: %w", g.id, g.table, err)
	}
	g.done = true
	g.arena.free()
	return nil
}

// genTable is the Rows of one Write transaction.
type genTable struct {
	kv
	index   *bolt.Bucket
	indexes map[string]*kv
}

// Index returns the private namespace name inside the generation,
// creating it.
func (t *genTable) Index(name string) (KV, error) {
	if k, ok := t.indexes[name]; ok {
		return k, nil
	}
	if name == "" {
		return nil, fmt.Errorf("index name: %w", ErrInvalidName)
	}
	b, err := t.index.CreateBucketIfNotExists([]byte(name))
	if err != nil {
		return nil, fmt.Errorf("index %q: %w", name, err)
	}
	if t.indexes == nil {
		t.indexes = make(map[string]*kv)
	}
	k := &kv{b: b, arena: t.arena}
	t.indexes[name] = k
	return k, nil
}

// kv is a KV over one bucket of a write transaction.
type kv struct {
	b     *bolt.Bucket
	arena *arena // holds the copies of the values until the commit
	// count, when not nil, is the net number of keys Put added and Delete
	// removed (the rows bucket's: the generation counts its rows as they
	// are written).
	count *int64
}

// Get returns the value for key: nil if absent, a non-nil (possibly empty)
// slice if present.
func (k *kv) Get(key []byte) ([]byte, error) {
	if len(key) == 0 {
		return nil, nil
	}
	// bbolt's Bucket.Get may return nil for a present empty value; a cursor
	// tells the two apart.
	ck, v := k.b.Cursor().Seek(key)
	if ck == nil || !bytes.Equal(ck, key) {
		return nil, nil
	}
	if v == nil {
		return []byte{}, nil
	}
	return v, nil
}

// Put stores value under key, copying it.
func (k *kv) Put(key, value []byte) error {
	if len(key) == 0 {
		return ErrEmptyKey
	}
	if k.count != nil && !k.has(key) {
		*k.count++
	}
	return k.b.Put(key, k.arena.copy(value))
}

// Delete removes key; absent keys are not an error.
func (k *kv) Delete(key []byte) error {
	if len(key) == 0 {
		return nil
	}
	if k.count != nil && k.has(key) {
		*k.count--
	}
	return k.b.Delete(key)
}

// has reports whether key is in the bucket (a value, not a nested bucket:
// the rows bucket has none).
func (k *kv) has(key []byte) bool {
	ck, _ := k.b.Cursor().Seek(key)
	return ck != nil && bytes.Equal(ck, key)
}

// arena hands out copies of values that live until reset, in large chunks
// so a batch of puts costs a few allocations, not one per row.
type arena struct {
	chunks [][]byte
	cur    int // index of the chunk being filled
}

const arenaChunk = 1 << 20

func (a *arena) copy(v []byte) []byte {
	n := len(v)
	if n == 0 {
		return []byte{}
	}
	if n > arenaChunk/4 {
		return bytes.Clone(v) // large value: its own allocation
	}
	for {
		if a.cur == len(a.chunks) {
			a.chunks = append(a.chunks, make([]byte, 0, arenaChunk))
		}
		c := a.chunks[a.cur]
		if cap(c)-len(c) >= n {
			start := len(c)
			c = append(c, v...)
			a.chunks[a.cur] = c
			return c[start : start+n : start+n]
		}
		a.cur++
	}
}

// reset makes every chunk reusable. Only call it when no transaction can
// still refer to the copies.
func (a *arena) reset() {
	for i := range a.chunks {
		a.chunks[i] = a.chunks[i][:0]
	}
	a.cur = 0
}

func (a *arena) free() { *a = arena{} }

// compile-time check that genTable satisfies Rows.
var _ Rows = (*genTable)(nil)
