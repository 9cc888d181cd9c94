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
// Complete, every key it changed, in Changes or, for a Publish or Rollback
// past its CaptureBound.Memory, in the file Spool names (Changes nil). The
// Changes of an Apply are in the order of the writes (a key may come more
// than once, the last wins); those of a Publish or Rollback in key order,
// one per key. The slices are the observer's to keep, and so is the
// spool file: the observer removes it (Spool.Remove) when done with it.
type Commit struct {
	Table      string
	Kind       CommitKind
	Generation uint64          // the table's published generation after it; 0 for a drop
	Positions  map[int32]int64 // its checkpoint's ends after it; nil without a checkpoint
	Changes    []KeyChange
	Spool      *Spool // the changes, when spooled; nil when in Changes
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
	bound func(kind CommitKind, table string) CaptureBound
}

// CaptureBound is how much of one commit's changes are captured for the
// observer, counted as the bytes of their keys and values and 32 a change.
type CaptureBound struct {
	// Memory: up to this many bytes are captured in memory (Commit.Changes).
	Memory int64
	// Spool: a Publish's or Rollback's changes past Memory are written to a
	// file in FeedDir (Commit.Spool), up to this many bytes in all: the
	// capture moves what it holds in memory there and goes on in the file.
	// 0: never spooled. An Apply is never spooled: its changes are few,
	// and its commits many.
	Spool int64
}

// SetObserver sets the DB's observer (nil: none) and bound, how much of
// the changes of a commit of kind to table it captures: a commit whose
// changes are more is handed over without them (Commit.Complete false); a
// zero bound captures none. Capturing costs a copy of every changed key
// and value (a publish walks them anyway), so a DB without an observer
// captures nothing.
func (db *DB) SetObserver(fn Observer, bound func(kind CommitKind, table string) CaptureBound) {
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
	b := db.observe.bound(kind, table)
	c := &capture{max: b.Memory}
	if kind == CommitPublish || kind == CommitRollback {
		c.spoolMax, c.dir = b.Spool, FeedDir(db.path)
	}
	c.over = c.max <= 0 && c.spoolMax <= 0
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
	// spoolMax, when more than max, is how many bytes the changes may take
	// in a file in dir; sp is that file once they passed max (and nothing
	// is in memory then).
	spoolMax int64
	dir      string
	sp       *spoolWriter
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
		if c.sp != nil {
			c.spool(key, value, false)
			return
		}
		c.keep(KeyChange{Key: c.copyBytes(key), Value: c.copyBytes(value)})
	}
}

func (c *capture) del(key []byte) {
	if c == nil || c.over {
		return
	}
	if c.add(len(key)) {
		if c.sp != nil {
			c.spool(key, nil, true)
			return
		}
		c.keep(KeyChange{Key: c.copyBytes(key), Deleted: true})
	}
}

// add counts n bytes (and a fixed cost per change); false once over the
// bound, when the changes are dropped. Past the memory bound, a capture
// that may spool moves to its file.
func (c *capture) add(n int) bool {
	c.bytes += int64(n) + 32
	if c.bytes <= c.max || c.sp != nil && c.bytes <= c.spoolMax {
		return true
	}
	if c.sp == nil && c.bytes <= c.spoolMax && c.spill() {
		return true
	}
	c.drop()
	return false
}

// spill moves the changes captured in memory to a new spool file, where
// the later ones go. False if the file could not be made: the commit is
// then handed over incomplete, never failed for its feed.
func (c *capture) spill() bool {
	sp, err := newSpoolWriter(c.dir)
	if err != nil {
		return false
	}
	c.sp = sp
	for _, chunk := range c.chunks {
		for _, ch := range chunk {
			sp.write(ch.Key, ch.Value, ch.Deleted)
		}
	}
	c.chunks, c.n, c.slab = nil, 0, nil
	return true
}

// spool writes one change to the file. A write error shows at the end
// (spoolWriter.finish): the commit is then handed over incomplete.
func (c *capture) spool(key, value []byte, deleted bool) {
	c.sp.write(key, value, deleted)
}

// drop forgets the changes: the capture is over.
func (c *capture) drop() {
	c.over, c.chunks, c.n, c.slab = true, nil, 0, nil
	if c.sp != nil {
		c.sp.discard()
		c.sp = nil
	}
}

// reset forgets what a transaction attempt captured (bbolt's Update runs
// its function once, but an error commits nothing).
func (c *capture) reset() {
	if c != nil {
		c.drop()
		c.bytes, c.over = 0, c.max <= 0 && c.spoolMax <= 0
	}
}

// discard removes the spool file of a capture whose commit failed, or
// that nobody took (a no-op once observed handed it over). Its writers
// defer it.
func (c *capture) discard() {
	if c != nil && c.sp != nil {
		c.sp.discard()
		c.sp = nil
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
		c.discard()
		return
	}
	cm := Commit{Table: table, Kind: kind, Generation: gen, Positions: positions}
	switch {
	case c == nil || c.over:
	case c.sp != nil:
		// The file is written after the commit: what is left in the
		// buffer, then closed.
		sp, err := c.sp.finish()
		c.sp = nil
		cm.Spool, cm.Complete = sp, err == nil
	default:
		cm.Changes, cm.Complete = c.changes(), true
	}
	fn(cm)
}
