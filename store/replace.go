package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// MoveAside renames the (corrupt) database at path to
// path.corrupt-<UTC time>, in the same directory, and fsyncs the directory,
// so that a fresh database can be built at path while the damaged one is
// kept for inspection. It returns the new name.
//
// It takes the file's exclusive lock first, as a read-write open would
// (waiting up to lockTimeout, then a *LockedError): a process still using
// the file keeps it until it is done. A process waiting for the lock
// meanwhile finds, once it has it, that path names another file, and opens
// that one (see Open).
func MoveAside(path string, lockTimeout time.Duration, now time.Time) (string, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return "", fmt.Errorf("move %s aside: %w", path, err)
	}
	defer f.Close() // releases the lock, after the rename
	if lockTimeout <= 0 {
		lockTimeout = time.Millisecond
	}
	deadline := time.Now().Add(lockTimeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return "", fmt.Errorf("move %s aside: lock it: %w", path, err)
		}
		if time.Now().After(deadline) {
			return "", &LockedError{Path: path, Timeout: lockTimeout, Holder: ReadHolder(path)}
		}
		time.Sleep(50 * time.Millisecond) // bbolt's own flock retry interval
	}
	if same, err := sameFile(path, f); err != nil || !same {
		if err == nil {
			err = errors.New("another process replaced it meanwhile")
		}
		return "", fmt.Errorf("move %s aside: %w", path, err)
	}
	aside := path + ".corrupt-" + now.UTC().Format("20060102T150405Z")
	if _, err := os.Lstat(aside); err == nil {
		return "", fmt.Errorf("move %s aside: %s already exists", path, aside)
	}
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("move %s aside: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return aside, fmt.Errorf("move %s aside to %s: %w", path, aside, err)
	}
	return aside, nil
}
