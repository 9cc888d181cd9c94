package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
)

// TestBackupWhileApplying: backups taken while another goroutine applies
// commits are each one state of the database: opened read-only, a copy's
// table holds the published rows and exactly the applies up to its own
// counter row (an oracle rebuilt from that counter), never part of one;
// the copy's bytes hash to the digest Backup reported; the copy passes
// Check.
func TestBackupWhileApplying(t *testing.T) {
	db := openTemp(t)
	base := oracle{}
	g, err := db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	writeOps(t, g, base, randomOps(t, uint64(time.Now().UnixNano()), 300), 100)
	cp0 := checkpoint.Checkpoint{Topic: "events", EndMark: checkpoint.EndHigh, Partitions: []checkpoint.Partition{{Partition: 0, End: 300, High: 300}}}
	if err := g.Publish(TableMeta{Topic: "events", Fold: "latest", Records: 300}, func(tx *bolt.Tx) error { return checkpoint.Save(tx, "t", cp0) }); err != nil {
		t.Fatal(err)
	}
	const applies = 200
	// apply i puts seq/i and sets n to i, in one commit.
	want := func(n int) oracle {
		o := oracle{}
		for k, v := range base {
			o[k] = v
		}
		for i := 0; i <= n; i++ {
			o[fmt.Sprintf("seq/%04d", i)] = strconv.Itoa(i)
			o["n"] = strconv.Itoa(i)
		}
		return o
	}
	var wg sync.WaitGroup
	wg.Add(1)
	errc := make(chan error, 1)
	go func() {
		defer wg.Done()
		for i := 0; i < applies; i++ {
			_, err := db.Apply("t", g.ID(), func(tb Rows) error {
				if err := tb.Put([]byte(fmt.Sprintf("seq/%04d", i)), []byte(strconv.Itoa(i))); err != nil {
					return err
				}
				return tb.Put([]byte("n"), []byte(strconv.Itoa(i)))
			}, nil, nil)
			if err != nil {
				errc <- err
				return
			}
		}
	}()
	dir := t.TempDir()
	var states []int
	for b := 0; b < 5; b++ {
		path := filepath.Join(dir, fmt.Sprintf("copy-%d.db", b))
		info, err := BackupFile(db, path)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != info.SHA256 || int64(len(raw)) != info.Bytes {
			t.Fatalf("backup %d: %d bytes on disk with SHA-256 %x, info %+v", b, len(raw), sum, info)
		}
		cp, err := Open(path, &Options{ReadOnly: true})
		if err != nil {
			t.Fatalf("open backup %d: %v", b, err)
		}
		_, rows := scanAll(t, cp, "t")
		n := -1
		if v, ok := rows["n"]; ok {
			if n, err = strconv.Atoi(v); err != nil {
				t.Fatal(err)
			}
		}
		if diff := cmp.Diff(want(n), rows); n >= 0 && diff != "" {
			t.Fatalf("backup %d at apply %d (-oracle +copy):\n%s", b, n, diff)
		} else if n < 0 && !cmp.Equal(base, rows) {
			t.Fatalf("backup %d before any apply differs from the published rows", b)
		}
		if err := cp.Close(); err != nil {
			t.Fatal(err)
		}
		rep, err := Check(path, nil)
		if err != nil || !rep.OK() {
			t.Fatalf("check of backup %d: %v %+v", b, err, rep)
		}
		states = append(states, n)
	}
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	t.Logf("backups at applies %v", states)
	// One more when the applies are over: all of them.
	path := filepath.Join(dir, "last.db")
	if _, err := BackupFile(db, path); err != nil {
		t.Fatal(err)
	}
	cp, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	if _, rows := scanAll(t, cp, "t"); !cmp.Equal(want(applies-1), rows) {
		t.Fatalf("the last backup differs from the oracle after every apply")
	}
}

// TestWriteFileAtomicFailure: a fill that fails leaves the output as it
// was and no file beside it.
func TestWriteFileAtomicFailure(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.db")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteFileAtomic(path, func(w io.Writer) error {
		_, _ = w.Write([]byte("half of a copy"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("WriteFileAtomic: %v, want boom", err)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, []byte("old")) {
		t.Fatalf("the output after a failed fill: %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("%d files in the directory after a failed fill, want only the output", len(ents))
	}
}
