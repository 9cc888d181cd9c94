package store

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Compaction under an open DB (the daemon's POST /v1/compact): the file is
// rewritten without its free pages while the DB stays open, in two steps
// with two locks every transaction of this package takes shared:
//
//   - gate, taken by every write transaction: CompactOnline holds it
//     exclusively while it copies the file into a new one beside it
//     (bbolt's Compact, read transactions of the old file), so that
//     nothing commits to the old file meanwhile. Writers wait (they are
//     paused, not failed); readers go on reading the old file.
//   - swap, taken by every transaction: CompactOnline holds it exclusively
//     only to rename the new file over the path and put its bbolt handle
//     in place of the old one. Readers wait for that, milliseconds, and
//     never fail.
//
// The new file is opened (and locked) before the rename, so that no other
// process can take the path's lock in between; one that was waiting for the
// old file's lock notices the rename when it gets it (Open starts again).
//
// No transaction of this package runs inside another (a write inside a
// read, a read inside a write): a shared lock taken twice by one goroutine
// would deadlock behind a waiting CompactOnline.

// update is bolt's Update under gate and swap.
func (db *DB) update(fn func(tx *bolt.Tx) error) error {
	db.gate.RLock()
	defer db.gate.RUnlock()
	db.swap.RLock()
	defer db.swap.RUnlock()
	return db.bolt.Update(fn)
}

// handle is the bbolt handle, read under swap (outside a transaction).
func (db *DB) handle() *bolt.DB {
	db.swap.RLock()
	defer db.swap.RUnlock()
	return db.bolt
}

// OnlineCompactResult is what CompactOnline did and how long its steps
// took: Paused is how long writers waited (the copy and the swap), Swap
// how long readers did.
type OnlineCompactResult struct {
	Before, After int64 // file sizes in bytes
	Paused, Swap  time.Duration
}

// CompactOnline rewrites the open database's file without its free pages,
// as Compact does, while the DB serves: writers pause for the copy,
// readers only for the swap (see above). Before the rename any failure
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
	fi, err := os.Stat(db.path)
	if err != nil {
		return res, fmt.Errorf("compact %s: %w", db.path, err)
	}
	res.Before = fi.Size()
	dir, base := filepath.Dir(db.path), filepath.Base(db.path)
	tmp, err := os.CreateTemp(dir, base+CompactTempPrefix+"*")
	if err != nil {
		return res, fmt.Errorf("compact %s: create the new file in %s: %w", db.path, dir, err)
	}
	tmpPath := tmp.Name()
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
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		_ = tmp.Close()
		return res, fmt.Errorf("compact %s: %s: %w", db.path, tmpPath, err)
	}
	if err := tmp.Close(); err != nil {
		return res, fmt.Errorf("compact %s: %s: %w", db.path, tmpPath, err)
	}
	// The old file's read transactions, beside the readers'.
	if err := guard(db.path, func() error { return compactInto(db.bolt, tmpPath) }); err != nil {
		return res, fmt.Errorf("compact %s into %s: %w", db.path, tmpPath, err)
	}
	opts := *db.bopts
	opts.OpenFile, opts.PreLoadFreelist = nil, false
	opts.Timeout = time.Second // nobody else has this file
	if nfi, err := os.Stat(tmpPath); err == nil {
		res.After = nfi.Size()
	}
	if err := guard(tmpPath, func() error {
		var err error
		next, err = bolt.Open(tmpPath, 0o600, &opts)
		return err
	}); err != nil {
		return res, fmt.Errorf("compact %s: open the compacted file %s: %w", db.path, tmpPath, err)
	}

	db.swap.Lock()
	swapped := time.Now()
	if err := os.Rename(tmpPath, db.path); err != nil {
		db.swap.Unlock()
		return res, fmt.Errorf("compact %s: rename %s over it: %w", db.path, tmpPath, err)
	}
	renamed = true
	old := db.bolt
	db.bolt = next
	db.swap.Unlock()
	res.Swap = time.Since(swapped)
	// No transaction of the old handle is open (swap was held), and it
	// is no longer reachable.
	if err := old.Close(); err != nil {
		return res, fmt.Errorf("compact %s: close the file it replaced: %w", db.path, err)
	}
	if err := syncDir(dir); err != nil {
		return res, fmt.Errorf("compact %s: the compacted file is in place, but syncing directory %s failed: %w", db.path, dir, err)
	}
	return res, nil
}
