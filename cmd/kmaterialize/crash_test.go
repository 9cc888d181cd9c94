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
	if err := broker.CreateTopic(topic, partitions, nil); err != nil {
		t.Fatal(err)
	}
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

// exportState reads the table through `export`.
func exportState(t *testing.T, db, table string) tableState {
	t.Helper()
	r := mustCLI(t, 0, "export", "--db", db, "--table", table)
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

// checkReaders checks that every reader sees exactly want: `export` (rows,
// checkpoint and totals from one transaction), `scan`, and `get` of every
// key of want and of other (present with want's value, or not found).
func checkReaders(t *testing.T, db, table, name string, want, other tableState) {
	t.Helper()
	if diff := cmp.Diff(want, exportState(t, db, table)); diff != "" {
		t.Fatalf("export: not exactly table %s (-%s +export):\n%s", name, name, diff)
	}
	if diff := cmp.Diff(want.Rows, scanTable(t, db, table)); diff != "" {
		t.Fatalf("scan: not exactly table %s (-%s +scan):\n%s", name, name, diff)
	}
	keys := map[string]bool{}
	for k := range want.Rows {
		keys[k] = true
	}
	for k := range other.Rows {
		keys[k] = true
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
// The rebuild folds the small topic in two write transactions: the writer's
// one Fold call (latest retains its rows in memory, so it commits none) and
// Finish (every row). @2 parks at the second, whose commit holds B's rows.
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
		{failpoint.FoldCommitAfter, 1, "empty"},
		{failpoint.FoldCommitBefore + "@2", 1, "empty"},
		{failpoint.FoldCommitAfter + "@2", 1, "B"},
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
