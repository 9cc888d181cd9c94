package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestSocketModeAndGroup: the socket gets the configured mode and group, in
// a directory the daemon creates 0750 with a group, 0700 without.
func TestSocketModeAndGroup(t *testing.T) {
	// The group to give: a supplementary group other than the process's
	// own when there is one (so the group really changes), else its own.
	gid := os.Getegid()
	groups, _ := os.Getgroups()
	changes := false
	for _, g := range groups {
		if g != gid {
			gid, changes = g, true
			break
		}
	}
	group := strconv.Itoa(gid)
	if !changes && os.Geteuid() == 0 {
		// root may give any group: a system group by name.
		for _, name := range []string{"daemon", "nogroup", "bin"} {
			if g, err := user.LookupGroup(name); err == nil && g.Gid != strconv.Itoa(gid) {
				gid, _ = strconv.Atoi(g.Gid)
				group, changes = name, true
				t.Logf("running as root with no second group: using group %s (%d)", name, gid)
				break
			}
		}
	}
	if !changes {
		t.Logf("the process has no second group: the group is set to its own gid %d, so the group-change subcase is not exercised", gid)
	}
	for _, c := range []struct {
		name     string
		mode     os.FileMode
		group    string
		wantMode os.FileMode
		wantDir  os.FileMode
		wantGID  int
	}{
		{name: "defaults", wantMode: 0o600, wantDir: 0o700, wantGID: os.Getegid()},
		{name: "mode and group", mode: 0o660, group: group, wantMode: 0o660, wantDir: 0o750, wantGID: gid},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := baseConfig(t)
			dir := filepath.Join(shortDir(t), "run")
			cfg.Socket = filepath.Join(dir, "api.sock")
			cfg.SocketMode, cfg.SocketGroup = c.mode, c.group
			d := start(t, cfg)
			fi, err := os.Stat(cfg.Socket)
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != c.wantMode || int(st.Gid) != c.wantGID {
				t.Fatalf("socket %v gid %d, want a socket %v gid %d", fi.Mode(), st.Gid, c.wantMode, c.wantGID)
			}
			di, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			dst := di.Sys().(*syscall.Stat_t)
			if di.Mode().Perm() != c.wantDir || (c.group != "" && int(dst.Gid) != c.wantGID) {
				t.Fatalf("directory %v gid %d, want %v gid %d", di.Mode().Perm(), dst.Gid, c.wantDir, c.wantGID)
			}
			if r := d.c.get(t, "/healthz"); r.status != 200 {
				t.Fatalf("healthz %d", r.status)
			}
		})
	}
}

