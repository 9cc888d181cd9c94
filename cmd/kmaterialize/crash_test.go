package main

// Crashes and full disks around the commits of a rebuild. A second binary,
// built with the failpoints tag (package internal/failpoint), parks at a
// named point inside or between the bbolt commits; the test kills it there
// with SIGKILL and checks what a reader sees, that bbolt's own consistency
// check is clean, and that the next rebuild cleans up. The disk-full cases
// run a child whose file size limit (RLIMIT_FSIZE) makes the database's
// writes fail with EFBIG.
//
// Every outcome is compared with an oracle fold of the records the test
// produced: readers must see exactly the table of the first batch (A) or of
// both batches (B), rows, checkpoint and totals together, never a mix.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/internal/failpoint"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/store"
)

// envFsize makes the test binary a wrapper: set RLIMIT_FSIZE to its value
// (bytes), then exec os.Args[1:]. The limit is inherited across exec, and
// nothing else of the test binary runs.
const envFsize = "KMATERIALIZE_TEST_EXEC_FSIZE"

func init() {
	s := os.Getenv(envFsize)
	if s == "" {
		return
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err == nil && len(os.Args) < 2 {
		err = fmt.Errorf("no command to exec")
	}
	var lim syscall.Rlimit
	if err == nil {
		err = syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim)
	}
	if err == nil {
		lim.Cur = n
		err = syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim)
	}
	if err == nil {
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, envFsize+"=") {
				env = append(env, kv)
			}
		}
		err = syscall.Exec(os.Args[1], os.Args[1:], env)
	}
	fmt.Fprintf(os.Stderr, "%s=%s wrapper: %v\n", envFsize, s, err)
	os.Exit(98)
}

var (
	fpBuildOnce sync.Once
	fpBin       string
	fpBuildErr  error
)

// failpointBinary builds kmaterialize with -tags failpoints once per test
// binary, beside binPath (whose directory TestMain removes).
func failpointBinary(t *testing.T) string {
	t.Helper()
	fpBuildOnce.Do(func() {
		path := filepath.Join(filepath.Dir(binPath), "kmaterialize-failpoints")
		build := exec.Command("go", "build", "-tags", "failpoints", "-o", path, ".")
		if out, err := build.CombinedOutput(); err != nil {
			fpBuildErr = fmt.Errorf("go build -tags failpoints: %v\n%s", err, out)
			return
		}
		fpBin = path
	})
	if fpBuildErr != nil {
		t.Fatal(fpBuildErr)
	}
	return fpBin
}

var crashTopicSeq atomic.Int64

// crashTopic creates a topic unique to this run (a -count=N run reuses
// test names, and the broker lives for the whole test binary).
func crashTopic(t *testing.T, partitions int32) string {
	t.Helper()
	name := regexp.MustCompile(`[^a-zA-Z0-9._-]+`).ReplaceAllString(t.Name(), "-")
	topic := fmt.Sprintf("%s-%d", name, crashTopicSeq.Add(1))
	broker.TestTopic(t, topic, partitions, nil)
	return topic
}

// child is a kmaterialize process started from a given binary, with extra
// environment.
type child struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr lockedBuffer
	done   chan struct{}
	err    error // Wait's result, set before done closes
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startChild starts bin with args and env added to the test's environment.
// It is killed at the end of the test if still running.
func startChild(t *testing.T, env []string, bin string, args ...string) *child {
	t.Helper()
	c := &child{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("started pid %d: %v %s %s", c.cmd.Process.Pid, env, filepath.Base(bin), strings.Join(args, " "))
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		t.Logf("pid %d stderr:\n%s", c.cmd.Process.Pid, c.stderr.String())
	})
	return c
}

// wait waits for the child to end (limit is a "did not hang" bound) and
// returns its wait status.
func (c *child) wait(t *testing.T, limit time.Duration) syscall.WaitStatus {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(limit):
		t.Fatalf("pid %d did not exit within %s; stderr:\n%s", c.cmd.Process.Pid, limit, c.stderr.String())
	}
	if _, ok := c.err.(*exec.ExitError); c.err != nil && !ok {
		t.Fatal(c.err)
	}
	return c.cmd.ProcessState.Sys().(syscall.WaitStatus)
}

