package store

import (
	"errors"
	"fmt"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
)

// bbolt reads pages straight from its memory map and trusts what it finds:
// a damaged page makes it panic (an assertion, an index out of range), and a
// page number past the end of the file makes the read a memory fault
// (SIGBUS or SIGSEGV) that kills the process. Every read this package makes
// runs under guard, which turns both into a *CorruptError: the fault becomes
// a panic (debug.SetPanicOnFault, per goroutine) and the panic an error
// (recover). bbolt's own View and Update roll their transaction back on a
// panic, so the file and the DB stay usable for whatever else is intact.
//
// guard cannot reach bbolt's own goroutines: the freelist scan of a
// read-write open and Tx.Check assert in a goroutine of bbolt's, where a
// panic ends the process. Those whole-file walks run in a child process
// (see PageCheck).

// view is bolt's View under guard.
func (db *DB) view(fn func(tx *bolt.Tx) error) error {
	return guard(db.path, func() error { return db.bolt.View(fn) })
}

// guard runs fn, converting a panic or memory fault inside it into a
// *CorruptError for path. It must wrap only code that reads the file: a
// panic of the caller's own would be reported as corruption too, with its
// value in the reason.
func guard(path string, fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			cause, _ := r.(error)
			reason := fmt.Sprintf("reading it failed: %v", r)
			var fault interface{ Addr() uintptr }
			if errors.As(cause, &fault) {
				reason = fmt.Sprintf("reading it failed: memory fault at %#x (a page number past the end of the file or of its map)", fault.Addr())
			}
			err = &CorruptError{Path: path, Reason: reason, Err: cause}
		}
	}()
	return fn()
}
