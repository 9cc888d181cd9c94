package store

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	bolterrors "go.etcd.io/bbolt/errors"
)

// Errors returned while opening a file.
var (
	// ErrLocked is returned (as *LockedError) by Open when another process
	// holds the file's lock for longer than Options.LockTimeout.
	ErrLocked = errors.New("database busy")
	// ErrFormat is returned by Open when the file is not a bbolt file, or
	// was written by a newer build (a FormatVersion above this one's), or
	// by an older one whose layout this build cannot read before migrating.
	ErrFormat = errors.New("unsupported database format")
	// ErrReadOnly is returned by Begin and DropTable when the DB was opened with
	// Options.ReadOnly.
	ErrReadOnly = errors.New("database is open read-only")
)

// Errors returned while building or publishing a generation.
var (
	// ErrGenerationDone is returned by Write and Publish when the generation
	// was already published or aborted.
	ErrGenerationDone = errors.New("generation already published or aborted")
	// ErrGenerationGone is returned by Write and Publish when the
	// generation's bucket no longer exists in the file (it should not happen
	// while the DB that began it stays open).
	ErrGenerationGone = errors.New("generation bucket is missing")
	// ErrEmptyKey is returned by Table.Put and KV.Put for an empty key: bbolt
	// cannot store one. Folds must skip or reject such records themselves.
	ErrEmptyKey = errors.New("empty key cannot be stored")
	// ErrInvalidName is returned by Begin, Publish and Index for an empty
	// table or index name, or a TableMeta.Name that differs from the table
	// the generation was begun for.
	ErrInvalidName = errors.New("invalid name")
)

// Errors returned by reads.
var (
	// ErrTableNotFound is returned (as *TableNotFoundError) by Table, Get and
	// Scan when no table of that name has been published.
	ErrTableNotFound = errors.New("table not found")
	// ErrKeyNotFound is returned (as *KeyNotFoundError) by Get when the
	// table has no row with that key.
	ErrKeyNotFound = errors.New("key not found")
	// ErrNoDatabase is returned (as *NoDatabaseError, which is also
	// fs.ErrNotExist) by a read-only Open, Check and Inspect when the file
	// is missing or empty: no table has been built there, so none is found.
	ErrNoDatabase = errors.New("no database")
	// ErrCorrupt is returned by Open, reads and Publish when the file is
	// damaged (as *CorruptError: bad meta pages, a file shorter than its
	// page count, a page that faults or fails bbolt's checks when read) or
	// contradicts itself (a published table naming a generation that does
	// not exist, metadata that does not decode).
	ErrCorrupt = errors.New("database is corrupt")
)

// LockedError is returned by Open when the file's lock could not be taken
// within the lock timeout. Holder is the holder record the process holding
// the file wrote beside it, nil when there is none (a read-only holder, such
// as a scan, writes none) or its process is gone. errors.Is(err, ErrLocked)
// is true.
type LockedError struct {
	Path    string
	Timeout time.Duration
	Holder  *Holder
}

func (e *LockedError) Error() string {
	who := "another process (it left no holder record: a reader such as scan or export, or an older kmaterialize)"
	if e.Holder != nil {
		who = e.Holder.String()
	}
	return fmt.Sprintf("database busy: %s is held by %s; gave up waiting for its lock after %s", e.Path, who, e.Timeout)
}

// Is reports ErrLocked.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// Unwrap returns bbolt's timeout error.
func (e *LockedError) Unwrap() error { return bolterrors.ErrTimeout }

// CorruptError is returned when the file at Path is damaged: Reason says
// what is wrong, Err is the cause when there is one (a bbolt error, a
// recovered panic or memory fault). errors.Is(err, ErrCorrupt) is true.
type CorruptError struct {
	Path   string
	Reason string
	Err    error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("database is corrupt: %s: %s", e.Path, e.Reason)
}

// Is reports ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Unwrap returns the cause, if any.
func (e *CorruptError) Unwrap() error { return e.Err }

// TableNotFoundError is returned when a table does not exist. Have lists the
// tables that do, sorted. errors.Is(err, ErrTableNotFound) is true.
type TableNotFoundError struct {
	Path string
	Name string
	Have []string
}

func (e *TableNotFoundError) Error() string {
	have := "no tables yet"
	if len(e.Have) > 0 {
		have = "tables: " + strings.Join(e.Have, ", ")
	}
	return fmt.Sprintf("table %q not found in %s (%s)", e.Name, e.Path, have)
}

// Is reports ErrTableNotFound.
func (e *TableNotFoundError) Is(target error) bool { return target == ErrTableNotFound }

// KeyNotFoundError is returned by Get when a table has no row for Key.
// errors.Is(err, ErrKeyNotFound) is true.
type KeyNotFoundError struct {
	Table string
	Key   []byte
}

func (e *KeyNotFoundError) Error() string {
	return fmt.Sprintf("key %q not found in table %q", e.Key, e.Table)
}

// Is reports ErrKeyNotFound.
func (e *KeyNotFoundError) Is(target error) bool { return target == ErrKeyNotFound }

// ErrInternal is returned (as *PanicError) by reads when code that is not
// bbolt's panicked while reading: a caller's callback or this package's own
// code. It is a bug to report, not damage to the file.
var ErrInternal = errors.New("internal error")

// PanicError is a panic recovered while reading Path that was not bbolt's
// (see classifyPanic): Value is what was passed to panic, Function the
// function that panicked, Stack the goroutine's stack at the panic, for the
// debug log. bbolt rolled the read transaction back, so the DB stays usable.
// errors.Is(err, ErrInternal) is true.
type PanicError struct {
	Path     string
	Value    any
	Function string
	Stack    []byte
}

func (e *PanicError) Error() string {
	where := ""
	if e.Function != "" {
		where = " in " + e.Function
	}
	return fmt.Sprintf("internal error: panic%s while reading %s: %v", where, e.Path, e.Value)
}

// Is reports ErrInternal.
func (e *PanicError) Is(target error) bool { return target == ErrInternal }

// Unwrap returns the panic's value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// NoDatabaseError is a read of a database file that is missing (or
// empty: a create that never wrote its first transaction).
type NoDatabaseError struct {
	Path  string
	Empty bool
}

func (e *NoDatabaseError) Error() string {
	if e.Empty {
		return fmt.Sprintf("database %s is an empty file (nothing has been built there yet)", e.Path)
	}
	return fmt.Sprintf("no database at %s (nothing has been built there yet)", e.Path)
}

// Is makes a missing database both ErrNoDatabase and fs.ErrNotExist.
func (e *NoDatabaseError) Is(target error) bool {
	return target == ErrNoDatabase || target == fs.ErrNotExist
}