// TestStaleSocket: a socket file no one listens on is replaced; a socket
// someone listens on, a regular file or a directory at the path is an
// error, and left as it was.
func TestStaleSocket(t *testing.T) {
	t.Run("stale socket replaced", func(t *testing.T) {
		cfg := baseConfig(t)
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: cfg.Socket, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ln.SetUnlinkOnClose(false)
		ln.Close()
		if _, err := os.Stat(cfg.Socket); err != nil {
			t.Fatalf("the stale socket is not there: %v", err)
		}
		d := start(t, cfg)
		if r := d.c.get(t, "/healthz"); r.status != 200 {
			t.Fatalf("healthz %d", r.status)
		}
	})
	t.Run("socket in use", func(t *testing.T) {
		cfg := baseConfig(t)
		ln, err := net.Listen("unix", cfg.Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		err = runOnce(t, cfg)
		if !errors.Is(err, ErrSocketInUse) || !strings.Contains(err.Error(), cfg.Socket) {
			t.Fatalf("Run: %v, want ErrSocketInUse naming %s", err, cfg.Socket)
		}
		c, err := net.Dial("unix", cfg.Socket)
		if err != nil {
			t.Fatalf("the other listener lost its socket: %v", err)
		}
		c.Close()
	})
	t.Run("regular file", func(t *testing.T) {
		cfg := baseConfig(t)
		if err := os.WriteFile(cfg.Socket, []byte("keep me"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := runOnce(t, cfg); err == nil || !strings.Contains(err.Error(), "not a socket") {
			t.Fatalf("Run: %v, want an error saying it is not a socket", err)
		}
		if b, err := os.ReadFile(cfg.Socket); err != nil || string(b) != "keep me" {
			t.Fatalf("the file was touched: %q %v", b, err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		cfg := baseConfig(t)
		if err := os.Mkdir(cfg.Socket, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := runOnce(t, cfg); err == nil || !strings.Contains(err.Error(), "directory") {
			t.Fatalf("Run: %v, want an error naming the directory in the way", err)
		}
	})
}

// runOnce runs a Server for cfg that must fail before it serves, and
// returns its error.
func runOnce(t *testing.T, cfg Config) error {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	return s.Run(ctx, func() { t.Error("ready called") })
}

// TestSocketNeverWider: while the daemon starts, a goroutine stats the
// socket's path and its directory as fast as it can; the socket's path is
// never seen with a mode other than socket_mode, every private directory
// seen beside it is 0700, and none is left once the daemon serves.
func TestSocketNeverWider(t *testing.T) {
	cfg := baseConfig(t)
	dir := filepath.Dir(cfg.Socket)
	cfg.SocketMode = 0o640
	base := filepath.Base(cfg.Socket)
	stop := make(chan struct{})
	type seen struct {
		socket   []os.FileMode // each observation of the final path
		tmpDirs  []os.FileMode // each observation of a private directory
		rounds   int
		notSocks []string
	}
	res := make(chan seen, 1)
	observe := func(s *seen) {
		s.rounds++
		if fi, err := os.Lstat(cfg.Socket); err == nil {
			s.socket = append(s.socket, fi.Mode())
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), base+".tmp-") {
				if fi, err := os.Lstat(filepath.Join(dir, e.Name())); err == nil {
					s.tmpDirs = append(s.tmpDirs, fi.Mode())
				}
			}
		}
	}
	go func() {
		var s seen
		for {
			select {
			case <-stop:
				observe(&s) // once more, after the daemon serves
				res <- s
				return
			default:
				observe(&s)
			}
		}
	}()
	d := start(t, cfg)
	close(stop)
	s := <-res
	if len(s.socket) == 0 {
		t.Fatalf("the poller never saw the socket (%d rounds)", s.rounds)
	}
	for _, m := range s.socket {
		if m&os.ModeSocket == 0 || m.Perm() != cfg.SocketMode {
			t.Fatalf("the socket's path was seen as %v, want a socket with mode %v (observations: %v)", m, cfg.SocketMode, s.socket)
		}
	}
	for _, m := range s.tmpDirs {
		if !m.IsDir() || m.Perm() != 0o700 {
			t.Fatalf("a private directory beside the socket was seen as %v, want a 0700 directory", m)
		}
	}
	t.Logf("%d rounds: the socket seen %d times, a private directory %d times", s.rounds, len(s.socket), len(s.tmpDirs))
	if left, _ := filepath.Glob(filepath.Join(dir, base+".tmp-*")); len(left) > 0 {
		t.Fatalf("private directories left: %v", left)
	}
	if r := d.c.get(t, "/healthz"); r.status != 200 {
		t.Fatalf("healthz %d", r.status)
	}
	d.stop(t)
	if _, err := os.Lstat(cfg.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the socket is left after Run returned (%v)", err)
	}
}

// TestListenUnixLinksInPlace: at the moment the socket is linked at its
// path, the path does not exist yet, and the socket already has its mode
// in a private 0700 directory; a directory a crashed start left is
// removed; a path too long for bind(2) once inside the private directory
// still works; Close leaves a socket that replaced ours alone.
func TestListenUnixLinksInPlace(t *testing.T) {
	root := shortDir(t)
	for _, c := range []struct {
		name string
		path string
	}{
		{"short", filepath.Join(root, "api.sock")},
		// 104 bytes: fits bind(2), but not once inside path.tmp-N/.
		{"long", filepath.Join(root, strings.Repeat("d", 104-len(root)-len("/x.sock")-1), "x.sock")},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := c.path
			if len(path) > maxSocketPath {
				t.Fatalf("test path of %d bytes is too long for bind(2)", len(path))
			}
			if c.name == "long" && len(path+".tmp-4294967295/s") <= maxSocketPath {
				t.Fatalf("test path of %d bytes: its temporary name fits bind(2), the case is not exercised", len(path))
			}
			dir := filepath.Dir(path)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			// A crashed start's leftover: a private directory with a socket.
			left := filepath.Join(dir, filepath.Base(path)+".tmp-123")
			if err := os.Mkdir(left, 0o700); err != nil {
				t.Fatal(err)
			}
			if len(filepath.Join(left, "s")) <= maxSocketPath { // else an empty one
				lln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(left, "s"), Net: "unix"})
				if err != nil {
					t.Fatal(err)
				}
				lln.SetUnlinkOnClose(false)
				lln.Close()
			}

			var atLink []string
			ln, err := listenUnixObserved(path, 0o660, -1, func(tmp string) {
				if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
					atLink = append(atLink, fmt.Sprintf("the final path exists before the link (%v)", err))
				}
				if fi, err := os.Lstat(filepath.Dir(tmp)); err != nil || fi.Mode().Perm() != 0o700 || filepath.Dir(filepath.Dir(tmp)) != dir {
					atLink = append(atLink, fmt.Sprintf("private directory %s: %v %v, want 0700 beside the socket", filepath.Dir(tmp), fi.Mode(), err))
				}
				if fi, err := os.Lstat(tmp); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
					atLink = append(atLink, fmt.Sprintf("socket before the link: %v %v, want a socket 0660", fi.Mode(), err))
				}
				atLink = append(atLink, "called")
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(atLink) != 1 || atLink[0] != "called" {
				t.Fatalf("at the link: %v", atLink)
			}
			fi, err := os.Lstat(path)
			if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
				t.Fatalf("socket %v %v, want a socket 0660", fi.Mode(), err)
			}
			if tmps, _ := filepath.Glob(path + ".tmp-*"); len(tmps) > 0 {
				t.Fatalf("private directories left (the crashed one included): %v", tmps)
			}
			// It serves.
			go func() {
				if c, err := ln.Accept(); err == nil {
					c.Write([]byte("ok"))
					c.Close()
				}
			}()
			conn, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 2)
			if _, err := io.ReadFull(conn, b); err != nil || string(b) != "ok" {
				t.Fatalf("read %q: %v", b, err)
			}
			conn.Close()
			// Another socket takes the path: our Close leaves it.
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			other, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			ln.Close()
			if _, err := os.Lstat(path); err != nil {
				t.Fatalf("Close removed another listener's socket: %v", err)
			}
		})
	}
}
