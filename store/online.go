package store

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Compaction under an open DB (the daemon's POST /v1/compact): the file is
// rewritten without its free pages while the DB stays open.
//
//   - gate, taken shared by every write transaction: CompactOnline holds
//     it exclusively while it copies the file into a new one beside it
//     (bbolt's Compact, read transactions of the old file) and swaps the
//     new one in, so that nothing commits to the old file meanwhile.
//     Writers wait (they are paused, not failed).
//   - Readers never wait: every transaction takes the current bbolt handle
//     (acquire: its own lock, shared). CompactOnline opens (and locks) the
//     new file, renames it over the path, makes it the current handle, and
//     only then waits for the transactions still open on the old handle,
//     which read the same state from the old file (its inode lives while
//     it is open), before closing it. A transaction that began on the old
//     handle just as it was replaced takes the new one instead.
//
// The new file is opened before the rename, so that no other process can
// take the path's lock in between; one that was waiting for the old
// file's lock notices the rename when it gets it (Open starts again).

// boltHandle is one open bbolt file of the DB: its transactions hold mu
// shared; it is closed under mu exclusively, once it is no longer current.
type boltHandle struct {
	b  *bolt.DB
	mu sync.RWMutex
}

// acquire returns the current handle, held: release it with
// h.mu.RUnlock() once the transaction is over.
func (db *DB) acquire() *boltHandle {
	for {
		h := db.cur.Load()
		h.mu.RLock()
		if db.cur.Load() == h {
			return h
		}
		h.mu.RUnlock() // replaced meanwhile: take the new one
	}
}

// update is bolt's Update under gate, on the current handle.
func (db *DB) update(fn func(tx *bolt.Tx) error) error {
	db.gate.RLock()
	defer db.gate.RUnlock()
	h := db.acquire()
	defer h.mu.RUnlock()
	return h.b.Update(fn)
}

// handle is the current bbolt handle, for what is not a transaction
// (Stats, Info).
func (db *DB) handle() *bolt.DB { return db.cur.Load().b }

// OnlineCompactResult is what CompactOnline did and how long its steps
// took: Paused is how long writers waited (the copy and the swap), Swap
// how long the rename and the switch of handles took (nothing waits for it
// but the writers).
type OnlineCompactResult struct {
	Before, After int64         // file sizes in bytes
	Paused, Swap  time.Duration // Swap: the rename and the handle's switch; no reader waits for it
}

// CompactOnline rewrites the open database's file without its free pages,
// as Compact does, while the DB serves: writers pause for the copy and
// the swap, readers never (see above). Before the rename any failure
// leaves the file as it was and removes the new one; after it, the DB
// reads and writes the compacted file.
func (db *DB) CompactOnline() (res OnlineCompactResult, err error) {
	if db.readOnly {
		return res, fmt.Errorf("compact %s: %w", db.path, ErrReadOnly)
	}
	db.compactMu.Lock()
	defer db.compactMu.Unlock()

	db.gate.Lock()
	paused := time.Now()
	defer func() {
		db.gate.Unlock()
		res.Paused = time.Since(paused)
	}()
	tmpPath, before, after, err := compactBeside(db.cur.Load().b, db.path)
	res.Before, res.After = before, after
	if err != nil {
		return res, err
	}
	dir := filepath.Dir(db.path)
	renamed := false
	var next *bolt.DB
	defer func() {
		if !renamed {
			if next != nil {
				_ = next.Close()
			}
			_ = os.Remove(tmpPath)
		}
	}()
	opts := *db.bopts
	opts.OpenFile, opts.PreLoadFreelist = nil, false
	opts.Timeout = time.Second // nobody else has this file
	if err := guard(tmpPath, func() error {
		var err error
		next, err = bolt.Open(tmpPath, 0o600, &opts)
		return err
	}); err != nil {
		return res, fmt.Errorf("compact %s: open the compacted file %s: %w", db.path, tmpPath, err)
	}

	swapped := time.Now()
	if err := os.Rename(tmpPath, db.path); err != nil {
		return res, fmt.Errorf("compact %s: rename %s over it: %w", db.path, tmpPath, err)
	}
	renamed = true
	old := db.cur.Swap(&boltHandle{b: next})
	res.Swap = time.Since(swapped)
	serr := syncDir(dir)
	// The old handle: closed once the transactions still open on it are
	// over (nothing reaches it after its last one).
	old.mu.Lock()
	cerr := old.b.Close()
	old.mu.Unlock()
	switch {
	case serr != nil:
		return res, fmt.Errorf("compact %s: the compacted file is in place, but syncing directory %s failed: %w", db.path, dir, serr)
	case cerr != nil:
		return res, fmt.Errorf("compact %s: the compacted file is in place, but closing the one it replaced failed: %w", db.path, cerr)
	}
	return res, nil
}
