package main

// The latest fold's run files (rebuild --memory) under crashes and write
// failures, and compact. A rebuild whose rows exceed --memory/4 spills them
// as sorted runs into FILE.runs/ and merges them at the end; every outcome
// is compared with the oracle fold of the records produced.

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/internal/failpoint"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/store"
)

// spillMemory is the --memory of the spilling rebuilds: the smallest, which
// holds 256 KiB of rows before spilling a run.
const spillMemory = "1MiB"

// spillRecords are n records of mostly distinct keys with 250-byte values
// over two partitions, about 300 bytes of held rows each, and every tenth
// one a tombstone of a key of genRecords: at --memory 1MiB, 3000 of them
// spill several runs.
func spillRecords(rng *rand.Rand, n int) []localkafka.Record {
	out := make([]localkafka.Record, 0, n)
	for i := range n {
		if i%10 == 9 {
			p := int32(i % 2)
			out = append(out, localkafka.Record{Partition: p, Key: []byte(fmt.Sprintf("p%d-k%02d", p, rng.Intn(8)))})
			continue
		}
		// A key stays in one partition (across partitions the order of
		// two records of a key is undefined).
		k := rng.Intn(4 * n)
		v := bytes.Repeat([]byte{byte('a' + rng.Intn(26))}, 250)
		out = append(out, localkafka.Record{Partition: int32(k % 2), Key: []byte(fmt.Sprintf("sp-%05d", k)), Value: v})
	}
	return out
}

