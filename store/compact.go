package store

import (
	"fmt"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// CompactResult is what Compact did.
type CompactResult struct {
	Before, After int64 // file sizes in bytes
	Cleaned       int   // unpublished generations the open removed first
}

// compactTxBytes is how many bytes of keys and values bbolt's compaction
// copies per transaction.
const compactTxBytes = 64 << 20

// Compact rewrites the database at path without its free pages: it opens it
// read-write (opts as for Open: the exclusive lock, a *LockedError when
// another process holds it, the page check; the open removes unpublished
// generations first), copies every bucket, key and value into a new file in
// the same directory (name CompactTempPrefix, full pages), fsyncs it,
// renames it over path and fsyncs the directory. The rename is the commit
// point: before it, any failure (or a crash) leaves the original untouched
// and the temporary file is removed (by the next read-write Open after a
// crash); after it, path is the compacted file. An Open that was waiting
// for the lock notices the rename and opens the new file.
func Compact(path string, opts *Options) (res CompactResult, err error) {
	db, err := Open(path, opts)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	res.Cleaned = db.Cleaned()
	tmpPath, before, after, err := compactBeside(db.handle(), path)
	res.Before, res.After = before, after
	if err != nil {
		return res, err
	}
	dir := filepath.Dir(path)
	renamed := false
	defer func() {
		if !renamed {
			_ = os.Remove(tmpPath)
		}
	}()
	if err := os.Rename(tmpPath, path); err != nil {
		return res, fmt.Errorf("compact %s: rename %s over it: %w", path, tmpPath, err)
	}
	renamed = true
	if err := syncDir(dir); err != nil {
		return res, fmt.Errorf("compact %s: the compacted file is in place, but syncing directory %s failed: %w", path, dir, err)
	}
	return res, nil
}

// compactBeside copies src, the database at path, into a new file beside
// it (CompactTempPrefix, path's mode, full pages, fsynced) and returns the
// new file's path and both sizes. On an error the new file is removed.
func compactBeside(src *bolt.DB, path string) (tmpPath string, before, after int64, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", 0, 0, fmt.Errorf("compact %s: %w", path, err)
	}
	before = fi.Size()
	dir, base := filepath.Dir(path), filepath.Base(path)
	tmp, err := os.CreateTemp(dir, base+CompactTempPrefix+"*")
	if err != nil {
		return "", before, 0, fmt.Errorf("compact %s: create the new file in %s: %w", path, dir, err)
	}
	name := tmp.Name() // the error returns below clear tmpPath
	tmpPath = name
	defer func() {
		if err != nil {
			_ = os.Remove(name)
		}
	}()
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		_ = tmp.Close()
		return "", before, 0, fmt.Errorf("compact %s: %s: %w", path, tmpPath, err)
	}
	if err := tmp.Close(); err != nil {
		return "", before, 0, fmt.Errorf("compact %s: %s: %w", path, tmpPath, err)
	}
	// src's read transactions: readers of an open DB go on beside them.
	if err := guard(path, func() error { return compactInto(src, tmpPath) }); err != nil {
		return "", before, 0, fmt.Errorf("compact %s into %s: %w", path, tmpPath, err)
	}
	nfi, err := os.Stat(tmpPath)
	if err != nil {
		return "", before, 0, fmt.Errorf("compact %s: %w", path, err)
	}
	return tmpPath, before, nfi.Size(), nil
}

// compactInto copies src into a new bbolt file at path and fsyncs it.
func compactInto(src *bolt.DB, path string) error {
	dst, err := bolt.Open(path, 0o600, &bolt.Options{
		// One fsync at the end (of the file, below) instead of one per
		// transaction: until the rename nothing depends on this file.
		NoSync:         true,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		// The same page size as the original: a compaction rewrites the
		// file, it does not change its format.
		PageSize: src.Info().PageSize,
	})
	if err != nil {
		return err
	}
	err = bolt.Compact(dst, src, compactTxBytes)
	var size int64
	if err == nil {
		err = dst.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil })
	}
	if cerr := dst.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	// bbolt grows a file ahead of its pages (to its mapping's size, or 16
	// MiB beyond); the pages end at size, and nothing reads past them.
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}
