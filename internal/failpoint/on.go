//go:build failpoints

package failpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Enabled reports whether the binary was built with the failpoints tag.
const Enabled = true

// spec is the parsed KMATERIALIZE_FAILPOINT.
type spec struct {
	name   string
	nth    int
	action string
}

var (
	once    sync.Once
	armed   spec
	mu      sync.Mutex
	hits    int
	handled bool
)

func parse(s string) (spec, error) {
	sp := spec{nth: 1, action: "park"}
	s, action, ok := strings.Cut(s, "=")
	if ok {
		sp.action = action
	}
	name, n, ok := strings.Cut(s, "@")
	sp.name = name
	if ok {
		v, err := strconv.Atoi(n)
		if err != nil || v < 1 {
			return spec{}, fmt.Errorf("%s: hit number %q is not a positive integer", EnvPoint, n)
		}
		sp.nth = v
	}
	switch sp.action {
	case "park", "nowrite", "wait":
	default:
		return spec{}, fmt.Errorf("%s: action %q: want park, nowrite or wait", EnvPoint, sp.action)
	}
	return sp, nil
}

// Hit acts at the named point if KMATERIALIZE_FAILPOINT names it and this
// is its chosen hit; otherwise it returns at once. A malformed variable is
// reported on stderr and the process exits 99: a test that asked for a
// failpoint must not run without it.
func Hit(name string) {
	once.Do(func() {
		s := os.Getenv(EnvPoint)
		if s == "" {
			return
		}
		sp, err := parse(s)
		if err != nil {
			fmt.Fprintln(os.Stderr, "failpoint:", err)
			os.Exit(99)
		}
		armed = sp
	})
	if armed.name != name {
		return
	}
	mu.Lock()
	hits++
	fire := !handled && hits == armed.nth
	if fire {
		handled = true
	}
	mu.Unlock()
	if !fire {
		return
	}
	verb := map[string]string{"park": "parked", "nowrite": "nowrite", "wait": "waiting"}[armed.action]
	announce(fmt.Sprintf("failpoint %s %s", name, verb))
	switch armed.action {
	case "wait":
		// Polled: the test's only handle on this goroutine is the file.
		path := os.Getenv(EnvFile)
		for {
			if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		fmt.Fprintf(os.Stderr, "failpoint %s released\n", name)
	case "park":
		// Sleep rather than block on a channel: with every goroutine
		// blocked the runtime would report a deadlock and exit.
		for {
			time.Sleep(time.Hour)
		}
	case "nowrite":
		NoWrite()
	}
}

// announce writes line to stderr and to the file named by
// KMATERIALIZE_FAILPOINT_FILE, fsynced, so a test can wait for it.
func announce(line string) {
	fmt.Fprintln(os.Stderr, line)
	path := os.Getenv(EnvFile)
	if path == "" {
		if armed.action == "wait" {
			// Nothing would ever release the point.
			fmt.Fprintln(os.Stderr, "failpoint: the wait action needs", EnvFile)
			os.Exit(99)
		}
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err == nil {
		_, err = f.WriteString(line + "\n")
		if serr := f.Sync(); err == nil {
			err = serr
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "failpoint: write", path+":", err)
		os.Exit(99)
	}
}

// NoWrite sets the process's RLIMIT_FSIZE to 0: from then on every write to
// a regular file fails with EFBIG (Go ignores the SIGXFSZ that comes with
// it). On Linux the limit applies to the whole process, every thread. It
// is how a full disk looks to bbolt: its file grows by truncate, so its
// free pages are holes, and on a full disk a write into a hole fails like
// a write past the end.
func NoWrite() {
	var lim syscall.Rlimit
	err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim)
	if err == nil {
		lim.Cur = 0
		err = syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "failpoint: setrlimit RLIMIT_FSIZE:", err)
		os.Exit(99)
	}
}
