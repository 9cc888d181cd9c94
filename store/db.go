package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// DefaultLockTimeout is how long Open waits for another process's lock when
// Options.LockTimeout is 0.
const DefaultLockTimeout = 3 * time.Second

// Options configures Open. A nil *Options means the defaults.
type Options struct {
	// LockTimeout bounds how long Open waits for another process's lock on
	// the file. 0 means DefaultLockTimeout (3s); a negative value means try
	// once and fail at once. Open never waits forever.
	LockTimeout time.Duration
	// ReadOnly opens the file with a shared lock: many read-only opens may
	// coexist, but none while a read-write open holds the file (and a
	// read-write Open waits for every read-only one to close). A read-only
	// DB refuses Begin, performs no cleanup, and never creates the file.
	ReadOnly bool
}

// DB is one open kmaterialize file. Its methods are safe for concurrent use;
// bbolt allows one write transaction at a time and any number of readers.
type DB struct {
	bolt     *bolt.DB
	path     string
	readOnly bool
	cleaned  int
}

// Open opens the database at path, creating it (mode 0600) unless
// opts.ReadOnly. A read-write Open takes the file's exclusive lock, creates
// the buckets of a new file, checks FormatVersion, and removes every
// generation that no published table points at: the leftovers of a rebuild
// that crashed or was killed before publishing (see Cleaned).
//
// Errors: *LockedError (ErrLocked) when the lock is not free within
// LockTimeout; an error wrapping fs.ErrNotExist when a read-only open finds no
// file or a read-write open finds no parent directory; ErrFormat for a file
// that is not a kmaterialize database of this version.
func Open(path string, opts *Options) (*DB, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	timeout := o.LockTimeout
	switch {
	case timeout == 0:
		timeout = DefaultLockTimeout
	case timeout < 0:
		// bbolt treats 0 as "wait forever"; anything at or below its 50ms
		// retry interval makes it give up after the first attempt.
		timeout = time.Millisecond
	}

	if o.ReadOnly {
		// bbolt opens read-only files without O_CREATE, but check first so
		// the error says what is wrong in our terms.
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no database at %s (nothing has been built there yet): %w", path, fs.ErrNotExist)
		}
	}

	bdb, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:  timeout,
		ReadOnly: o.ReadOnly,
		// A rebuild frees a whole generation (often ~1M rows) at each
		// publish, so the freelist gets large. NoFreelistSync skips writing
		// it at every commit (bbolt rebuilds it by scanning pages on a
		// read-write open), and the hashmap freelist allocates pages in
		// roughly constant time where the array freelist is linear in its
		// size. Neither weakens durability: data and meta pages are still
		// fsynced at every commit.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		// Reserve 1 GiB of address space for the mmap up front (not memory,
		// not disk): every time bbolt grows its mapping it must wait for
		// readers and remap, which a fresh rebuild would otherwise do
		// several times during its first commits.
		InitialMmapSize: initialMmapSize(o.ReadOnly),
	})
	if err != nil {
		return nil, openError(path, timeout, err)
	}
	db := &DB{bolt: bdb, path: path, readOnly: o.ReadOnly}
	if o.ReadOnly {
		err = bdb.View(db.checkFormat)
	} else {
		err = bdb.Update(db.initAndClean)
	}
	if err != nil {
		_ = bdb.Close()
		return nil, err
	}
	return db, nil
}

func openError(path string, timeout time.Duration, err error) error {
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return &LockedError{Path: path, Timeout: timeout}
	case errors.Is(err, fs.ErrNotExist):
		dir := filepath.Dir(path)
		if _, serr := os.Stat(dir); errors.Is(serr, fs.ErrNotExist) {
			return fmt.Errorf("cannot create database %s: directory %s does not exist: %w", path, dir, err)
		}
		return fmt.Errorf("open database %s: %w", path, err)
	case errors.Is(err, bolterrors.ErrInvalid), errors.Is(err, bolterrors.ErrVersionMismatch),
		errors.Is(err, bolterrors.ErrChecksum):
		return fmt.Errorf("open database %s: not a kmaterialize database, or corrupt (%w): %w", path, err, ErrFormat)
	default:
		return fmt.Errorf("open database %s: %w", path, err)
	}
}

