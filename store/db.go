package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// PageSize is the bbolt page size of a file Open creates. A file keeps the
// page size it was created with (bbolt reads it from the meta pages), so
// files made before this choice keep their 4 KiB pages and work alike.
//
// 16 KiB rather than the OS page size (4 KiB here) because a rebuild writes
// a whole table through bbolt's commits, and a commit writes each dirty
// page with one pwrite: a quarter of the pages is a quarter of the
// syscalls, of the branch entries and of the page headers (the measurement
// is in bench/RESULTS.md, "Measurements the code's choices rest on"). The
// cost is on small writes: an in-place update or a follower's transaction
// rewrites 16 KiB for each leaf it touches instead of 4 KiB. Reads map the file and touch only the
// bytes they compare, whatever the page size.
const PageSize = 16 << 10

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
	// DB refuses Begin, performs no cleanup or migration, writes no holder
	// record, and never creates the file.
	ReadOnly bool
	// Command describes this process in the holder record a read-write
	// Open writes (see Holder), e.g. "kmaterialize rebuild --db x --table y".
	// Never put secrets in it: it is a plain file beside the database.
	Command string
	// PageCheck, if not nil, is run before a read-write Open maps the file:
	// see PageCheck. Without it, a read-write Open of a file with a damaged
	// page may end the process (bbolt's freelist scan panics in a goroutine
	// of its own).
	PageCheck PageCheck
	// Socket is the API socket of a daemon holding the file read-write,
	// written into the holder record (Holder.Socket) so that a busy message
	// names it and CLI commands can find the daemon. Empty for commands.
	Socket string
	// InitialMmapSize is the address space a read-write Open maps up
	// front, in bytes. 0 means 1 GiB (on 64-bit platforms). Tests set it
	// small so that a commit must grow the mapping (bbolt's remap, which
	// waits for every read transaction); a production caller has no reason
	// to.
	InitialMmapSize int

	// pageWalk opens only to walk the pages (CheckPages): a read-only open
	// that scans the pages for the freelist as a read-write open does, and
	// skips the format version check (pages do not depend on it).
	pageWalk bool
}

// DB is one open kmaterialize file. Its methods are safe for concurrent use;
// bbolt allows one write transaction at a time and any number of readers.
type DB struct {
	cur       atomic.Pointer[boltHandle] // the open bbolt file; replaced by CompactOnline (online.go)
	bopts     *bolt.Options              // what it was opened with (CompactOnline opens the new file so)
	gate      sync.RWMutex               // write transactions shared, CompactOnline exclusive (online.go)
	compactMu sync.Mutex                 // one CompactOnline at a time
	path      string
	readOnly  bool
	cleaned   int
	files     int        // leftover run and compaction files a read-write Open removed
	runsMu    sync.Mutex // run files: creating RunsDir vs removing it (runfile.go)
	version   uint64     // the file's format version when opened
	migrated  uint64     // the version a read-write Open migrated from; 0 if none
	holder    *Holder
	readTxs   readTxs   // read transactions this package opened (readtx.go)
	pins      pinSet    // generations pinned by Pagers (pager.go)
	notify    notifier  // wakes the waiters of a table that changed (notify.go)
	observe   observing // the change feed's observer of commits (observe.go)
}

// reopenLimit bounds how often Open starts again because the path was
// renamed while it waited for the lock.
const reopenLimit = 5

// Open opens the database at path, creating it (mode 0600) unless
// opts.ReadOnly.
//
// Before bbolt maps the file, Open checks both meta pages and the file's size
// against the page count they record (a *CorruptError if they are damaged),
// and for a read-write open runs opts.PageCheck. Once it holds the lock, it
// checks that path still names the file it locked (a --replace-corrupt or a
// compaction may have renamed it while Open waited) and starts again if not.
// A read-write Open then writes a holder record (HolderPath), creates the
// buckets of a new file, migrates a file of an older FormatVersion (in one
// transaction, see Migrated), and removes every generation that no published
// table points at: the leftovers of a rebuild that crashed or was killed
// before publishing (see Cleaned), and the run files and compaction
// temporaries such a process left beside the file (see CleanedFiles).
//
// A read-only Open reads a file of an older format version as it is when
// every migration since is marked readable (v1 files are: v2 only adds to
// generation buckets), and otherwise refuses it with ErrFormat and a hint to
// run a read-write command first.
//
// Errors: *LockedError (ErrLocked) when the lock is not free within
// LockTimeout, naming the holder from its record; *CorruptError (ErrCorrupt)
// for a damaged file; an error wrapping fs.ErrNotExist when a read-only open
// finds no file (or an empty one) or a read-write open finds no parent
// directory; ErrFormat for a file that is not a bbolt database or was written
// by a newer format version.
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
	for attempt := 1; ; attempt++ {
		db, again, err := open(path, o, timeout)
		if err != nil || !again {
			return db, err
		}
		if attempt == reopenLimit {
			return nil, fmt.Errorf("open database %s: the file was replaced %d times while waiting for its lock", path, attempt)
		}
	}
}