// runFiles lists the run files beside db.
func runFiles(t *testing.T, db string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(store.RunsDir(db), "*.run"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// publishedRuns is the number of runs the rebuild's "published" log line
// reports.
func publishedRuns(t *testing.T, stderr string) int {
	t.Helper()
	for _, l := range logLines(stderr) {
		if l["message"] == "published" {
			n, ok := l["runs"].(float64)
			if !ok {
				t.Fatalf("published log line without runs: %v", l)
			}
			return int(n)
		}
	}
	t.Fatalf("no published log line in:\n%s", stderr)
	return 0
}

// checkExport compares export's rows, partitions and totals with want.
func checkExport(t *testing.T, db, table, name string, want tableState) {
	t.Helper()
	if diff := cmp.Diff(want, exportState(t, db, table)); diff != "" {
		t.Fatalf("export: not exactly table %s (-%s +export):\n%s", name, name, diff)
	}
}

// TestSpillingRebuildExact: a rebuild that spills many runs publishes
// exactly the oracle's table (rows, checkpoint, totals, key count) and
// leaves no run file.
func TestSpillingRebuildExact(t *testing.T) {
	rng := newRand(t)
	topic := crashTopic(t, 2)
	db := dbPath(t)
	recs := produce(t, topic, append(genRecords(rng, []int32{0, 1}, 200), spillRecords(rng, 4000)...))
	r := mustCLI(t, 0, append([]string{"--log-format", "json"}, rebuildArgs(topic, db, "--memory", spillMemory)...)...)
	if n := publishedRuns(t, r.stderr); n < 3 {
		t.Fatalf("the rebuild spilled %d runs, want several", n)
	}
	checkExport(t, db, topic, "oracle", oracleState(recs, 2))
	if f := runFiles(t, db); len(f) != 0 {
		t.Fatalf("run files left after a successful rebuild: %v", f)
	}
	if _, err := os.Stat(store.RunsDir(db)); !os.IsNotExist(err) {
		t.Fatalf("the runs directory is left after a successful rebuild: %v", err)
	}
	boltCheck(t, db)
}

// TestKill9BetweenRuns parks a spilling rebuild just after its second run
// file (failpoint run-written@2), kills it with SIGKILL, and checks: the
// run files are on disk, readers see exactly the old table, and the next
// rebuild (which does not spill, so only the open can remove them) removes
// the run files and the unpublished generation and publishes exactly the
// new table; a spilling rebuild after it publishes the same.
func TestKill9BetweenRuns(t *testing.T) {
	bin := failpointBinary(t)
	rng := newRand(t)
	topic, db, a, b := crashSetup(t, spillRecords(rng, 3000))
	file := filepath.Join(t.TempDir(), "failpoint")
	c := startChild(t, []string{failpoint.EnvPoint + "=" + failpoint.RunWritten + "@2", failpoint.EnvFile + "=" + file},
		bin, append([]string{"--log-format", "json"}, rebuildArgs(topic, db, "--memory", spillMemory)...)...)
	awaitFailpoint(t, c, file, "failpoint "+failpoint.RunWritten+" parked")
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if ws := c.wait(t, 30*time.Second); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed by SIGKILL", ws)
	}
	left := runFiles(t, db)
	if len(left) != 2 {
		t.Fatalf("run files after the kill: %v, want the 2 written", left)
	}
	boltCheck(t, db)
	checkExport(t, db, topic, "A", a)

	r := mustCLI(t, 0, append([]string{"--log-format", "json"}, rebuildArgs(topic, db)...)...)
	if n := publishedRuns(t, r.stderr); n != 0 {
		t.Fatalf("the cleanup rebuild spilled %d runs, want none (default --memory)", n)
	}
	removed := 0
	for _, l := range logLines(r.stderr) {
		if l["level"] == "warn" && strings.Contains(fmt.Sprint(l["message"]), "run files") {
			n, _ := l["files"].(float64)
			removed += int(n)
		}
	}
	if removed != len(left) {
		t.Fatalf("the open reported removing %d files, want %d; stderr:\n%s", removed, len(left), r.stderr)
	}
	if f := runFiles(t, db); len(f) != 0 {
		t.Fatalf("run files after the next rebuild: %v", f)
	}
	checkExport(t, db, topic, "B", b)
	if ids := generationIDs(generationRows(t, db)); !cmp.Equal(ids, []uint64{3}) {
		t.Fatalf("generations after the clean rebuild: %v, want only 3", ids)
	}
	r = mustCLI(t, 0, append([]string{"--log-format", "json"}, rebuildArgs(topic, db, "--memory", spillMemory)...)...)
	if n := publishedRuns(t, r.stderr); n < 2 {
		t.Fatalf("the spilling rebuild spilled %d runs, want several", n)
	}
	checkExport(t, db, topic, "B", b)
	boltCheck(t, db)
}

// TestRunsFailure: a spill that cannot create its run file (FILE.runs is a
// regular file, so the directory cannot be made, whoever runs the test), or
// whose write fails as on a full disk (the run-written failpoint sets
// RLIMIT_FSIZE to 0 after the first run, so the second run's writes fail
// with EFBIG), exits 1 naming the file and the cause, publishes nothing,
// leaves no run file, and the next rebuild publishes exactly the new
// table.
func TestRunsFailure(t *testing.T) {
	fp := failpointBinary(t)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, db string) (env []string, bin string)
		want  func(db string) string // in the final error line
	}{
		{
			name: "not-creatable",
			setup: func(t *testing.T, db string) ([]string, string) {
				if err := os.WriteFile(store.RunsDir(db), []byte("not a directory"), 0o600); err != nil {
					t.Fatal(err)
				}
				return nil, binPath
			},
			want: func(db string) string {
				return "create run file " + store.RunPath(db, 2, 1) + ": open " + store.RunPath(db, 2, 1) + ": not a directory"
			},
		},
		{
			name: "disk-full",
			setup: func(t *testing.T, db string) ([]string, string) {
				return []string{failpoint.EnvPoint + "=" + failpoint.RunWritten + "=nowrite",
					failpoint.EnvFile + "=" + filepath.Join(t.TempDir(), "failpoint")}, fp
			},
			want: func(db string) string {
				return "write run file " + store.RunPath(db, 2, 2) + ": write " + store.RunPath(db, 2, 2) + ": file too large"
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := newRand(t)
			topic, db, a, b := crashSetup(t, spillRecords(rng, 3000))
			env, bin := tc.setup(t, db)
			c := startChild(t, env, bin, append([]string{"--log-format", "json"}, rebuildArgs(topic, db, "--memory", spillMemory)...)...)
			ws := c.wait(t, 60*time.Second)
			stderr := c.stderr.String()
			if ws.Signaled() || ws.ExitStatus() != exitError {
				t.Fatalf("rebuild ended with %v, want exit %d; stderr:\n%s", ws, exitError, stderr)
			}
			var final string
			for _, l := range strings.Split(stderr, "\n") {
				if strings.HasPrefix(l, "kmaterialize: ") {
					final = l
				}
			}
			if !strings.Contains(final, tc.want(db)) || !strings.Contains(final, "nothing published") {
				t.Fatalf("error %q does not name %q and that nothing was published; stderr:\n%s", final, tc.want(db), stderr)
			}
			// The disk-full case: the failpoint says it fired.
			for _, e := range env {
				if file, ok := strings.CutPrefix(e, failpoint.EnvFile+"="); ok {
					got, _ := os.ReadFile(file)
					if want := "failpoint " + failpoint.RunWritten + " nowrite"; strings.TrimSpace(string(got)) != want {
						t.Fatalf("failpoint file %q, want %q: the fault did not fire", got, want)
					}
				}
			}
			if f := runFiles(t, db); len(f) != 0 {
				t.Fatalf("run files left after the failure: %v", f)
			}
			boltCheck(t, db)
			checkExport(t, db, topic, "A", a)
			_ = os.Remove(store.RunsDir(db))
			mustCLI(t, 0, rebuildArgs(topic, db, "--memory", spillMemory)...)
			checkExport(t, db, topic, "B", b)
		})
	}
}

