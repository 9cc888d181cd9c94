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

// PageCheck walks every page of the database at path (bbolt's Tx.Check) and
// returns nil when it is sound, a *CorruptError when it is not, a
// *LockedError when the file stays locked past lockTimeout.
//
// bbolt's whole-file walks (Tx.Check, and the freelist scan of a read-write
// open with NoFreelistSync) report some damage by panicking in a goroutine of
// their own, which no recover reaches: run in this process, they would end
// it. So the walk runs in a child process (ChildPageCheck), whose crash
// means "corrupt"; CheckPages is what the child runs.
type PageCheck func(path string, lockTimeout time.Duration) error

// maxPageErrors bounds the errors of bbolt's check kept in a report.
const maxPageErrors = 20

// CheckPages runs bbolt's consistency check of every page of the file in
// this process, under a read-only open. It can end the process (see
// PageCheck): call it only in a process whose death the caller can observe,
// as PageCheckMain does.
func CheckPages(path string, lockTimeout time.Duration) error {
	db, err := Open(path, &Options{ReadOnly: true, LockTimeout: lockTimeout})
	if err != nil {
		return err
	}
	defer db.Close()
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
func PageCheckMain(path string, lockTimeout time.Duration, w io.Writer) error {
	err := CheckPages(path, lockTimeout)
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

// ChildPageCheck returns a PageCheck that runs command(path, lockTimeout): a
// child process that must call PageCheckMain with those arguments and exit.
// A child that ends without writing its result (bbolt panicked or the
// process faulted) means the file is corrupt; the reason quotes the panic.
func ChildPageCheck(command func(ctx context.Context, path string, lockTimeout time.Duration) *exec.Cmd) PageCheck {
	return func(path string, lockTimeout time.Duration) error {
		cmd := command(context.Background(), path, lockTimeout)
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
		return &CorruptError{Path: path, Reason: fmt.Sprintf("bbolt crashed walking its pages (%s): %s", exit.ProcessState, crashLine(stderr.String())), Err: runErr}
	}
}

// crashLine picks the line that says why a Go process died: its "panic:" or
// "fatal error:" or "unexpected fault" line.
func crashLine(stderr string) string {
	for _, line := range strings.Split(stderr, "\n") {
		for _, p := range []string{"panic: ", "fatal error: ", "unexpected fault"} {
			if strings.HasPrefix(line, p) {
				return strings.TrimSpace(line)
			}
		}
	}
	if s := strings.TrimSpace(stderr); s != "" {
		if i := strings.IndexByte(s, '\n'); i > 0 {
			return s[:i]
		}
		return s
	}
	return "no message"
}
