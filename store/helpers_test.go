package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the child processes some tests need.
	if path := os.Getenv(envPageCheck); path != "" {
		if err := PageCheckMain(path, 5*time.Second, os.Getenv(envPageCheckFull) != "", os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	if path := os.Getenv(envHold); path != "" {
		os.Exit(holdMain(path))
	}
	goleak.VerifyTestMain(m)
}

// Environment variables that make the test binary a helper process.
const (
	// envPageCheck=PATH: run PageCheckMain on PATH (the child of
	// testPageCheck).
	envPageCheck = "KMZ_STORE_TEST_PAGECHECK"
	// envPageCheckFull=1: with envPageCheck, the full check.
	envPageCheckFull = "KMZ_STORE_TEST_PAGECHECK_FULL"
	// envHold=PATH: open PATH read-write, print "ready", hold it until
	// stdin closes, close it and exit 0.
	envHold = "KMZ_STORE_TEST_HOLD"
)

// testPageCheck is a PageCheck that runs the walk in a child: this test
// binary with envPageCheck set.
var testPageCheck = ChildPageCheck(func(ctx context.Context, path string, _ time.Duration, full bool) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envPageCheck+"="+path)
	if full {
		cmd.Env = append(cmd.Env, envPageCheckFull+"=1")
	}
	return cmd
})

func holdMain(path string) int {
	db, err := Open(path, &Options{Command: "store test helper hold --db " + path})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := db.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// openTemp opens a new read-write DB in t.TempDir and closes it at cleanup.
func openTemp(t *testing.T) *DB {
	t.Helper()
	db, err := Open(filepath.Join(t.TempDir(), "k.db"), nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// oracle is the independent model of a table: a plain map.
type oracle map[string]string

// sortedKeys returns the oracle's keys with prefix, in byte order.
func (o oracle) sortedKeys(prefix string) []string {
	var ks []string
	for k := range o {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	return ks
}

// op is one row operation, applied both to the oracle and to a Rows.
type op struct {
	del   bool
	key   []byte
	value []byte
}

// randomOps generates n puts and deletes over a small key space so that
// overwrites and deletes of present keys happen. The seed is logged.
func randomOps(t *testing.T, seed uint64, n int) []op {
	t.Helper()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	prefixes := []string{"a/", "b/", "ab/", "z"}
	ops := make([]op, n)
	for i := range ops {
		k := fmt.Sprintf("%s%04d", prefixes[r.IntN(len(prefixes))], r.IntN(n/2+1))
		if r.IntN(5) == 0 {
			ops[i] = op{del: true, key: []byte(k)}
			continue
		}
		v := make([]byte, r.IntN(40))
		for j := range v {
			v[j] = byte(r.IntN(256))
		}
		ops[i] = op{key: []byte(k), value: v}
	}
	return ops
}

// writeOps writes ops to g in Write transactions of batch ops each, reusing
// one key and one value buffer across ops (as a replay does), and applies
// them to o.
func writeOps(t *testing.T, g *Generation, o oracle, ops []op, batch int) {
	t.Helper()
	var kbuf, vbuf []byte
	for start := 0; start < len(ops); start += batch {
		end := min(start+batch, len(ops))
		err := g.Write(func(tb Rows) error {
			for _, op := range ops[start:end] {
				kbuf = append(kbuf[:0], op.key...)
				if op.del {
					if err := tb.Delete(kbuf); err != nil {
						return err
					}
					continue
				}
				vbuf = append(vbuf[:0], op.value...)
				if err := tb.Put(kbuf, vbuf); err != nil {
					return err
				}
				// Scribble over the buffers: the store must have copied.
				for i := range vbuf {
					vbuf[i] = 0xEE
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("Write: %v", err)
		}
		for _, op := range ops[start:end] {
			if op.del {
				delete(o, string(op.key))
			} else {
				o[string(op.key)] = string(op.value)
			}
		}
	}
}

// scanAll returns the table's rows in Scan order.
func scanAll(t *testing.T, db *DB, table string) ([]string, oracle) {
	t.Helper()
	var keys []string
	rows := oracle{}
	err := db.Scan(table, nil, 0, func(k, v []byte) error {
		keys = append(keys, string(k))
		rows[string(k)] = string(v)
		return nil
	})
	if err != nil {
		t.Fatalf("Scan(%q): %v", table, err)
	}
	return keys, rows
}

// generationKeys lists the generation buckets in the file.
func generationKeys(t *testing.T, db *DB) []uint64 {
	t.Helper()
	var out []uint64
	err := db.Bolt().View(func(tx *bolt.Tx) error {
		return tx.Bucket(BucketGenerations).ForEach(func(k, v []byte) error {
			if v != nil {
				return errors.New("non-bucket entry in generations")
			}
			g, ok := decodeUint64(k)
			if !ok {
				return fmt.Errorf("bad generation key %x", k)
			}
			out = append(out, g)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// rawTable returns every key/value of the file's tables bucket entry and of
// the published generation, byte for byte, for "nothing changed" checks.
func rawTable(t *testing.T, db *DB, table string) (meta []byte, rows map[string][]byte) {
	t.Helper()
	rows = map[string][]byte{}
	err := db.Bolt().View(func(tx *bolt.Tx) error {
		meta = bytes.Clone(tx.Bucket(BucketTables).Get([]byte(table)))
		m, err := decodeMeta([]byte(table), meta)
		if err != nil {
			return err
		}
		gb := tx.Bucket(BucketGenerations).Bucket(GenerationKey(m.Generation))
		return gb.Bucket(BucketRows).ForEach(func(k, v []byte) error {
			rows[string(k)] = bytes.Clone(v)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return meta, rows
}
