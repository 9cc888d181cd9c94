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

// listenUnix creates the API socket at path with mode and group gid (-1:
// the process's). A missing directory is created 0700 (0750 with a group).
// A file already at path is replaced only if it is a socket no one listens
// on (a daemon that was killed left it); anything else there is an error.
func listenUnix(path string, mode os.FileMode, gid int) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
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
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on socket %s: %w", path, err)
	}
	// Close unlinks the file (the default for a listener that created it).
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket %s: set mode %#o: %w", path, uint32(mode), err)
	}
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("socket %s: set group %d: %w", path, gid, err)
		}
	}
	return ln, nil
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
