package store

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

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
// A read runs callbacks that are not bbolt's: this package's own code and
// the caller's (ReadTable's fn, View's fn, Scan's fn). A panic there is a
// bug, not damage, and guard says so (classifyPanic): a *PanicError, which
// names no file to replace.
//
// guard cannot reach bbolt's own goroutines: the freelist scan of a
// read-write open and Tx.Check assert in a goroutine of bbolt's, where a
// panic ends the process. Those whole-file walks run in a child process
// (see PageCheck).

// view is bolt's View under guard.
// Each one is tracked from before bbolt begins it to after it ends, for
// OldestReadTx.
func (db *DB) view(fn func(tx *bolt.Tx) error) error {
	return guard(db.path, func() error { return db.boltView(fn) })
}

// guard runs fn, converting a panic or memory fault inside it into an
// error for path, as classifyPanic decides: a *CorruptError when bbolt
// panicked or the map faulted, a *PanicError otherwise.
func guard(path string, fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			// Still on the panicking goroutine's stack: the frames
			// below runtime.gopanic are the ones that panicked.
			pcs := make([]uintptr, 64)
			pcs = pcs[:runtime.Callers(1, pcs)]
			err = classifyPanic(path, r, pcs, debug.Stack())
		}
	}()
	return fn()
}

// bboltPackage is the import path of bbolt; its subpackages
// (go.etcd.io/bbolt/internal/...) share the prefix.
const bboltPackage = "go.etcd.io/bbolt"

// classifyPanic is the one rule for what a panic recovered under guard
// means. It is damage to the file, a *CorruptError (ErrCorrupt), when
//   - r is a memory fault with a fault address (a runtime.Error with
//     Addr(), which debug.SetPanicOnFault makes of a SIGBUS or SIGSEGV):
//     a read of the memory map past the file's end, whoever's code made it
//     (bbolt, or a callback reading a value slice that points into the map);
//     a nil dereference has no address and falls to the next rule; or
//   - the panicking frame, the first frame below runtime.gopanic outside
//     the runtime, is in go.etcd.io/bbolt: its assertions and index
//     errors on a page that does not hold what bbolt expects.
//
// Anything else panicked in code that is not bbolt's (a caller's callback,
// this package's own): a bug, returned as a *PanicError (ErrInternal) with
// the value and stack, never as corruption, which would send the operator to
// replace a good file. pcs is the stack the deferred recover ran on
// (runtime.Callers), stack its text for the error.
func classifyPanic(path string, r any, pcs []uintptr, stack []byte) error {
	cause, _ := r.(error)
	var fault interface{ Addr() uintptr }
	if errors.As(cause, &fault) {
		return &CorruptError{Path: path, Err: cause,
			Reason: fmt.Sprintf("reading it failed: memory fault at %#x (a page number past the end of the file or of its map)", fault.Addr())}
	}
	fn := panickingFunction(pcs)
	if strings.HasPrefix(fn, bboltPackage+".") || strings.HasPrefix(fn, bboltPackage+"/") {
		return &CorruptError{Path: path, Err: cause, Reason: fmt.Sprintf("reading it failed: %v (in %s)", r, fn)}
	}
	return &PanicError{Path: path, Value: r, Function: fn, Stack: stack}
}

// panickingFunction is the function that panicked: in pcs, the first
// frame after runtime.gopanic that is not the runtime's own (a runtime
// error such as an index out of range or a nil map write passes through
// runtime helpers first). "" when pcs holds no gopanic frame.
func panickingFunction(pcs []uintptr) string {
	frames := runtime.CallersFrames(pcs)
	seen := false
	for {
		f, more := frames.Next()
		switch {
		case f.Function == "runtime.gopanic":
			seen = true
		case seen && !isRuntime(f.Function):
			return f.Function
		}
		if !more {
			return ""
		}
	}
}

func isRuntime(fn string) bool {
	return strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "internal/runtime/")
}
