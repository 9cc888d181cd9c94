package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// PageCheck walks every page of the database at path and returns nil when it
// is sound, a *CorruptError when it is not, a *LockedError when the file
// stays locked past lockTimeout. full asks for bbolt's Tx.Check (every page
// accounted for, keys in order); otherwise the walk is the one a read-write
// open makes (the freelist scan), which is what Open needs to know survives.
//
// bbolt's whole-file walks (Tx.Check, and the freelist scan of a read-write
// open with NoFreelistSync) report some damage by panicking in a goroutine of
// their own, which no recover reaches: run in this process, they would end
// it. So the walk runs in a child process (ChildPageCheck), whose crash
// means "corrupt"; CheckPages is what the child runs.
type PageCheck func(path string, lockTimeout time.Duration, full bool) error

// maxPageErrors bounds the errors of bbolt's check kept in a report.
const maxPageErrors = 20

// CheckPages walks every page of the file in this process, under a read-only
// open: the freelist scan a read-write open makes and, if full, bbolt's
// consistency check. It can end the process (see PageCheck): call it only in
// a process whose death the caller can observe, as PageCheckMain does.
//
// bbolt's check asserts on both meta pages, so it cannot run on a file with
// one torn meta page (which bbolt itself opens fine, from the other): there
// the freelist scan is the whole check.
func CheckPages(path string, lockTimeout time.Duration, full bool) error {
	rep, err := preflight(path)
	if err != nil {
		return err
	}
	db, err := Open(path, &Options{ReadOnly: true, LockTimeout: lockTimeout, pageWalk: true})
	if err != nil {
		return err
	}
	defer db.Close()
	if !full || len(rep.warnings) > 0 {
		return nil
	}
	var problems []string
	err = db.view(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			if len(problems) < maxPageErrors {
				problems = append(problems, err.Error())
			} else if len(problems) == maxPageErrors {
				problems = append(problems, "...")
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return &CorruptError{Path: path, Reason: "bbolt's page check: " + strings.Join(problems, "; ")}
	}
	return nil
}

// pageCheckResult is what PageCheckMain writes for ChildPageCheck.
type pageCheckResult struct {
	Result string `json:"result"` // "ok", "corrupt", "busy" or "error"
	Reason string `json:"reason,omitempty"`
}

// PageCheckMain is the child side of ChildPageCheck: it runs CheckPages and
// writes the outcome as one JSON line to w. The child process should then
// exit 0; any other end (a panic, a signal) means bbolt crashed on the file.
func PageCheckMain(path string, lockTimeout time.Duration, full bool, w io.Writer) error {
	err := CheckPages(path, lockTimeout, full)
	var res pageCheckResult
	var ce *CorruptError
	switch {
	case err == nil:
		res.Result = "ok"
	case errors.As(err, &ce):
		res.Result, res.Reason = "corrupt", ce.Reason
	case errors.Is(err, ErrLocked):
		res.Result = "busy"
	default:
		res.Result, res.Reason = "error", err.Error()
	}
	return json.NewEncoder(w).Encode(res)
}

// ChildPageCheck returns a PageCheck that runs command(path, lockTimeout,
// full): a child process that must call PageCheckMain with those arguments
// and exit.
// A child that ends without writing its result (bbolt panicked or the
// process faulted) means the file is corrupt; the reason quotes the panic.
func ChildPageCheck(command func(ctx context.Context, path string, lockTimeout time.Duration, full bool) *exec.Cmd) PageCheck {
	return func(path string, lockTimeout time.Duration, full bool) error {
		cmd := command(context.Background(), path, lockTimeout, full)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		runErr := cmd.Run()
		var res pageCheckResult
		if json.Unmarshal(stdout.Bytes(), &res) == nil && res.Result != "" {
			switch res.Result {
			case "ok":
				return nil
			case "corrupt":
				return &CorruptError{Path: path, Reason: res.Reason}
			case "busy":
				return &LockedError{Path: path, Timeout: lockTimeout, Holder: ReadHolder(path)}
			default:
				return fmt.Errorf("check the pages of %s: %s", path, res.Reason)
			}
		}
		var exit *exec.ExitError
		if !errors.As(runErr, &exit) {
			return fmt.Errorf("check the pages of %s: run %s: %v", path, cmd.Path, runErr)
		}
		// No result: the child died. A Go panic or fault there (bbolt's
		// goroutine asserting on a damaged page) means the file is
		// corrupt; a child that failed otherwise says nothing about it.
		why, crashed := crashLine(stderr.String())
		if !crashed && exit.ProcessState.Exited() {
			return fmt.Errorf("check the pages of %s: %s failed (%s): %s", path, cmd.Path, exit.ProcessState, why)
		}
		return &CorruptError{Path: path, Reason: "bbolt crashed walking its pages: " + why, Err: runErr}
	}
}

// crashLine picks the line that says why a Go process died (its "panic:",
// "fatal error:" or "unexpected fault" line, without the prefix: the parent
// reports the crash, it does not have one); crashed is false when there is
// none, and line is then the first line of stderr.
func crashLine(stderr string) (line string, crashed bool) {
	for _, l := range strings.Split(stderr, "\n") {
		for _, p := range []string{"panic: ", "fatal error: ", "unexpected fault"} {
			if strings.HasPrefix(l, p) {
				return strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(l, "panic: "), "fatal error: ")), true
			}
		}
	}
	s := strings.TrimSpace(stderr)
	if i := strings.IndexByte(s, '\n'); i > 0 {
		s = s[:i]
	}
	if s == "" {
		s = "no message"
	}
	return s, false
}