// checkFormat verifies the format version, if the file has one. A file
// without a meta bucket is an empty file a writer has not initialised yet;
// reads of it find no tables.
func (db *DB) checkFormat(tx *bolt.Tx) error {
	meta := tx.Bucket(BucketMeta)
	if meta == nil {
		return nil
	}
	v := meta.Get(KeyFormatVersion)
	if v == nil {
		return nil
	}
	got, ok := decodeUint64(v)
	if !ok || got != FormatVersion {
		return fmt.Errorf("open database %s: format version %x, this build reads %d: %w", db.path, v, FormatVersion, ErrFormat)
	}
	return nil
}

// initAndClean creates the top-level buckets and the format version of a new
// file, and removes unpublished generations. It runs in one transaction: a
// crash during it leaves the file as it was before the Open.
func (db *DB) initAndClean(tx *bolt.Tx) error {
	if err := db.checkFormat(tx); err != nil {
		return err
	}
	for _, name := range [][]byte{BucketMeta, BucketTables, BucketGenerations, BucketCheckpoints} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("initialise %s: bucket %s: %w", db.path, name, err)
		}
	}
	meta := tx.Bucket(BucketMeta)
	if meta.Get(KeyFormatVersion) == nil {
		if err := meta.Put(KeyFormatVersion, GenerationKey(FormatVersion)); err != nil {
			return fmt.Errorf("initialise %s: %w", db.path, err)
		}
	}

	published := make(map[uint64]bool)
	err := tx.Bucket(BucketTables).ForEach(func(k, v []byte) error {
		m, err := decodeMeta(k, v)
		if err != nil {
			return err
		}
		published[m.Generation] = true
		return nil
	})
	if err != nil {
		return fmt.Errorf("open database %s: %w", db.path, err)
	}
	gens := tx.Bucket(BucketGenerations)
	var orphans [][]byte
	c := gens.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v != nil {
			continue // not a bucket; nothing of ours, leave it
		}
		gen, ok := decodeUint64(k)
		if ok && published[gen] {
			continue
		}
		orphans = append(orphans, append([]byte(nil), k...))
	}
	// Deleting inside the cursor loop would disturb it; delete afterwards.
	// A crash here rolls back the whole transaction: the orphans are still
	// there and the next Open removes them.
	for _, k := range orphans {
		if err := gens.DeleteBucket(k); err != nil {
			return fmt.Errorf("open database %s: remove unpublished generation %x: %w", db.path, k, err)
		}
	}
	db.cleaned = len(orphans)
	return nil
}

// Cleaned reports how many unpublished generations (left by a rebuild that
// crashed or was killed) the read-write Open removed. It is always 0 for a
// read-only DB.
func (db *DB) Cleaned() int { return db.cleaned }

// Close closes the file and releases its lock. Generations not yet published
// stay in the file until the next read-write Open removes them.
func (db *DB) Close() error {
	if err := db.bolt.Close(); err != nil {
		return fmt.Errorf("close database %s: %w", db.path, err)
	}
	return nil
}

// Path returns the path the DB was opened with.
func (db *DB) Path() string { return db.path }

// ReadOnly reports whether the DB was opened with Options.ReadOnly.
func (db *DB) ReadOnly() bool { return db.readOnly }

// Bolt returns the underlying bbolt database, for package checkpoint and for
// tests. Writing to it directly bypasses every rule of this package.
func (db *DB) Bolt() *bolt.DB { return db.bolt }

// View runs fn in a read-only bbolt transaction, for reads that must be
// consistent with the tables (for example a table's checkpoint).
func (db *DB) View(fn func(tx *bolt.Tx) error) error { return db.bolt.View(fn) }

// initialMmapSize is 1 GiB for writers on 64-bit platforms, 0 (bbolt's
// default) for read-only opens, which never grow the file.
func initialMmapSize(readOnly bool) int {
	if readOnly || strconv.IntSize < 64 {
		return 0
	}
	return 1 << 30
}
