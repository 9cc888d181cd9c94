package cpushare

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// threadNice is the calling thread's nice value as the kernel reports it
// in /proc/self/task/TID/stat (field 19), read on a locked goroutine.
func threadNice(t *testing.T) int {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", unix.Gettid()))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command name, in parentheses: state is the
	// first (field 3), nice field 19.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	n, err := strconv.Atoi(f[16])
	if err != nil {
		t.Fatalf("stat %q: %v", raw, err)
	}
	return n
}

// TestRunLowersItsOwnThread: a daemon share's Run runs fn on a thread at
// nice Nice (or the process's, if already lower), and the caller's thread
// keeps its priority; a plain share's Run stays on the caller's thread;
// a panic in fn comes out of Run.
func TestRunLowersItsOwnThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	base := threadNice(t)
	want := max(base, Nice)

	var inside int
	ForDaemon(runtime.GOMAXPROCS(0)).Run(func() {
		runtime.LockOSThread() // already locked by Run: read this thread
		defer runtime.UnlockOSThread()
		inside = threadNice(t)
	})
	if inside != want {
		t.Fatalf("ForDaemon().Run: fn's thread at nice %d, want %d (the caller's is %d)", inside, want, base)
	}
	if got := threadNice(t); got != base {
		t.Fatalf("the caller's thread went from nice %d to %d", base, got)
	}

	tid := unix.Gettid()
	New(1).Run(func() {
		if got := unix.Gettid(); got != tid {
			t.Errorf("New(1).Run ran fn on thread %d, not the caller's %d", got, tid)
		}
	})

	defer func() {
		if p := recover(); p != "boom" {
			t.Fatalf("recovered %v, want the panic of fn", p)
		}
	}()
	ForDaemon(runtime.GOMAXPROCS(0)).Run(func() { panic("boom") })
	t.Fatal("Run returned after fn panicked")
}