// awaitFailpoint polls the failpoint file until it holds want, and fails if
// the child exits first.
func awaitFailpoint(t *testing.T, c *child, file, want string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, err := os.ReadFile(file)
		if err == nil && strings.TrimSpace(string(b)) == want {
			return
		}
		select {
		case <-c.done:
			t.Fatalf("pid %d exited (%v) before %q; stderr:\n%s", c.cmd.Process.Pid, c.err, want, c.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in %s within 60s; stderr:\n%s", want, file, c.stderr.String())
		}
	}
}

// tableState is everything a reader can see of a table: its rows and its
// provenance, as `export` prints them from one read transaction.
type tableState struct {
	Rows       map[string]string
	Partitions map[int32][4]int64 // low, start, high, end
	Read       int64
	Skipped    int64
	Keys       int64
}

// oracleState is the table a complete rebuild of recs must publish: the
// latest fold, every partition read from 0 to one past its last offset.
func oracleState(recs []rec, partitions int32) tableState {
	rows, read, skipped := oracle(recs, nil)
	s := tableState{Rows: rows, Read: read, Skipped: skipped, Keys: int64(len(rows)), Partitions: map[int32][4]int64{}}
	for p := range partitions {
		s.Partitions[p] = [4]int64{}
	}
	for _, r := range recs {
		if hw := r.O + 1; hw > s.Partitions[r.P][2] {
			s.Partitions[r.P] = [4]int64{0, 0, hw, hw}
		}
	}
	return s
}