// open is one attempt of Open. again is true when the path no longer names
// the file it locked: the caller starts over.
func open(path string, o Options, timeout time.Duration) (_ *DB, again bool, _ error) {
	rep, err := preflight(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !o.ReadOnly:
		// bbolt creates it; a missing directory is reported below.
	case errors.Is(err, fs.ErrNotExist):
		return nil, false, notExist(path, false)
	case err != nil:
		return nil, false, err
	case rep.empty && o.ReadOnly:
		return nil, false, notExist(path, true)
	}
	if !o.ReadOnly && o.PageCheck != nil && err == nil && !rep.empty {
		if err := o.PageCheck(path, timeout, false); err != nil {
			return nil, false, err
		}
	}

	// bbolt opens the file itself; keep its descriptor to compare with
	// what path names once the lock is held.
	var locked *os.File
	bopts := &bolt.Options{
		Timeout:  timeout,
		ReadOnly: o.ReadOnly,
		// A rebuild frees a whole generation (often ~1M rows) at each
		// publish, so the freelist gets large. NoFreelistSync skips writing
		// it at every commit (bbolt rebuilds it by scanning pages on a
		// read-write open), and the hashmap freelist allocates pages in
		// roughly constant time where the array freelist is linear in its
		// size. Neither weakens durability: data and meta pages are still
		// fsynced at every commit. The scan is why a read-write open runs
		// PageCheck first: it panics in a goroutine on a damaged page.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		// Reserve 1 GiB of address space for the mmap up front (not memory,
		// not disk): every time bbolt grows its mapping it must wait for
		// readers and remap, which a fresh rebuild would otherwise do
		// several times during its first commits.
		InitialMmapSize: initialMmapSize(o.ReadOnly, o.InitialMmapSize),
		// Only used when bbolt creates the file.
		PageSize:        PageSize,
		PreLoadFreelist: o.pageWalk,
		OpenFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, mode)
			locked = f
			return f, err
		},
	}
	var bdb *bolt.DB
	err = guard(path, func() error {
		var err error
		bdb, err = bolt.Open(path, 0o600, bopts)
		return err
	})
	if err != nil {
		return nil, false, openError(path, timeout, err)
	}
	if same, err := sameFile(path, locked); err != nil || !same {
		_ = bdb.Close()
		if err != nil {
			return nil, false, err
		}
		return nil, true, nil
	}

	db := &DB{bopts: bopts, path: path, readOnly: o.ReadOnly}
	db.cur.Store(&boltHandle{b: bdb})
	switch {
	case o.pageWalk:
	case o.ReadOnly:
		err = db.view(db.checkFormat)
	default:
		// Without a record (a directory this process may not write to),
		// the database still opens; busy messages then name no holder.
		h := Holder{PID: os.Getpid(), Command: o.Command, Socket: o.Socket, Since: time.Now().UTC().Truncate(time.Second)}
		if writeHolder(path, h) == nil {
			db.holder = &h
		}
		err = guard(path, func() error { return bdb.Update(db.initAndClean) })
		if err == nil {
			db.files, err = cleanFiles(path)
		}
	}
	if err != nil {
		_ = db.Close()
		return nil, false, err
	}
	return db, false, nil
}

// sameFile reports whether path still names the file f.
func sameFile(path string, f *os.File) (bool, error) {
	if f == nil {
		return false, fmt.Errorf("open database %s: bbolt opened no file", path)
	}
	held, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("open database %s: %w", path, err)
	}
	now, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // renamed away, nothing in its place yet: start over
	}
	if err != nil {
		return false, fmt.Errorf("open database %s: %w", path, err)
	}
	return os.SameFile(held, now), nil
}

func openError(path string, timeout time.Duration, err error) error {
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return &LockedError{Path: path, Timeout: timeout, Holder: ReadHolder(path)}
	case errors.Is(err, ErrCorrupt):
		return err
	case errors.Is(err, fs.ErrNotExist):
		dir := filepath.Dir(path)
		if _, serr := os.Stat(dir); errors.Is(serr, fs.ErrNotExist) {
			return fmt.Errorf("cannot create database %s: directory %s does not exist: %w", path, dir, err)
		}
		return fmt.Errorf("open database %s: %w", path, err)
	case errors.Is(err, bolterrors.ErrInvalid), errors.Is(err, bolterrors.ErrVersionMismatch),
		errors.Is(err, bolterrors.ErrChecksum):
		return &CorruptError{Path: path, Reason: fmt.Sprintf("bbolt cannot open it: %v", err), Err: err}
	default:
		return fmt.Errorf("open database %s: %w", path, err)
	}
}

