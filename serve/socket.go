package serve

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ErrSocketInUse is returned by Run when another process listens on the
// configured socket (a daemon of another database, say).
var ErrSocketInUse = errors.New("socket in use")

// maxSocketPath is the longest path bind(2) takes for a unix socket
// (sun_path holds 108 bytes with its NUL).
const maxSocketPath = 107

// tmpSocketName is the socket's name inside its private directory.
const tmpSocketName = "s"

// listenUnix creates the API socket at path with mode and group gid (-1:
// the process's), so that path never holds a socket with another mode or
// group (see listenUnixObserved). A missing directory is created 0700
// (0750 with a group). A file already at path is replaced only if it is a
// socket no one listens on (a daemon that was killed left it); anything
// else there is an error. Closing the listener removes the socket, if
// path still names it.
func listenUnix(path string, mode os.FileMode, gid int) (net.Listener, error) {
	return listenUnixObserved(path, mode, gid, nil)
}

// listenUnixObserved is listenUnix; beforeLink (tests) is called with the
// socket's temporary path once it has its mode and group, just before it
// is linked at path.
//
// bind(2) creates the socket with the process's umask, which the daemon
// does not change (it is process-wide), so the socket is bound in a
// private directory beside path (path.tmp-N, 0700: no one else can reach
// what is inside), given its mode and group there, and then linked at
// path (link(2) fails rather than replace what another process put there
// meanwhile; rename(2) where the filesystem has no links), and the
// directory removed. A crash leaves at most such a directory, removed at
// the next start.
func listenUnixObserved(path string, mode os.FileMode, gid int, beforeLink func(tmp string)) (net.Listener, error) {
	dir, base := filepath.Split(path)
	dir = filepath.Clean(dir)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		dmode := os.FileMode(0o700)
		if gid >= 0 {
			dmode = 0o750
		}
		if err := os.MkdirAll(dir, dmode); err != nil {
			return nil, fmt.Errorf("create socket directory %s: %w", dir, err)
		}
		// MkdirAll's mode is filtered by the umask; say it exactly.
		if err := os.Chmod(dir, dmode); err != nil {
			return nil, fmt.Errorf("create socket directory %s: %w", dir, err)
		}
		if gid >= 0 {
			if err := os.Chown(dir, -1, gid); err != nil {
				return nil, fmt.Errorf("socket directory %s: set group %d: %w", dir, gid, err)
			}
		}
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	removeTmpDirs(dir, base)
	// MkdirTemp creates it 0700 (less with an odd umask: then say 0700).
	tmpDir, err := os.MkdirTemp(dir, base+".tmp-")
	if err != nil {
		return nil, fmt.Errorf("socket %s: create its private directory: %w", path, err)
	}
	defer os.RemoveAll(tmpDir) // only ours: at most the socket's temporary name
	if err := os.Chmod(tmpDir, 0o700); err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	tmp := filepath.Join(tmpDir, tmpSocketName)
	ln, err := bindUnix(tmpDir, tmp)
	if err != nil {
		return nil, fmt.Errorf("listen on socket %s: %w", path, err)
	}
	// The listener would unlink the name it bound, not the final one.
	ln.SetUnlinkOnClose(false)
	fail := func(err error) (net.Listener, error) {
		ln.Close()
		return nil, err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fail(fmt.Errorf("socket %s: set mode %#o: %w", path, uint32(mode), err))
	}
	if gid >= 0 {
		if err := os.Chown(tmp, -1, gid); err != nil {
			return fail(fmt.Errorf("socket %s: set group %d: %w", path, gid, err))
		}
	}
	fi, err := os.Lstat(tmp)
	if err != nil {
		return fail(fmt.Errorf("socket %s: %w", path, err))
	}
	if beforeLink != nil {
		beforeLink(tmp)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fail(fmt.Errorf("socket %s: another process created it while this one started: %w", path, ErrSocketInUse))
		}
		// A filesystem without hard links: rename (it would replace a
		// socket made since removeStale, a window of microseconds).
		if err := os.Rename(tmp, path); err != nil {
			return fail(fmt.Errorf("socket %s: move it into place: %w", path, err))
		}
	}
	return &unixListener{UnixListener: ln, path: path, stat: fi}, nil
}

// bindUnix listens on a socket at tmp (in dir). A path too long for bind(2)
// is bound through the directory's file descriptor (/proc/self/fd/N/s),
// so the temporary name is no shorter limit than the final one.
func bindUnix(dir, tmp string) (*net.UnixListener, error) {
	if len(tmp) <= maxSocketPath {
		return net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return net.ListenUnix("unix", &net.UnixAddr{Name: fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), tmpSocketName), Net: "unix"})
}

// removeTmpDirs removes the private directories a crashed start left
// beside the socket (base.tmp-N holding nothing but sockets).
func removeTmpDirs(dir, base string) {
	matches, _ := filepath.Glob(filepath.Join(dir, globEscape(base)+".tmp-*"))
	for _, m := range matches {
		fi, err := os.Lstat(m)
		if err != nil || !fi.IsDir() {
			continue
		}
		entries, err := os.ReadDir(m)
		if err != nil {
			continue
		}
		onlySockets := true
		for _, e := range entries {
			if e.Type()&fs.ModeSocket == 0 {
				onlySockets = false
			}
		}
		if onlySockets {
			os.RemoveAll(m)
		}
	}
}

// globEscape quotes filepath.Match's special characters.
func globEscape(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', '\\':
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(b)
}

// unixListener is the API socket's listener: Close removes the socket
// from its path, unless path names another file by then (a socket another
// daemon made after this one stopped listening).
type unixListener struct {
	*net.UnixListener
	path string
	stat fs.FileInfo // the socket's own inode
}

func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	if fi, serr := os.Lstat(l.path); serr == nil && os.SameFile(fi, l.stat) {
		if rerr := os.Remove(l.path); rerr != nil && err == nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = rerr
		}
	}
	return err
}

// removeStale removes a socket at path that no one listens on.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("socket %s: a %s is in the way (not a socket); remove it or choose another socket path", path, kind(fi))
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("socket %s: another process listens on it: %w", path, ErrSocketInUse)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("socket %s: cannot tell whether another process listens on it: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("socket %s: remove the stale socket: %w", path, err)
	}
	return nil
}

func kind(fi fs.FileInfo) string {
	switch {
	case fi.IsDir():
		return "directory"
	case fi.Mode()&fs.ModeSymlink != 0:
		return "symbolic link"
	case fi.Mode().IsRegular():
		return "regular file"
	}
	return "file of another kind"
}