// quietCLI is mustCLI that logs the size of stdout instead of its text:
// the disk-full tables are megabytes.
func quietCLI(t *testing.T, want int, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"kmaterialize"}, args...), &out, &errb)
	t.Logf("$ kmaterialize %s\n-> exit %d, %d bytes on stdout\nstderr:\n%s", strings.Join(args, " "), code, out.Len(), errb.String())
	if code != want {
		t.Fatalf("kmaterialize %s: exit %d, want %d", strings.Join(args, " "), code, want)
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// scanAll reads the table through `scan --format jsonl`, checking that
// keys come in strictly ascending order.
func scanAll(t *testing.T, db, table string) map[string]string {
	t.Helper()
	r := quietCLI(t, 0, "scan", "--db", db, "--table", table, "--format", "jsonl")
	got := map[string]string{}
	last := ""
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	for n := 0; dec.More(); n++ {
		var row struct {
			Key   *string `json:"key"`
			Value *string `json:"value"`
		}
		if err := dec.Decode(&row); err != nil || row.Key == nil || row.Value == nil {
			t.Fatalf("scan row %d: not a {key, value} object (%v)", n, err)
		}
		if n > 0 && *row.Key <= last {
			t.Fatalf("scan: key %q after %q, want strictly ascending", *row.Key, last)
		}
		last = *row.Key
		got[last] = *row.Value
	}
	return got
}

// exportState reads the table through `export`.
func exportState(t *testing.T, db, table string) tableState {
	t.Helper()
	r := quietCLI(t, 0, "export", "--db", db, "--table", table)
	var doc struct {
		Partitions []struct {
			Partition             int32
			Low, Start, High, End int64
		} `json:"partitions"`
		Totals map[string]int64  `json:"totals"`
		Rows   map[string]string `json:"rows"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("export: %v\n%s", err, r.stdout)
	}
	s := tableState{Rows: doc.Rows, Partitions: map[int32][4]int64{},
		Read: doc.Totals["records_read"], Skipped: doc.Totals["records_skipped"], Keys: doc.Totals["keys"]}
	if s.Rows == nil {
		s.Rows = map[string]string{}
	}
	for _, p := range doc.Partitions {
		s.Partitions[p.Partition] = [4]int64{p.Low, p.Start, p.High, p.End}
	}
	return s
}

// storeState reads the table through the store API: rows, metadata and
// checkpoint in one read transaction.
func storeState(t *testing.T, path, table string) tableState {
	t.Helper()
	db, err := store.Open(path, &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := tableState{Rows: map[string]string{}, Partitions: map[int32][4]int64{}}
	err = db.ReadTable(table, func(snap *store.Snapshot) error {
		s.Read, s.Skipped, s.Keys = snap.Meta.Records, snap.Meta.Skipped, snap.Meta.Keys
		cp, _, err := checkpoint.Load(snap.Tx, table)
		if err != nil {
			return err
		}
		for _, p := range cp.Partitions {
			s.Partitions[p.Partition] = [4]int64{p.Low, p.Start, p.High, p.End}
		}
		return snap.Rows(nil, 0, func(k, v []byte) error {
			s.Rows[string(k)] = string(v)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkReaders checks that every reader sees exactly want: `export` (rows,
// checkpoint and totals from one transaction), `scan`, and `get` of the keys
// of want and of other (present with want's value, or not found). Of the
// large "big-" rows of the disk-full cases only the first two are fetched
// with `get`, and a table of more than 4 MiB is read through the store API
// instead of `export` and `scan`, whose JSON costs seconds per 10 MiB under
// the race detector.
func checkReaders(t *testing.T, db, table, name string, want, other tableState) {
	t.Helper()
	size := 0
	for k, v := range want.Rows {
		size += len(k) + len(v)
	}
	if size > 4<<20 {
		if diff := cmp.Diff(want, storeState(t, db, table)); diff != "" {
			t.Fatalf("store: not exactly table %s (-%s +store):\n%s", name, name, diff)
		}
	} else {
		if diff := cmp.Diff(want, exportState(t, db, table)); diff != "" {
			t.Fatalf("export: not exactly table %s (-%s +export):\n%s", name, name, diff)
		}
		if diff := cmp.Diff(want.Rows, scanAll(t, db, table)); diff != "" {
			t.Fatalf("scan: not exactly table %s (-%s +scan):\n%s", name, name, diff)
		}
	}
	keys := map[string]bool{}
	for _, rows := range []map[string]string{want.Rows, other.Rows} {
		for k := range rows {
			if !strings.HasPrefix(k, "big-") || k < "big-002" {
				keys[k] = true
			}
		}
	}
	for k := range keys {
		r := kmz(t, "get", "--db", db, "--table", table, k)
		v, ok := want.Rows[k]
		switch {
		case ok && (r.code != 0 || r.stdout != v+"\n"):
			t.Fatalf("get %q: exit %d, %q; want %q (table %s)", k, r.code, r.stdout, v, name)
		case !ok && r.code != exitNotFound:
			t.Fatalf("get %q: exit %d, %q; want exit %d, not in table %s", k, r.code, r.stdout, exitNotFound, name)
		}
	}
}

// boltCheck runs bbolt's consistency check (Tx.Check) on the file, opened
// read-only, and fails on any error it reports. (When `kmaterialize check`
// exists, it can replace this.)
func boltCheck(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("bbolt open %s: %v", path, err)
	}
	defer db.Close()
	var errs []string
	err = db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			errs = append(errs, err.Error())
		}
		return nil
	})
	if err != nil || len(errs) > 0 {
		t.Fatalf("bbolt check of %s: %v %s", path, err, strings.Join(errs, "; "))
	}
}

// generationRows returns the rows of every generation bucket in the file,
// published or not, by generation number.
func generationRows(t *testing.T, path string) map[uint64]map[string]string {
	t.Helper()
	db, err := store.Open(path, &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[uint64]map[string]string{}
	err = db.View(func(tx *bolt.Tx) error {
		gens := tx.Bucket(store.BucketGenerations)
		return gens.ForEachBucket(func(k []byte) error {
			rows := map[string]string{}
			out[binary.BigEndian.Uint64(k)] = rows
			b := gens.Bucket(k).Bucket(store.BucketRows)
			if b == nil {
				return fmt.Errorf("generation %x has no rows bucket", k)
			}
			return b.ForEach(func(k, v []byte) error {
				rows[string(k)] = string(v)
				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func generationIDs(gens map[uint64]map[string]string) []uint64 {
	var ids []uint64
	for id := range gens {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// crashSetup publishes table A (a first batch of records) into a fresh
// database, then produces a second batch; B is the table of both. Rows are
// spread over two partitions.
func crashSetup(t *testing.T, extra []localkafka.Record) (topic, db string, a, b tableState) {
	t.Helper()
	rng := newRand(t)
	topic = crashTopic(t, 2)
	db = dbPath(t)
	parts := []int32{0, 1}
	first := produce(t, topic, genRecords(rng, parts, 30))
	mustCLI(t, 0, rebuildArgs(topic, db)...)
	a = oracleState(first, 2)
	all := append(first, produce(t, topic, genRecords(rng, parts, 30))...)
	if len(extra) > 0 {
		all = append(all, produce(t, topic, extra)...)
	}
	b = oracleState(all, 2)
	if cmp.Equal(a, b) {
		t.Fatal("the second batch does not change the table; the test could not tell A from B")
	}
	return topic, db, a, b
}

// rebuildCleansUp runs a rebuild without any fault and checks it publishes
// exactly b as generation wantGen, leaving no other generation, after
// removing cleaned unpublished ones.
func rebuildCleansUp(t *testing.T, topic, db string, wantGen uint64, cleaned int, a, b tableState) {
	t.Helper()
	r := mustCLI(t, 0, rebuildArgs(topic, db)...)
	gotCleaned := 0
	for _, l := range logLines(r.stderr) {
		if l["level"] == "warn" && strings.Contains(fmt.Sprint(l["message"]), "unpublished") {
			n, _ := l["generations"].(float64)
			gotCleaned += int(n)
		}
	}
	if gotCleaned != cleaned {
		t.Fatalf("the rebuild removed %d unpublished generations, want %d; stderr:\n%s", gotCleaned, cleaned, r.stderr)
	}
	checkReaders(t, db, topic, "B", b, a)
	if ids := generationIDs(generationRows(t, db)); !cmp.Equal(ids, []uint64{wantGen}) {
		t.Fatalf("generation buckets after the clean rebuild: %v, want only %d", ids, wantGen)
	}
	if g := tablesJSON(t, db)[topic].Generation; g != wantGen {
		t.Fatalf("published generation %d, want %d", g, wantGen)
	}
	boltCheck(t, db)
}

// TestKill9AtFailpoint parks a rebuild at each named point of its commits,
// kills it with SIGKILL, and checks: readers see exactly the old table (A)
// or exactly the new one (B) as the point dictates, the file passes bbolt's
// check, the leftover generations are as the point's comment says, and the
// next rebuild removes them and publishes exactly B.
//
// The latest fold holds the small topic's rows in memory and writes them in
// one transaction at the end (the merge, which commits every 8 MiB): its
// commit holds B's rows.
func TestKill9AtFailpoint(t *testing.T) {
	bin := failpointBinary(t)
	cases := []struct {
		point string
		// published is the generation readers must see: 1 (A) or 2 (B).
		published uint64
		// leftover is the unpublished generation 2's rows, when the point
		// leaves one: "empty" or "B".
		leftover string
	}{
		{failpoint.FoldCommitBefore, 1, "empty"},
		{failpoint.FoldCommitAfter, 1, "B"},
		{failpoint.PublishCommitBefore, 1, "B"},
		{failpoint.PublishDropOld, 1, "B"},
		{failpoint.PublishCommitAfter, 2, ""},
	}
	for _, tc := range cases {
		t.Run(tc.point, func(t *testing.T) {
			topic, db, a, b := crashSetup(t, nil)
			name, _, _ := strings.Cut(tc.point, "@")
			file := filepath.Join(t.TempDir(), "failpoint")
			c := startChild(t, []string{failpoint.EnvPoint + "=" + tc.point, failpoint.EnvFile + "=" + file},
				bin, append([]string{"--log-format", "json"}, rebuildArgs(topic, db)...)...)
			awaitFailpoint(t, c, file, "failpoint "+name+" parked")
			if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if ws := c.wait(t, 30*time.Second); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("child ended with %v, want killed by SIGKILL", ws)
			}

			boltCheck(t, db)
			gens := generationRows(t, db)
			if tc.published == 1 {
				checkReaders(t, db, topic, "A", a, b)
				if ids := generationIDs(gens); !cmp.Equal(ids, []uint64{1, 2}) {
					t.Fatalf("generation buckets after the kill: %v, want the published 1 and the killed rebuild's 2", ids)
				}
				want := map[string]string{}
				if tc.leftover == "B" {
					want = b.Rows
				}
				if diff := cmp.Diff(want, gens[2]); diff != "" {
					t.Fatalf("the unpublished generation 2 holds (-want %s +got):\n%s", tc.leftover, diff)
				}
				rebuildCleansUp(t, topic, db, 3, 1, a, b)
			} else {
				checkReaders(t, db, topic, "B", b, a)
				if ids := generationIDs(gens); !cmp.Equal(ids, []uint64{2}) {
					t.Fatalf("generation buckets after the kill: %v, want only the published 2", ids)
				}
				rebuildCleansUp(t, topic, db, 3, 0, a, b)
			}
			if g := tablesJSON(t, db)[topic]; g.Generation != 3 {
				t.Fatalf("tables: generation %d, want 3", g.Generation)
			}
		})
	}
}

// dbSize returns the file's size and bbolt's high-water mark (the bytes of
// pages in use or free), read-only.
func dbSize(t *testing.T, path string) (file, hwm int64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error { hwm = tx.Size(); return nil })
	return fi.Size(), hwm
}

// bigRecords are n records of distinct keys with 32 KiB values, so that
// every one is a row of the new table.
func bigRecords(n int) []localkafka.Record {
	var out []localkafka.Record
	for i := range n {
		out = append(out, localkafka.Record{Partition: int32(i % 2), Key: []byte(fmt.Sprintf("big-%03d", i)),
			Value: bytes.Repeat([]byte{byte('a' + i%26)}, 32<<10)})
	}
	return out
}

// TestDiskFull makes the database's writes fail during a rebuild's fold
// commit and during its publish commit. The rebuild exits 1 with an error
// naming the phase, the file and the cause (EFBIG: "file too large"; Go
// ignores SIGXFSZ, so the process is not killed by it), readers keep the
// old table, bbolt's check is clean, and the next rebuild publishes exactly
// the new table.
//
// Where the limit bites: bbolt grows its file by truncate, 16 MiB beyond
// what it needs once its mapping exceeds that (kmaterialize reserves a 1
// GiB mapping), so after table A the file is ~16 MiB but its pages end at
// tens of KiB, and the rest is a hole. RLIMIT_FSIZE fails any write that
// starts at or past the limit, and any truncate beyond it. So:
//
//   - fold-commit/write-past-limit (the shipped binary): a limit of 1 MiB,
//     above A's pages, below the file size and below B's ~1.5 MiB of rows.
//     The Finish commit's page writes fail: this is how a full disk looks
//     to bbolt, whose free space is a hole that a write must allocate.
//   - fold-commit/growth (the shipped binary): a limit at the file's size
//     after A and ~17 MiB of new rows, so that bbolt's truncate to grow the
//     file fails ("file resize error").
//   - fold-commit/nowrite and publish/nowrite (the failpoints binary): a
//     size cannot single out the publish commit (it writes a few pages,
//     into free pages or the hole, like the fold commits before it), so the
//     failpoint sets RLIMIT_FSIZE to 0 inside the transaction just before
//     its commit: every write of that commit fails, as on a disk that
//     filled up during the rebuild.
func TestDiskFull(t *testing.T) {
	fp := failpointBinary(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		big   int    // 32 KiB records added to B
		limit string // "1MiB", "file": RLIMIT_FSIZE on the shipped binary
		point string // failpoint with the nowrite action, in the failpoints binary
		phase string // the phase the error names
		op    string // the failed operation on the file: write (a page) or truncate (bbolt growing the file)
	}{
		{name: "fold-commit/write-past-limit", big: 48, limit: "1MiB", phase: "write generation 2 of table", op: "write"},
		{name: "fold-commit/growth", big: 530, limit: "file", phase: "write generation 2 of table", op: "file resize error: truncate"},
		{name: "fold-commit/nowrite", point: failpoint.FoldCommitBefore, phase: "write generation 2 of table", op: "write"},
		{name: "publish/nowrite", point: failpoint.PublishCommitBefore, phase: "publish generation 2 of table", op: "write"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			topic, db, a, b := crashSetup(t, bigRecords(tc.big))
			file, hwm := dbSize(t, db)
			t.Logf("after table A: file %d bytes, pages up to %d bytes", file, hwm)
			var rowBytes int64
			for k, v := range b.Rows {
				rowBytes += int64(len(k) + len(v))
			}
			args := append([]string{"--log-format", "json"}, rebuildArgs(topic, db)...)
			var c *child
			fpFile := filepath.Join(t.TempDir(), "failpoint")
			switch {
			case tc.limit != "":
				limit := int64(1 << 20)
				if tc.limit == "file" {
					limit = file
				}
				// The placement this case relies on: A's pages below
				// the limit, B's rows beyond it.
				if hwm >= limit || hwm+rowBytes <= limit || (tc.limit == "file") != (rowBytes > file-hwm) {
					t.Fatalf("limit %d misplaced: file %d, pages up to %d, B's rows %d bytes", limit, file, hwm, rowBytes)
				}
				c = startChild(t, []string{fmt.Sprintf("%s=%d", envFsize, limit)}, self, append([]string{binPath}, args...)...)
			default:
				c = startChild(t, []string{failpoint.EnvPoint + "=" + tc.point + "=nowrite", failpoint.EnvFile + "=" + fpFile}, fp, args...)
			}
			ws := c.wait(t, 60*time.Second)
			stderr := c.stderr.String()
			if ws.Signaled() || ws.ExitStatus() != exitError {
				t.Fatalf("rebuild ended with %v, want exit %d; stderr:\n%s", ws, exitError, stderr)
			}
			if tc.point != "" {
				name, _, _ := strings.Cut(tc.point, "@")
				if got, _ := os.ReadFile(fpFile); strings.TrimSpace(string(got)) != "failpoint "+name+" nowrite" {
					t.Fatalf("failpoint file %q, want the nowrite failpoint %s to have fired", got, name)
				}
			}
			// The final error line names the phase, the file and the cause.
			var final string
			for _, l := range strings.Split(stderr, "\n") {
				if strings.HasPrefix(l, "kmaterialize: ") {
					final = l
				}
			}
			for _, want := range []string{tc.phase + " " + strconv.Quote(topic) + " to " + db, tc.op + " " + db + ": file too large"} {
				if !strings.Contains(final, want) {
					t.Fatalf("error %q does not name %q; stderr:\n%s", final, want, stderr)
				}
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
				t.Fatalf("stderr has a panic trace:\n%s", stderr)
			}

			boltCheck(t, db)
			checkReaders(t, db, topic, "A", a, b)
			ids := generationIDs(generationRows(t, db))
			if ids[0] != 1 || len(ids) > 2 || (len(ids) == 2 && ids[1] != 2) {
				t.Fatalf("generation buckets after the failure: %v, want the published 1 and maybe the failed rebuild's 2", ids)
			}
			rebuildCleansUp(t, topic, db, 3, len(ids)-1, a, b)
		})
	}
}

// TestFailpointsNotShipped: the normal build holds nothing of package
// failpoint (Hit is an empty function the compiler drops), while the
// failpoints build does, which shows the search can find it.
func TestFailpointsNotShipped(t *testing.T) {
	for _, c := range []struct {
		bin  string
		want bool
	}{{binPath, false}, {failpointBinary(t), true}} {
		b, err := os.ReadFile(c.bin)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{failpoint.EnvPoint, failpoint.FoldCommitBefore, failpoint.PublishDropOld, failpoint.CatchUpPaused, failpoint.CopyProduced, failpoint.CopyCommitBefore, failpoint.CopyCommitAfter, "internal/failpoint"} {
			if got := bytes.Contains(b, []byte(s)); got != c.want {
				t.Errorf("%s contains %q: %v, want %v", filepath.Base(c.bin), s, got, c.want)
			}
		}
	}
}