// readVersion returns the file's format version; 0 for a file a writer has
// not initialised yet (no meta bucket or no version).
func (db *DB) readVersion(tx *bolt.Tx) (uint64, error) {
	meta := tx.Bucket(BucketMeta)
	if meta == nil {
		return 0, nil
	}
	v := meta.Get(KeyFormatVersion)
	if v == nil {
		return 0, nil
	}
	got, ok := decodeUint64(v)
	if !ok || got == 0 {
		return 0, &CorruptError{Path: db.path, Reason: fmt.Sprintf("format version is %x, not a version number", v)}
	}
	if got > FormatVersion {
		return got, fmt.Errorf("open database %s: format version %d was written by a newer kmaterialize; this build reads versions up to %d "+
			"(use the newer build, or rebuild into another file): %w", db.path, got, FormatVersion, ErrFormat)
	}
	return got, nil
}

// checkFormat is the read-only Open's version check: a newer file is
// refused, an older one read as it is if its layout allows.
func (db *DB) checkFormat(tx *bolt.Tx) error {
	v, err := db.readVersion(tx)
	if err != nil {
		return err
	}
	db.version = v
	if v != 0 && v < FormatVersion && !readableVersion(v) {
		return fmt.Errorf("open database %s: format version %d is older than this build's %d and must be migrated first: "+
			"run a read-write command on it (kmaterialize rebuild): %w", db.path, v, FormatVersion, ErrFormat)
	}
	return nil
}

// initAndClean creates the top-level buckets and the format version of a new
// file, migrates an older one, and removes unpublished generations (and kept
// generations of tables that no longer exist). It runs
// in one transaction: a crash during it leaves the file as it was before the
// Open.
func (db *DB) initAndClean(tx *bolt.Tx) error {
	version, err := db.readVersion(tx)
	if err != nil {
		return err
	}
	for _, name := range [][]byte{BucketMeta, BucketTables, BucketGenerations, BucketCheckpoints} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("initialise %s: bucket %s: %w", db.path, name, err)
		}
	}
	meta := tx.Bucket(BucketMeta)
	switch {
	case version == 0:
		if err := meta.Put(KeyFormatVersion, GenerationKey(FormatVersion)); err != nil {
			return fmt.Errorf("initialise %s: %w", db.path, err)
		}
	case version < FormatVersion:
		if err := migrate(tx, version); err != nil {
			return fmt.Errorf("open database %s: %w", db.path, err)
		}
		db.migrated = version
	}
	db.version = FormatVersion

	published := make(map[uint64]bool)
	tables := tx.Bucket(BucketTables)
	err = tables.ForEach(func(k, v []byte) error {
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
		// A kept generation of a table that exists is history, not a
		// leftover; one whose table is gone (dropped) is removed.
		if gb := gens.Bucket(k); ok && string(gb.Get(KeyGenerationState)) == StateKept {
			if t := gb.Get(KeyGenerationTable); t != nil && tables.Get(t) != nil {
				continue
			}
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

// Migrated reports the format version a read-write Open migrated the file
// from, or 0 if it did not migrate it.
func (db *DB) Migrated() uint64 { return db.migrated }

// FormatVersion reports the file's format version: FormatVersion after a
// read-write Open, the stored one after a read-only Open (0 for a file no
// writer has initialised).
func (db *DB) FormatVersion() uint64 { return db.version }

// Cleaned reports how many unpublished generations (left by a rebuild that
// crashed or was killed) the read-write Open removed. It is always 0 for a
// read-only DB.
func (db *DB) Cleaned() int { return db.cleaned }

// CleanedFiles reports how many files a crashed rebuild, compaction or
// daemon left beside the database (run files, a compaction's temporary
// file, spool files) the read-write Open removed. Always 0 for a read-only
// DB.
func (db *DB) CleanedFiles() int { return db.files }

// Close closes the file and releases its lock, removing the holder record
// first (while the lock still guarantees the record is this process's).
// Generations not yet published stay in the file until the next read-write
// Open removes them.
func (db *DB) Close() error {
	var herr error
	if db.holder != nil {
		herr = removeHolder(db.path, *db.holder)
		db.holder = nil
	}
	db.closeNotify()
	h := db.cur.Load()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.b.Close(); err != nil {
		return fmt.Errorf("close database %s: %w", db.path, err)
	}
	if herr != nil {
		return fmt.Errorf("close database %s: %w", db.path, herr)
	}
	return nil
}

// Path returns the path the DB was opened with.
func (db *DB) Path() string { return db.path }

// ReadOnly reports whether the DB was opened with Options.ReadOnly.
func (db *DB) ReadOnly() bool { return db.readOnly }

// Bolt returns the underlying bbolt database, for package checkpoint and for
// tests. Writing to it directly bypasses every rule of this package.
func (db *DB) Bolt() *bolt.DB { return db.handle() }

// View runs fn in a read-only bbolt transaction, for reads that must be
// consistent with the tables (for example a table's checkpoint).
func (db *DB) View(fn func(tx *bolt.Tx) error) error { return db.view(fn) }

// initialMmapSize is 1 GiB for writers on 64-bit platforms (or what the
// caller asked for), 0 (bbolt's default) for read-only opens, which never
// grow the file.
func initialMmapSize(readOnly bool, asked int) int {
	switch {
	case readOnly:
		return 0
	case asked > 0:
		return asked
	case strconv.IntSize < 64:
		return 0
	}
	return 1 << 30
}
