package store

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// A backup is a consistent copy of the whole database file: every table,
// generation, checkpoint and history entry as one read transaction saw
// them (bbolt's Tx.WriteTo: the meta page of that transaction and every
// page it reaches, at disk speed). The copy is a database like the
// original: Open, check and export read it, and restoring is copying it
// back while nothing holds the file.
//
// The read transaction is held for the whole copy. Meanwhile the writers
// go on, except a commit that must grow the file past its mapping: the
// remap waits for every read transaction to end (pager.go), so a backup
// runs at disk speed into a file of its own (beside its output, or in
// SpoolDir through the daemon), never at a client's pace.

// BackupInfo is what a backup copied.
type BackupInfo struct {
	Bytes  int64  // the copy's size
	SHA256 string // of the copy's bytes, hex
	TxID   int    // the read transaction's id: the database's state it is
}

// Backup writes a consistent copy of the database to w in one read
// transaction, hashing it as it goes.
func (db *DB) Backup(w io.Writer) (BackupInfo, error) {
	var info BackupInfo
	h := sha256.New()
	err := db.view(func(tx *bolt.Tx) error {
		info.TxID = tx.ID()
		n, err := tx.WriteTo(io.MultiWriter(w, h))
		info.Bytes = n
		return err
	})
	if err != nil {
		return info, fmt.Errorf("backup of %s: %w", db.path, err)
	}
	info.SHA256 = hex.EncodeToString(h.Sum(nil))
	return info, nil
}

// BackupTempPattern names a backup's file beside its output before its
// rename (os.CreateTemp's pattern, after the output's base name).
const BackupTempPattern = ".backup-*"

// WriteFileAtomic writes the output of fill to path: into a new file in
// path's directory (mode 0600), fsynced, renamed over path, the directory
// fsynced. Until the rename, a failure (or a crash) leaves path as it was
// and removes the new file (a crash leaves it, named path+BackupTempPattern).
// fill gets the file and a hash of what it writes through w.
func WriteFileAtomic(path string, fill func(w io.Writer) error) (err error) {
	dir, base := filepath.Dir(path), filepath.Base(path)
	f, err := os.CreateTemp(dir, base+BackupTempPattern)
	if err != nil {
		return fmt.Errorf("create a file beside %s: %w", path, err)
	}
	tmp := f.Name()
	renamed := false
	defer func() {
		if !renamed {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err := fill(f); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, path, err)
	}
	renamed = true
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("%s is in place, but syncing directory %s failed: %w", path, dir, err)
	}
	return nil
}

// BackupFile writes a backup of db to path (WriteFileAtomic).
func BackupFile(db *DB, path string) (BackupInfo, error) {
	var info BackupInfo
	err := WriteFileAtomic(path, func(w io.Writer) error {
		var err error
		info, err = db.Backup(w)
		return err
	})
	return info, err
}
