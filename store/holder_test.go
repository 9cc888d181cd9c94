package store_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/store"
)

// holderProc is a child process (this test binary, store.EnvHold) holding a
// database read-write until release.
type holderProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func startHolder(t *testing.T, path string) *holderProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), store.EnvHold+"="+path)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holderProc{cmd: cmd, stdin: stdin}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("holder: %q, %v", line, err)
	}
	return h
}

func (h *holderProc) release(t *testing.T) {
	t.Helper()
	h.stdin.Close()
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("holder exited: %v", err)
	}
}

// readRecord reads the holder record as JSON, independently of ReadHolder.
func readRecord(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path + ".holder")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("holder record %q: %v", b, err)
	}
	return m
}

func TestHolderRecordNamesTheHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.db")
	h := startHolder(t, path)
	pid := h.cmd.Process.Pid

	rec := readRecord(t, path)
	if rec["pid"] != float64(pid) || rec["command"] != "store test helper hold --db "+path || rec["socket"] != "" {
		t.Fatalf("holder record %v: want pid %d, the helper's command, no socket", rec, pid)
	}
	since, err := time.Parse(time.RFC3339, rec["since"].(string))
	if err != nil || time.Since(since) > time.Hour || time.Since(since) < -time.Minute {
		t.Fatalf("holder record since %v (%v): want about now", rec["since"], err)
	}

	for _, ro := range []bool{false, true} {
		_, err := store.Open(path, &store.Options{ReadOnly: ro, LockTimeout: 100 * time.Millisecond})
		var le *store.LockedError
		if !errors.As(err, &le) || !errors.Is(err, store.ErrLocked) {
			t.Fatalf("read-only=%v: err = %v, want a *LockedError", ro, err)
		}
		if le.Holder == nil || le.Holder.PID != pid {
			t.Fatalf("read-only=%v: holder %+v, want pid %d", ro, le.Holder, pid)
		}
		want := fmt.Sprintf("is held by pid %d (store test helper hold --db %s), since %s", pid, path, since.Local().Format("15:04:05"))
		if !strings.Contains(err.Error(), want) {
			t.Errorf("read-only=%v: message %q does not contain %q", ro, err, want)
		}
	}

	h.release(t)
	if _, err := os.Stat(path + ".holder"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("holder record after Close: %v, want it removed", err)
	}
	db, err := store.Open(path, &store.Options{LockTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("open after the holder closed: %v", err)
	}
	db.Close()
}

// TestStaleHolderIgnored: a holder killed with SIGKILL leaves its record;
// its pid is gone, so the record is ignored: a busy message does not name it
// and the next read-write holder replaces it.
func TestStaleHolderIgnored(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.db")
	h := startHolder(t, path)
	dead := h.cmd.Process.Pid
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = h.cmd.Wait()
	if rec := readRecord(t, path); rec["pid"] != float64(dead) {
		t.Fatalf("after SIGKILL the record is %v, want the dead pid %d's", rec, dead)
	}
	if got := store.ReadHolder(path); got != nil {
		t.Fatalf("ReadHolder = %+v, want nil: pid %d is gone", got, dead)
	}

	// A reader (no record of its own) holds the file: the busy message
	// must not blame the dead pid.
	reader, err := store.Open(path, &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = store.Open(path, &store.Options{LockTimeout: 100 * time.Millisecond})
	var le *store.LockedError
	if !errors.As(err, &le) || le.Holder != nil || strings.Contains(err.Error(), fmt.Sprint(dead)) ||
		!strings.Contains(err.Error(), "left no holder record") {
		t.Fatalf("busy with a stale record: %v, want no holder named", err)
	}
	reader.Close()

	db, err := store.Open(path, &store.Options{Command: "second"})
	if err != nil {
		t.Fatal(err)
	}
	if rec := readRecord(t, path); rec["pid"] != float64(os.Getpid()) || rec["command"] != "second" {
		t.Fatalf("record %v, want this process's", rec)
	}
	db.Close()
}

// TestReopenWhenRenamedWhileWaiting: an Open waiting for the lock while the
// holder moves the file aside and puts a new one in its place ends up with
// the new file, not the one it was waiting on.
func TestReopenWhenRenamedWhileWaiting(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "k.db")
	buildTable(t, path, "old", "k-", 10)
	holder, err := store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()

	type opened struct {
		db  *store.DB
		err error
	}
	done := make(chan opened, 1)
	go func() {
		db, err := store.Open(path, &store.Options{LockTimeout: time.Minute})
		done <- opened{db, err}
	}()
	// Wait until the waiter's bbolt has opened the file: this process then
	// has two read-write descriptors on it, the holder's and the waiter's
	// (Open's own look at the meta pages is read-only).
	deadline := time.Now().Add(30 * time.Second)
	for openFDs(t, path) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never opened the file")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
	if err := os.Rename(path, path+".corrupt-test"); err != nil {
		t.Fatal(err)
	}
	buildTable(t, path, "new", "n-", 5)
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}

	var o opened
	select {
	case o = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the waiter did not return")
	}
	if o.err != nil {
		t.Fatalf("waiter: %v", o.err)
	}
	defer o.db.Close()
	ts, err := o.db.Tables()
	if err != nil || len(ts) != 1 || ts[0].Name != "new" || ts[0].Keys != 5 {
		t.Fatalf("waiter reads tables %+v (%v), want only the new file's table \"new\"", ts, err)
	}
}

// openFDs counts this process's read-write descriptors open on path.
func openFDs(t *testing.T, path string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || target != path {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(info), "\n") {
			var flags int
			if _, err := fmt.Sscanf(line, "flags:\t%o", &flags); err == nil && flags&3 == os.O_RDWR {
				n++
			}
		}
	}
	return n
}

// TestHolderRecordCarriesSocket: a daemon's read-write open writes its socket
// into the holder record (read back as JSON, independently of ReadHolder),
// and a second open's busy error names it.
func TestHolderRecordCarriesSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.db")
	sock := filepath.Join(t.TempDir(), "daemon.sock")
	db, err := store.Open(path, &store.Options{Command: "kmaterialize serve", Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if rec := readRecord(t, path); rec["socket"] != sock || rec["pid"] != float64(os.Getpid()) {
		t.Fatalf("holder record %v: want socket %q and pid %d", rec, sock, os.Getpid())
	}
	// A second open file description in this process conflicts with the
	// first one's flock as another process's would.
	_, err = store.Open(path, &store.Options{LockTimeout: -1})
	var le *store.LockedError
	if !errors.As(err, &le) || le.Holder == nil || le.Holder.Socket != sock {
		t.Fatalf("second open: %v (holder %+v), want a *LockedError naming socket %s", err, le, sock)
	}
	if !strings.Contains(err.Error(), "socket "+sock) {
		t.Fatalf("message %q does not name the socket %s", err, sock)
	}
}
