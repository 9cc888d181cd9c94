package store

import (
	"sync"

	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
)

// CommitKind says which write a Commit was.
type CommitKind int

const (
	// CommitApply: rows changed in place (a follower's or an update's
	// Apply).
	CommitApply CommitKind = iota + 1
	// CommitPublish: a new generation replaced the table's rows (a
	// rebuild, a merged update, an import).
	CommitPublish
	// CommitRollback: an earlier generation was published again; its
	// positions may be behind the table's.
	CommitRollback
	// CommitDrop: the table was dropped.
	CommitDrop
)

// KeyChange is one key's state after a commit: its new value, or deleted.
type KeyChange struct {
	Key     []byte
	Value   []byte // nil when Deleted
	Deleted bool
}

// Commit is what one committed write changed of a table, handed to the
// Observer after the commit: the table's state after it and, when
// Complete, every key it changed. The Changes of an Apply are in the order
// of the writes (a key may come more than once, the last wins); those of a
// Publish or Rollback in key order, one per key. The slices are the
// observer's to keep.
type Commit struct {
	Table      string
	Kind       CommitKind
	Generation uint64          // the table's published generation after it; 0 for a drop
	Positions  map[int32]int64 // its checkpoint's ends after it; nil without a checkpoint
	Changes    []KeyChange
	// Complete is false when the changes were more than the observer's
	// byte bound for the commit (SetObserver) and were not kept: the table
	// changed in ways Changes does not say.
	Complete bool
}

// Observer is told of every committed write that changes a table's rows
// (its Apply, Publish, Rollback and DropTable), after the commit, from the
// writer's goroutine: it must be quick and must not write to the DB.
type Observer func(Commit)

// observing is the DB's observer, guarded for SetObserver.
type observing struct {
	mu    sync.RWMutex
	fn    Observer
	bound func(kind CommitKind, table string) int64
}

// SetObserver sets the DB's observer (nil: none) and bound, the most bytes
// of changes a commit of kind to table may capture for it: a commit whose
// keys and values are more is handed over without them (Commit.Complete
// false); bound 0 captures none. Capturing costs a copy of every changed
// key and value (a publish walks them anyway), so a DB without an
// observer captures nothing.
func (db *DB) SetObserver(fn Observer, bound func(kind CommitKind, table string) int64) {
	db.observe.mu.Lock()
	defer db.observe.mu.Unlock()
	db.observe.fn, db.observe.bound = fn, bound
}

// capture starts the capture of one commit's changes: nil without an
// observer; over at once when its bound is 0.
func (db *DB) capture(kind CommitKind, table string) *capture {
	db.observe.mu.RLock()
	defer db.observe.mu.RUnlock()
	if db.observe.fn == nil {
		return nil
	}
	c := &capture{max: db.observe.bound(kind, table)}
	c.over = c.max <= 0
	return c
}

// capture gathers one commit's changes up to its byte bound. Its methods
// are no-ops on nil.
type capture struct {
	// chunks hold the changes, chunkLen each but the last: a slice grown
	// by append copied each change some times over (most of a capturing
	// publish's cost); changes joins them once, at the exact size.
	chunks [][]KeyChange
	n      int
	bytes  int64
	max    int64
	over   bool
	// slab is where keys and values are copied, a block at a time: two
	// allocations a change made a capturing publish three times slower.
	// Blocks are never reused (the observer keeps the slices).
	slab []byte
}

// captureBlock is the size of a capture's slab blocks; chunkLen the
// changes of a chunk.
const (
	captureBlock = 1 << 20
	chunkLen     = 4096
)

// keep appends ch.
func (c *capture) keep(ch KeyChange) {
	if len(c.chunks) == 0 || len(c.chunks[len(c.chunks)-1]) == chunkLen {
		c.chunks = append(c.chunks, make([]KeyChange, 0, chunkLen))
	}
	last := &c.chunks[len(c.chunks)-1]
	*last = append(*last, ch)
	c.n++
}

// changes returns the captured changes in one slice.
func (c *capture) changes() []KeyChange {
	if len(c.chunks) == 1 {
		return c.chunks[0]
	}
	out := make([]KeyChange, 0, c.n)
	for _, ch := range c.chunks {
		out = append(out, ch...)
	}
	return out
}

// copyBytes copies b into the slab.
func (c *capture) copyBytes(b []byte) []byte {
	if len(b) > captureBlock/4 {
		return clone(b)
	}
	if cap(c.slab)-len(c.slab) < len(b) {
		c.slab = make([]byte, 0, captureBlock)
	}
	n := len(c.slab)
	c.slab = append(c.slab, b...)
	return c.slab[n:len(c.slab):len(c.slab)]
}

func (c *capture) put(key, value []byte) {
	if c == nil || c.over {
		return
	}
	if c.add(len(key) + len(value)) {
		c.keep(KeyChange{Key: c.copyBytes(key), Value: c.copyBytes(value)})
	}
}

func (c *capture) del(key []byte) {
	if c == nil || c.over {
		return
	}
	if c.add(len(key)) {
		c.keep(KeyChange{Key: c.copyBytes(key), Deleted: true})
	}
}

// add counts n bytes (and a fixed cost per change); false once over the
// bound, when the changes are dropped.
func (c *capture) add(n int) bool {
	c.bytes += int64(n) + 32
	if c.bytes > c.max {
		c.over, c.chunks, c.n, c.slab = true, nil, 0, nil
		return false
	}
	return true
}

// reset forgets what a transaction attempt captured (bbolt's Update runs
// its function once, but an error commits nothing).
func (c *capture) reset() {
	if c != nil {
		c.chunks, c.n, c.bytes, c.over, c.slab = nil, 0, 0, c.max <= 0, nil
	}
}

func clone(b []byte) []byte {
	out := make([]byte, len(b))
	copy(out, b)
	return out
}

// positionsIn reads table's checkpoint ends in tx, for a Commit: nil when
// it has none (or it cannot be read: the commit is over, and a reader of
// the table will meet the same error).
func positionsIn(tx *bolt.Tx, table string) map[int32]int64 {
	cp, ok, err := checkpoint.Load(tx, table)
	if err != nil || !ok {
		return nil
	}
	out := make(map[int32]int64, len(cp.Partitions))
	for _, p := range cp.Partitions {
		out[p.Partition] = p.End
	}
	return out
}

// observed hands the observer a commit of table (after it committed): the
// changes c captured, complete unless c went over its bound.
func (db *DB) observed(kind CommitKind, table string, gen uint64, positions map[int32]int64, c *capture) {
	db.observe.mu.RLock()
	fn := db.observe.fn
	db.observe.mu.RUnlock()
	if fn == nil {
		return
	}
	cm := Commit{Table: table, Kind: kind, Generation: gen, Positions: positions}
	if c != nil && !c.over {
		cm.Changes, cm.Complete = c.changes(), true
	}
	fn(cm)
}
