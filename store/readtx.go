package store

import (
	"os"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// readTxs tracks the read transactions this package opens, so the age of
// the oldest can be reported: a long-lived read transaction holds back
// bbolt's remap (every writer waits) and keeps the pages freed since it
// began from being reused. Transactions opened on Bolt() directly are not
// tracked. The zero value is ready to use.
type readTxs struct {
	mu   sync.Mutex
	seq  uint64
	open map[uint64]time.Time
}

func (r *readTxs) begin() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open == nil {
		r.open = map[uint64]time.Time{}
	}
	r.seq++
	r.open[r.seq] = time.Now()
	return r.seq
}

func (r *readTxs) end(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.open, id)
}

// boltView is bolt's View, tracked; every read transaction of this package
// goes through it.
func (db *DB) boltView(fn func(tx *bolt.Tx) error) error {
	h := db.acquire()
	defer h.mu.RUnlock()
	id := db.readTxs.begin()
	defer db.readTxs.end(id)
	return h.b.View(fn)
}

// OldestReadTx reports when the oldest read transaction this package has
// open began, and false when none is open.
func (db *DB) OldestReadTx() (time.Time, bool) {
	db.readTxs.mu.Lock()
	defer db.readTxs.mu.Unlock()
	var oldest time.Time
	for _, at := range db.readTxs.open {
		if oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
	}
	return oldest, !oldest.IsZero()
}

// FileStats is what the file looks like now, for the daemon's gauges.
type FileStats struct {
	// Size is the file's size in bytes.
	Size int64
	// FreePages are pages on the freelist, reusable by the next writes.
	FreePages int
	// PendingPages are pages freed by a write that a read transaction
	// still open may see: reusable only once it ends.
	PendingPages int
	// OpenReadTxs counts bbolt's open read transactions, tracked or not.
	OpenReadTxs int
}

// FileStats returns the file's size and bbolt's page counts.
func (db *DB) FileStats() (FileStats, error) {
	fi, err := os.Stat(db.path)
	if err != nil {
		return FileStats{}, err
	}
	st := db.handle().Stats()
	return FileStats{Size: fi.Size(), FreePages: st.FreePageN, PendingPages: st.PendingPageN, OpenReadTxs: st.OpenTxN}, nil
}
