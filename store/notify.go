package store

import (
	"sync"

	"github.com/kmaterialize/kmaterialize/checkpoint"
)

// notifier tells waiters that a table changed: after every committed write
// that changes what a table's readers see (Apply, Publish, Rollback,
// DropTable), the channel Changed handed out for the table is closed. A
// waiter takes the channel before it reads, so a commit between its read
// and its wait is never missed; it then reads again (in a new transaction:
// nobody waits holding one). Nothing is queued and nothing blocks the
// writer: a notification is a close of at most one channel per table.
// The zero value is ready to use.
//
// A change feed (issue 23, next) hangs off the same calls: notify is where
// a commit's table is known, once, after the commit.
type notifier struct {
	mu     sync.Mutex
	tables map[string]chan struct{} // tables someone waits on, until their next change
	closed bool                     // Close was called: Changed hands out closed channels
}

// Changed returns a channel that is closed after the next committed write
// that changes table (its rows, its metadata or its checkpoint: a
// follower's or an update's Apply, a Publish, a Rollback, a DropTable), or
// once the DB is closed. Take it before reading, then read, then wait on
// it: a change in between closes it. It costs nothing until that change
// (one channel per table, shared by all its waiters).
func (db *DB) Changed(table string) <-chan struct{} {
	n := &db.notify
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if n.tables == nil {
		n.tables = map[string]chan struct{}{}
	}
	ch, ok := n.tables[table]
	if !ok {
		ch = make(chan struct{})
		n.tables[table] = ch
	}
	return ch
}

// changed wakes table's waiters; call it after the commit.
func (db *DB) changed(table string) {
	n := &db.notify
	n.mu.Lock()
	defer n.mu.Unlock()
	if ch, ok := n.tables[table]; ok {
		close(ch)
		delete(n.tables, table)
	}
}

// closeNotify wakes every waiter, for Close.
func (db *DB) closeNotify() {
	n := &db.notify
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ch := range n.tables {
		close(ch)
	}
	n.tables, n.closed = nil, true
}

// Positions returns the table's positions as of the snapshot, from the
// checkpoint committed with it: per partition, the next offset the table
// would apply (checkpoint.Partition.End). ok is false for a table without
// a checkpoint.
func (s *Snapshot) Positions() (positions map[int32]int64, ok bool, err error) {
	cp, ok, err := checkpoint.Load(s.Tx, s.Meta.Name)
	if err != nil || !ok {
		return nil, ok, err
	}
	positions = make(map[int32]int64, len(cp.Partitions))
	for _, p := range cp.Partitions {
		positions[p.Partition] = p.End
	}
	return positions, true, nil
}
