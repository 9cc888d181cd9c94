package serve

import (
	"context"
	"errors"
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
