package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Holder is the record a read-write holder of a database writes beside it,
// in HolderPath(path): bbolt's flock records no owner, so this is how a
// process that finds the database busy can say who holds it. Only
// read-write opens write one (read-only opens share the lock, and one file
// cannot name many readers); Close removes it. A record whose process is gone
// (killed, crashed) is stale: ReadHolder ignores it, and the next read-write
// holder replaces it.
type Holder struct {
	// PID is the holding process.
	PID int `json:"pid"`
	// Command says what it runs, without secrets: the subcommand and the
	// database path, e.g. "kmaterialize rebuild --db balances.db --table x".
	Command string `json:"command"`
	// Since is when it took the lock.
	Since time.Time `json:"since"`
	// Socket is the daemon's API socket (Options.Socket); empty for a
	// holder that is not a daemon.
	Socket string `json:"socket"`
}

// String is "pid 1234 (kmaterialize rebuild ...), since 10:22:01", with
// ", socket /run/x.sock" appended when the holder is a daemon.
func (h *Holder) String() string {
	since := h.Since.Local()
	layout := "15:04:05"
	if y, m, d := since.Date(); y != time.Now().Year() || m != time.Now().Month() || d != time.Now().Day() {
		layout = "2006-01-02 15:04:05"
	}
	cmd := h.Command
	if cmd == "" {
		cmd = "command unknown"
	}
	s := fmt.Sprintf("pid %d (%s), since %s", h.PID, cmd, since.Format(layout))
	if h.Socket != "" {
		s += ", socket " + h.Socket
	}
	return s
}

// HolderPath is where the holder record of the database at path lives.
func HolderPath(path string) string { return path + ".holder" }

// ReadHolder returns the holder record of the database at path, or nil when
// there is none, it does not decode, or its process no longer exists.
func ReadHolder(path string) *Holder {
	b, err := os.ReadFile(HolderPath(path))
	if err != nil {
		return nil
	}
	var h Holder
	if json.Unmarshal(b, &h) != nil || h.PID <= 0 || !processAlive(h.PID) {
		return nil
	}
	return &h
}

// processAlive reports whether pid names a live process (kill(pid, 0):
// EPERM means it exists but belongs to someone else).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// writeHolder publishes h as path's holder record: a temp file in the same
// directory, fsynced, renamed over the record, and the directory fsynced, so
// a reader sees the old record or the new one, never a part.
func writeHolder(path string, h Holder) error {
	dst := HolderPath(path)
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write holder record %s: %w", dst, err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write holder record %s: %w", dst, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write holder record %s: %w", dst, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write holder record %s: %w", dst, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("write holder record %s: %w", dst, err)
	}
	return syncDir(filepath.Dir(dst))
}

// removeHolder removes path's holder record if it is still h's: another
// process may have replaced it since (after this one's lock was broken by a
// rename, say).
func removeHolder(path string, h Holder) error {
	b, err := os.ReadFile(HolderPath(path))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove holder record: %w", err)
	}
	var cur Holder
	if json.Unmarshal(b, &cur) == nil && (cur.PID != h.PID || !cur.Since.Equal(h.Since)) {
		return nil
	}
	if err := os.Remove(HolderPath(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove holder record: %w", err)
	}
	return nil
}

// syncDir fsyncs a directory, making a rename in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
