package main

// Damaged and busy databases, end to end against the built binary: a
// corrupt file is exit 1 with a message naming the file, never a panic trace
// or a signal; a held one is exit 7 naming the holder.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/internal/dbdamage"
	"github.com/kmaterialize/kmaterialize/store"
)

// buildDB writes table "t" of n rows "k-%05d" with its checkpoint, through
// the store API, and returns the rows.
func buildDB(t *testing.T, path string, n int) map[string]string {
	t.Helper()
	db, err := store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows := map[string]string{}
	for i := 0; i < n; i++ {
		rows[fmt.Sprintf("k-%05d", i)] = fmt.Sprintf("v-%d-%s", i, strings.Repeat("x", 40))
	}
	g, err := db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	err = g.Write(func(tb store.Rows) error {
		for k, v := range rows {
			if err := tb.Put([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cp := checkpoint.Checkpoint{Topic: "t", EndMark: checkpoint.EndHigh, Partitions: []checkpoint.Partition{{Partition: 0, High: int64(n), End: int64(n)}}}
	err = g.Publish(store.TableMeta{Topic: "t", Fold: "latest"}, func(tx *bolt.Tx) error { return checkpoint.Save(tx, "t", cp) })
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// binRun runs the built binary and returns what it did.
func binRun(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	r := result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
	t.Logf("$ kmaterialize %s\n-> %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), cmd.ProcessState, r.stdout, r.stderr)
	return r
}

// dbCommands are every command that opens the database, against path.
func dbCommands(path string) map[string][]string {
	return map[string][]string{
		"get":     {"get", "--db", path, "--table", "t", "k-00000"},
		"scan":    {"scan", "--db", path, "--table", "t"},
		"export":  {"export", "--db", path, "--table", "t"},
		"tables":  {"tables", "--db", path},
		"rebuild": {"rebuild", "--db", path, "--brokers", "127.0.0.1:1", "--topic", "t", "--stall-timeout", "2s"},
		"check":   {"check", "--db", path},
		"compact": {"compact", "--db", path},
		"drop":    {"drop", "--db", path, "--table", "t"},
	}
}

func TestCorruptDatabaseEveryCommand(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string, l dbdamage.Layout)
		// intact: commands that do not read the damaged pages, and work.
		intact map[string]bool
		reason string
	}{
		{name: "truncated", reason: "truncated", damage: func(t *testing.T, path string, l dbdamage.Layout) {
			if err := os.Truncate(path, int64(l.Pgid-1)*int64(l.PageSize)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "zeroed meta pages", reason: "both meta pages", damage: func(t *testing.T, path string, l dbdamage.Layout) {
			if err := dbdamage.ZeroMetas(path, l.PageSize); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "garbage leaf", reason: "", intact: map[string]bool{"tables": true}, damage: func(t *testing.T, path string, l dbdamage.Layout) {
			if err := dbdamage.Garbage(path, l.PageSize, l.Leaves[0], 7); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "child past the end of the map", reason: "memory fault", intact: map[string]bool{"tables": true}, damage: func(t *testing.T, path string, l dbdamage.Layout) {
			if err := dbdamage.SetBranchChild(path, l.PageSize, l.RowsRoot, 0, (1<<40)/uint64(l.PageSize)); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tables.db")
			buildDB(t, path, 3000)
			if r := binRun(t, "check", "--db", path); r.code != 0 || !strings.HasSuffix(r.stdout, "ok\n") {
				t.Fatalf("check of the sound file: exit %d, want 0 and ok", r.code)
			}
			l, err := dbdamage.Inspect(path, "t")
			if err != nil {
				t.Fatal(err)
			}
			tc.damage(t, path, l)
			for name, args := range dbCommands(path) {
				r := binRun(t, args...)
				if strings.Contains(r.stderr, "panic:") || strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "SIGBUS") {
					t.Errorf("%s: a crash trace on stderr", name)
				}
				if tc.intact[name] {
					if r.code != 0 {
						t.Errorf("%s: exit %d, want 0: it reads none of the damaged pages", name, r.code)
					}
					continue
				}
				if r.code != exitError {
					t.Errorf("%s: exit %d (%s), want 1", name, r.code, r.stderr)
				}
				if !strings.Contains(r.stderr, "database is corrupt: "+path+": ") || !strings.Contains(r.stderr, tc.reason) {
					t.Errorf("%s: stderr does not say %s is corrupt (%q)", name, path, tc.reason)
				}
				if name == "check" {
					if !strings.Contains(r.stdout, "problem: ") || !strings.Contains(r.stderr, "--replace-corrupt") {
						t.Errorf("check: want the problems on stdout and the hint to start over")
					}
				} else if !strings.Contains(r.stderr, "Try: kmaterialize check --db "+path) || !strings.Contains(r.stderr, "--replace-corrupt") {
					t.Errorf("%s: the hint does not mention check and --replace-corrupt", name)
				}
			}
		})
	}
}

// TestFreedPageReferenced: a branch of the rows points at a page the last
// publish freed (a stale but well-formed leaf of other keys). Reads cannot
// tell; bbolt's page walk can, and it panics in a goroutine of its own: check
// and rebuild run it in a child, and must report corruption (exit 1), not
// crash.
func TestFreedPageReferenced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tables.db")
	db, err := store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	// First generation: short "z-" rows, freed by the second publish.
	g, err := db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	err = g.Write(func(tb store.Rows) error {
		for i := 0; i < 3000; i++ {
			if err := tb.Put([]byte(fmt.Sprintf("z-%05d", i)), []byte("v")); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = g.Publish(store.TableMeta{Topic: "t"}, nil)
	}
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	old, err := dbdamage.Inspect(path, "t")
	if err != nil {
		t.Fatal(err)
	}
	buildDB(t, path, 3000)
	cur, err := dbdamage.Inspect(path, "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := dbdamage.SetBranchChild(path, cur.PageSize, cur.RowsRoot, 0, old.Leaves[0]); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"check", "rebuild"} {
		r := binRun(t, dbCommands(path)[name]...)
		if r.code != exitError || !strings.Contains(r.stderr, "database is corrupt: "+path+": ") ||
			strings.Contains(r.stderr, "panic:") || strings.Contains(r.stderr, "goroutine ") {
			t.Errorf("%s: exit %d, want 1 saying %s is corrupt, without a crash trace", name, r.code, path)
		}
		if !strings.Contains(r.stdout+r.stderr, "bbolt crashed walking its pages") {
			t.Errorf("%s: the report does not say bbolt's page walk crashed (the fault this test is about)", name)
		}
	}
}

// TestNewerFormatRefused: a file of a newer format version is exit 1 with a
// message saying so, from a query and a rebuild.
func TestNewerFormatRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tables.db")
	buildDB(t, path, 10)
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(store.BucketMeta).Put(store.KeyFormatVersion, store.GenerationKey(store.FormatVersion+1))
	})
	bdb.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"get", "rebuild", "check"} {
		r := binRun(t, dbCommands(path)[name]...)
		if r.code != exitError || !strings.Contains(r.stderr+r.stdout, fmt.Sprintf("format version %d", store.FormatVersion+1)) ||
			!strings.Contains(r.stderr+r.stdout, "newer") || strings.Contains(r.stderr, "corrupt") {
			t.Errorf("%s: exit %d, want 1 saying the format is newer (and not that the file is corrupt)", name, r.code)
		}
	}
}

// TestReplaceCorrupt: rebuild --replace-corrupt moves the damaged file aside
// (kept byte for byte) and builds the table fresh.
func TestReplaceCorrupt(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 2)
	all := produce(t, topic, genRecords(rng, []int32{0, 1}, 40))
	dir := t.TempDir()
	path := filepath.Join(dir, "tables.db")
	buildDB(t, path, 100)
	if err := dbdamage.ZeroMetas(path, store.PageSize); err != nil {
		t.Fatal(err)
	}
	damaged, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	r := mustCLI(t, exitError, rebuildArgs(topic, path)...)
	if !strings.Contains(r.stderr, "--replace-corrupt") {
		t.Fatalf("without the flag: no hint of --replace-corrupt:\n%s", r.stderr)
	}
	r = mustCLI(t, 0, append([]string{"--log-format", "json"}, rebuildArgs(topic, path, "--replace-corrupt")...)...)
	asides, _ := filepath.Glob(path + ".corrupt-*")
	if len(asides) != 1 {
		t.Fatalf("files moved aside: %v, want one %s.corrupt-<time>", asides, path)
	}
	moved := ""
	for _, l := range logLines(r.stderr) {
		if s, ok := l["moved_to"].(string); ok {
			moved = s
		}
	}
	if moved != asides[0] {
		t.Fatalf("the log says it moved the file to %q, the file is at %q", moved, asides[0])
	}
	if kept, err := os.ReadFile(asides[0]); err != nil || !bytes.Equal(kept, damaged) {
		t.Fatalf("the damaged file was not kept as it was (%v)", err)
	}
	want, _, _ := oracle(all, nil)
	checkTable(t, want, scanTable(t, path, topic))
	if r := binRun(t, "check", "--db", path); r.code != 0 {
		t.Fatalf("check of the fresh file: exit %d", r.code)
	}
}

// TestBusyExit7 runs the binary while this test process holds the database
// read-write: exit 7, naming this process from its holder record.
func TestBusyExit7(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tables.db")
	buildDB(t, path, 10)
	held, err := store.Open(path, &store.Options{Command: "kmaterialize rebuild --db " + path + " --table t"})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for name, args := range dbCommands(path) {
		r := binRun(t, append([]string{args[0], "--lock-timeout", "200ms"}, args[1:]...)...)
		if r.code != exitBusy {
			t.Errorf("%s: exit %d, want 7", name, r.code)
		}
		want := fmt.Sprintf("database busy: %s is held by pid %d (kmaterialize rebuild --db %s --table t), since ", path, os.Getpid(), path)
		if !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "after 200ms") {
			t.Errorf("%s: stderr does not name the holder, pid %d, and the timeout", name, os.Getpid())
		}
	}
}
