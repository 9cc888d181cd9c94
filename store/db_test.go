package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestOpenLockedFailsFast(t *testing.T) {
	path := filepath.Join(t.TempDir(), "held.db")
	holder, err := Open(path, &Options{Command: "store test holder"})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()

	// flock locks belong to the open file description, so a second Open in
	// the same process conflicts just as another process would.
	for _, ro := range []bool{false, true} {
		start := time.Now()
		db, err := Open(path, &Options{LockTimeout: 200 * time.Millisecond, ReadOnly: ro})
		elapsed := time.Since(start)
		if err == nil {
			db.Close()
			t.Fatalf("read-only=%v: second Open succeeded while the file is held", ro)
		}
		if !errors.Is(err, ErrLocked) {
			t.Fatalf("read-only=%v: err = %v, want ErrLocked", ro, err)
		}
		var le *LockedError
		if !errors.As(err, &le) || le.Path != path {
			t.Errorf("read-only=%v: err = %#v, want *LockedError for %s", ro, err, path)
		}
		// The holder is this process: the message names it from its record.
		wantStart := fmt.Sprintf("database busy: %s is held by pid %d (store test holder), since ", path, os.Getpid())
		wantEnd := "; gave up waiting for its lock after 200ms"
		if msg := err.Error(); !strings.HasPrefix(msg, wantStart) || !strings.HasSuffix(msg, wantEnd) {
			t.Errorf("message:\n got %s\nwant %s...%s", msg, wantStart, wantEnd)
		}
		if elapsed > 800*time.Millisecond {
			t.Errorf("read-only=%v: gave up after %s, want about 200ms", ro, elapsed)
		}
	}

	// Once released, the file opens.
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := Open(path, &Options{LockTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open after release: %v", err)
	}
	db.Close()
}

func TestReadOnlyOpensShareTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.db")
	db, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	a, err := Open(path, &Options{ReadOnly: true, LockTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(path, &Options{ReadOnly: true, LockTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("second read-only open: %v", err)
	}
	defer b.Close()
	if _, err := Open(path, &Options{LockTimeout: 200 * time.Millisecond}); !errors.Is(err, ErrLocked) {
		t.Errorf("read-write open while readers hold the file: %v, want ErrLocked", err)
	}
}

func TestReadOnlyOpenOfMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.db")
	_, err := Open(path, &Options{ReadOnly: true})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want fs.ErrNotExist", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name %s", err, path)
	}
	if _, serr := os.Stat(path); !errors.Is(serr, fs.ErrNotExist) {
		t.Errorf("read-only open created the file (stat: %v)", serr)
	}
}

func TestOpenCreatesFileWithMode0600(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new.db")
	db, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&^0o600 != 0 {
		t.Errorf("mode %v, want at most 0600", fi.Mode().Perm())
	}
	if db.Path() != path || db.Cleaned() != 0 || db.ReadOnly() {
		t.Errorf("Path %q Cleaned %d ReadOnly %v", db.Path(), db.Cleaned(), db.ReadOnly())
	}
}

func TestOpenInMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "no", "such")
	path := filepath.Join(dir, "k.db")
	_, err := Open(path, nil)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want fs.ErrNotExist", err)
	}
	if !strings.Contains(err.Error(), dir+" does not exist") {
		t.Errorf("error %q does not say the directory is missing", err)
	}
}

func TestOpenRejectsForeignFiles(t *testing.T) {
	t.Run("not bbolt", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "junk.db")
		if err := os.WriteFile(path, []byte(strings.Repeat("not a database ", 1000)), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, ro := range []bool{false, true} {
			if _, err := Open(path, &Options{ReadOnly: ro}); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), path) {
				t.Errorf("read-only=%v: err = %v, want ErrFormat naming the path", ro, err)
			}
		}
	})
	t.Run("other format version", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "k.db")
		db, err := Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = db.Bolt().Update(func(tx *bolt.Tx) error {
			return tx.Bucket(BucketMeta).Put(KeyFormatVersion, GenerationKey(FormatVersion+1))
		})
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, ro := range []bool{false, true} {
			if _, err := Open(path, &Options{ReadOnly: ro}); !errors.Is(err, ErrFormat) {
				t.Errorf("read-only=%v: err = %v, want ErrFormat", ro, err)
			}
		}
	})
}

func TestGenerationKeySortsNumerically(t *testing.T) {
	prev := GenerationKey(0)
	for _, n := range []uint64{1, 2, 255, 256, 65535, 1 << 32, 1<<64 - 1} {
		k := GenerationKey(n)
		if string(k) <= string(prev) {
			t.Errorf("GenerationKey(%d) does not sort after its predecessor", n)
		}
		if got, ok := decodeUint64(k); !ok || got != n {
			t.Errorf("round trip %d -> %d", n, got)
		}
		prev = k
	}
}
