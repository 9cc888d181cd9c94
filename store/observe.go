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
	// byte bound (SetObserver) and were not kept: the table changed in
	// ways Changes does not say.
	Complete bool
}

// Observer is told of every committed write that changes a table's rows
// (its Apply, Publish, Rollback and DropTable), after the commit, from the
// writer's goroutine: it must be quick and must not write to the DB.
type Observer func(Commit)

// observing is the DB's observer, guarded for SetObserver.
type observing struct {
	mu       sync.RWMutex
	fn       Observer
	maxBytes int64
}

// SetObserver sets the DB's observer (nil: none) and the bound of the
// changes one commit hands it: a commit whose keys and values are more
// than maxBytes is handed over without them (Commit.Complete false).
// Capturing costs a copy of every changed key and value, so a DB without
// an observer captures nothing.
func (db *DB) SetObserver(fn Observer, maxBytes int64) {
	db.observe.mu.Lock()
	defer db.observe.mu.Unlock()
	db.observe.fn, db.observe.maxBytes = fn, maxBytes
}

// capture starts the capture of one commit's changes: nil without an
// observer.
func (db *DB) capture() *capture {
	db.observe.mu.RLock()
	defer db.observe.mu.RUnlock()
	if db.observe.fn == nil {
		return nil
	}
	return &capture{max: db.observe.maxBytes}
}

// capture gathers one commit's changes up to its byte bound. Its methods
// are no-ops on nil.
type capture struct {
	changes []KeyChange
	bytes   int64
	max     int64
	over    bool
}

func (c *capture) put(key, value []byte) {
	if c == nil || c.over {
		return
	}
	if c.add(len(key) + len(value)) {
		c.changes = append(c.changes, KeyChange{Key: clone(key), Value: clone(value)})
	}
}

func (c *capture) del(key []byte) {
	if c == nil || c.over {
		return
	}
	if c.add(len(key)) {
		c.changes = append(c.changes, KeyChange{Key: clone(key), Deleted: true})
	}
}

// add counts n bytes (and a fixed cost per change); false once over the
// bound, when the changes are dropped.
func (c *capture) add(n int) bool {
	c.bytes += int64(n) + 32
	if c.max > 0 && c.bytes > c.max {
		c.over, c.changes = true, nil
		return false
	}
	return true
}

// reset forgets what a transaction attempt captured (bbolt's Update runs
// its function once, but an error commits nothing).
func (c *capture) reset() {
	if c != nil {
		c.changes, c.bytes, c.over = nil, 0, false
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
		cm.Changes, cm.Complete = c.changes, true
	}
	fn(cm)
}