// TestRebuildsStayCompact rebuilds the same table ten times and checks the
// file (bbolt's pages, in use or free, and the file's size) stays within
// 2.5x of a fresh rebuild's: the pages a publish frees are reused by the
// next rebuild. Then compact: it keeps every table's rows, metadata and
// checkpoint (export and tables byte for byte), and shrinks the file; a
// compaction that fails (RLIMIT_FSIZE below the new file's size) exits 1
// naming the file and leaves the original byte for byte, with no
// temporary left.
func TestRebuildsStayCompact(t *testing.T) {
	rng := newRand(t)
	topic := crashTopic(t, 2)
	recs := produce(t, topic, append(genRecords(rng, []int32{0, 1}, 200), spillRecords(rng, 20000)...))
	want := oracleState(recs, 2)

	fresh := dbPath(t)
	mustCLI(t, 0, rebuildArgs(topic, fresh)...)
	freshFile, freshPages := dbSize(t, fresh)

	db := dbPath(t)
	for range 10 {
		mustCLI(t, 0, rebuildArgs(topic, db)...)
	}
	file, pages := dbSize(t, db)
	t.Logf("fresh rebuild: file %d bytes, pages %d; after 10 rebuilds: file %d, pages %d (%.2fx)",
		freshFile, freshPages, file, pages, float64(pages)/float64(freshPages))
	if pages > freshPages*5/2 {
		t.Fatalf("pages after 10 rebuilds: %d bytes, over 2.5x a fresh rebuild's %d", pages, freshPages)
	}
	if file > freshFile*5/2 {
		t.Fatalf("file after 10 rebuilds: %d bytes, over 2.5x a fresh rebuild's %d", file, freshFile)
	}
	// A second table, built by a spilling rebuild, for compact to keep, and
	// two more rebuilds of the first, which leave a generation's worth of
	// free pages for compact to drop.
	other := topic + "-copy"
	mustCLI(t, 0, rebuildArgs(topic, db, "--table", other, "--memory", spillMemory)...)
	mustCLI(t, 0, rebuildArgs(topic, db)...)
	mustCLI(t, 0, rebuildArgs(topic, db)...)
	file, pages = dbSize(t, db)
	checkExport(t, db, topic, "oracle", want)

	before := map[string]string{}
	for _, table := range []string{topic, other} {
		before[table] = exportBytes(t, db, table)
	}
	tablesBefore := mustCLI(t, 0, "tables", "--db", db, "--format", "json").stdout

	// A failing compaction: the new file cannot grow past 64 KiB. (Its
	// read-write open writes a meta page, so the file's bytes change; its
	// contents and identity must not.)
	orig, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := startChild(t, []string{fmt.Sprintf("%s=%d", envFsize, 64<<10)}, self, binPath, "compact", "--db", db)
	ws := c.wait(t, 60*time.Second)
	if ws.Signaled() || ws.ExitStatus() != exitError {
		t.Fatalf("compact under RLIMIT_FSIZE ended with %v, want exit 1; stderr:\n%s", ws, c.stderr.String())
	}
	if s := c.stderr.String(); !strings.Contains(s, "compact "+db+" into "+db+store.CompactTempPrefix) || !strings.Contains(s, "file too large") {
		t.Fatalf("compact error does not name the file and the cause:\n%s", s)
	}
	if now, err := os.Stat(db); err != nil || !os.SameFile(orig, now) {
		t.Fatalf("a failed compaction replaced the database file (%v)", err)
	}
	for table, b := range before {
		if got := exportBytes(t, db, table); got != b {
			t.Fatalf("a failed compaction changed the export of %s", table)
		}
	}
	if m, _ := filepath.Glob(db + store.CompactTempPrefix + "*"); len(m) != 0 {
		t.Fatalf("a failed compaction left %v", m)
	}

	r := mustCLI(t, 0, "compact", "--db", db)
	after, afterPages := dbSize(t, db)
	t.Logf("%s; file %d -> %d bytes, pages %d -> %d", strings.TrimSpace(r.stdout), file, after, pages, afterPages)
	if after >= file || afterPages > pages-freshPages/2 || after != afterPages {
		t.Fatalf("compact did not shrink the file to its pages, dropping a generation's free pages: %d -> %d bytes, pages %d -> %d", file, after, pages, afterPages)
	}
	for table, b := range before {
		if got := exportBytes(t, db, table); got != b {
			t.Fatalf("export of %s changed by compact:\nbefore %d bytes, after %d bytes", table, len(b), len(got))
		}
	}
	if got := mustCLI(t, 0, "tables", "--db", db, "--format", "json").stdout; got != tablesBefore {
		t.Fatalf("tables changed by compact:\n%s\n%s", tablesBefore, got)
	}
	boltCheck(t, db)
	// The compacted file takes rebuilds as before.
	mustCLI(t, 0, rebuildArgs(topic, db)...)
	checkExport(t, db, topic, "oracle", want)
}

// TestMemoryFlagUsage: a --memory that is not a size, has an unknown unit
// or is below 1MiB is bad usage (exit 2) naming the value, before any work
// (the brokers are unreachable and the database is never created).
func TestMemoryFlagUsage(t *testing.T) {
	db := dbPath(t)
	for _, v := range []string{"abc", "12XB", "512KiB", "-5MiB", ""} {
		r := mustCLI(t, exitUsage, "rebuild", "--brokers", "127.0.0.1:1", "--topic", "t", "--db", db, "--memory", v)
		if !strings.Contains(r.stderr, fmt.Sprintf("--memory %q", v)) || !strings.Contains(r.stderr, "Try: --memory 256MiB") {
			t.Fatalf("--memory %q: stderr does not name the value and the hint:\n%s", v, r.stderr)
		}
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Fatalf("a rebuild with a bad --memory created the database: %v", err)
	}
	for v, want := range map[string]int64{"1MiB": 1 << 20, "1.5G": 3 << 29, "300m": 300 << 20, "2097152": 2 << 20} {
		got, err := parseMemory(v)
		if err != nil || got != want {
			t.Fatalf("parseMemory(%q) = %d, %v; want %d", v, got, err, want)
		}
	}
}
