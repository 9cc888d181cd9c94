package main

// End-to-end tests of the CLI. One in-process kfake broker serves the whole
// package (started in TestMain); each test writes its own topic and keeps its
// database in t.TempDir(). Commands run in-process through run(...), except
// where a process must die or be watched while it runs: those use the binary
// built once in TestMain.
//
// Every table is checked against an oracle computed here from the records the
// test produced (see oracle), never against output recorded earlier.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

var (
	broker  *localkafka.Broker
	binPath string // the kmaterialize binary, built once for process tests
)

func TestMain(m *testing.M) {
	// Commands run in-process re-execute os.Executable() (this test
	// binary) for the page walk: act as main does then.
	if len(os.Args) > 1 && os.Args[1] == pageCheckCommandName {
		if code, ok := pageCheckMain(os.Args, os.Stdout, os.Stderr); ok {
			os.Exit(code)
		}
		os.Exit(run(context.Background(), os.Args, os.Stdout, os.Stderr))
	}
	// A fuzzing run (.ci/fuzz: -run '^$' -fuzz NAME) runs one fuzz target
	// of a parser, in the coordinator and in each worker process, and
	// -list only lists: none needs the binary or the broker, which would
	// be built and started in every one of them.
	for _, a := range os.Args[1:] {
		if strings.HasPrefix(a, "-test.fuzzworker") || strings.HasPrefix(a, "-test.list=") ||
			(strings.HasPrefix(a, "-test.fuzz=") && a != "-test.fuzz=") {
			os.Exit(m.Run())
		}
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "kmaterialize-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "kmaterialize")
	build := exec.Command("go", "build", "-o", binPath, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build kmaterialize:", err)
		return 1
	}
	// A kfake of the process's own, or the real Kafka that
	// KMATERIALIZE_TEST_KAFKA names (scripts/test-kafka).
	return localkafka.RunTests(m, &broker)
}

// result is what one CLI invocation did.
type result struct {
	code           int
	stdout, stderr string
}

// kmz runs kmaterialize in-process with args (without the program name).
func kmz(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"kmaterialize"}, args...), &out, &errb)
	r := result{code: code, stdout: out.String(), stderr: errb.String()}
	t.Logf("$ kmaterialize %s\n-> exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

// mustCLI runs kmz and fails the test unless the exit code is want.
func mustCLI(t *testing.T, want int, args ...string) result {
	t.Helper()
	r := kmz(t, args...)
	if r.code != want {
		t.Fatalf("kmaterialize %s: exit %d, want %d\nstderr:\n%s", strings.Join(args, " "), r.code, want, r.stderr)
	}
	return r
}

// rebuildArgs are the arguments of a rebuild of topic into db, plus extra.
func rebuildArgs(topic, db string, extra ...string) []string {
	return append([]string{"rebuild", "--brokers", broker.Addr, "--topic", topic, "--db", db, "--stall-timeout", "20s"}, extra...)
}

// runName names what one run of one test creates on the shared broker
// (topics, groups, transactional ids): the test's name and a number unique
// in the process, so that -count=N runs never see each other's data.
// Kafka's names are [a-zA-Z0-9._-], at most 249 characters: other
// characters become '-' and a long test name keeps its end.
func runName(t *testing.T) string {
	name := regexp.MustCompile(`[^a-zA-Z0-9._-]+`).ReplaceAllString(strings.ReplaceAll(t.Name(), " ", "_"), "-")
	if len(name) > 180 {
		name = name[len(name)-180:]
	}
	return fmt.Sprintf("%s-%d", name, runSeq.Add(1))
}

var runSeq atomic.Int64

// newTopic creates a topic named after the test (and the run) and, on a
// real Kafka, deletes it when the test ends.
func newTopic(t *testing.T, partitions int32) string {
	t.Helper()
	topic := runName(t)
	broker.TestTopic(t, topic, partitions, nil)
	return topic
}

// marksOf is each partition's marks of topic as the broker answers
// ListOffsets and Metadata (on kfake and on Kafka alike).
func marksOf(t testing.TB, topic string) map[int32]localkafka.Marks {
	t.Helper()
	m, err := broker.Marks(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// topicID is topic's ID as metadata reports it; the topic must exist.
func topicID(t testing.TB, topic string) [16]byte {
	t.Helper()
	id, exists, err := broker.TopicID(context.Background(), topic)
	if err != nil || !exists {
		t.Fatalf("topic %s: exists %v, err %v", topic, exists, err)
	}
	return id
}

// recreate deletes topic and creates it again with parts partitions, and
// returns its IDs before and after, asserting they differ. On kfake the
// delete and the create are one instant; Kafka deletes asynchronously, so
// there the topic is awaited gone first.
func recreate(t *testing.T, topic string, parts int32) (before, after [16]byte) {
	t.Helper()
	before = topicID(t, topic)
	if broker.Real() {
		if err := broker.DeleteTopic(context.Background(), topic); err != nil {
			t.Fatal(err)
		}
		broker.TestTopic(t, topic, parts, nil)
	} else {
		if err := broker.Cluster.DeleteTopic(topic); err != nil {
			t.Fatal(err)
		}
		if err := broker.Cluster.CreateTopic(topic, parts, nil); err != nil {
			t.Fatal(err)
		}
	}
	after = topicID(t, topic)
	if before == after || after == ([16]byte{}) {
		t.Fatalf("topic ID %x, then %x: not recreated", before, after)
	}
	return before, after
}

func dbPath(t *testing.T) string {
	return filepath.Join(t.TempDir(), "tables.db")
}

// newRand returns a seeded source and logs the seed so a failure replays.
func newRand(t *testing.T) *rand.Rand {
	seed := time.Now().UnixNano()
	if s := os.Getenv("KMATERIALIZE_TEST_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d (rerun with KMATERIALIZE_TEST_SEED=%d)", seed, seed)
	return rand.New(rand.NewSource(seed))
}

// rec is a record as the broker stored it: where, and what. Committed is
// false for records of aborted or still-open transactions.
type rec struct {
	P         int32
	O         int64
	K, V      []byte // nil is a null
	Ts        time.Time
	Committed bool
}

// genRecords generates n random records spread over parts. Keys are
// "p<P>-k<N>" from a small pool per partition, so keys repeat (the fold
// must keep the last) and a key lives in one partition only (the latest fold
// defines no order across partitions). About 1 in 10 records has a null key,
// 1 in 7 is a tombstone, 1 in 20 has an empty value.
func genRecords(rng *rand.Rand, parts []int32, n int) []localkafka.Record {
	out := make([]localkafka.Record, 0, n)
	for i := 0; i < n; i++ {
		p := parts[rng.Intn(len(parts))]
		r := localkafka.Record{Partition: p, Key: []byte(fmt.Sprintf("p%d-k%02d", p, rng.Intn(8)))}
		switch x := rng.Intn(100); {
		case x < 10:
			r.Key = nil
			r.Value = []byte(fmt.Sprintf("orphan-%d", rng.Intn(1000)))
		case x < 24:
			// tombstone: Value stays nil
		case x < 29:
			r.Value = []byte{}
		default:
			r.Value = []byte(fmt.Sprintf("v%d-%d", i, rng.Intn(1_000_000)))
		}
		out = append(out, r)
	}
	return out
}

// produce writes recs outside any transaction and returns them with their
// offsets.
func produce(t *testing.T, topic string, recs []localkafka.Record) []rec {
	t.Helper()
	offs, err := broker.Produce(context.Background(), topic, recs)
	if err != nil {
		t.Fatal(err)
	}
	return withOffsets(recs, offs, true)
}

func withOffsets(recs []localkafka.Record, offs []int64, committed bool) []rec {
	out := make([]rec, len(recs))
	for i, r := range recs {
		out[i] = rec{P: r.Partition, O: offs[i], K: r.Key, V: r.Value, Ts: r.Timestamp, Committed: committed}
	}
	return out
}

// txn writes recs in one transaction and commits or aborts it.
func txn(t *testing.T, topic, id string, recs []localkafka.Record, commit bool) []rec {
	t.Helper()
	offs, err := broker.WriteTxn(context.Background(), topic, id, recs, commit)
	if err != nil {
		t.Fatal(err)
	}
	return withOffsets(recs, offs, commit)
}

// oracle is the latest fold written plainly: records of committed
// transactions (or none) that keep pass, in offset order per partition; a
// null key is skipped, a null value deletes the key, otherwise the last value
// wins. It also returns how many records the fold should read and skip.
func oracle(recs []rec, keep func(rec) bool) (table map[string]string, read, skipped int64) {
	rs := append([]rec(nil), recs...)
	sort.SliceStable(rs, func(i, j int) bool {
		if rs[i].P != rs[j].P {
			return rs[i].P < rs[j].P
		}
		return rs[i].O < rs[j].O
	})
	table = map[string]string{}
	for _, r := range rs {
		if !r.Committed || (keep != nil && !keep(r)) {
			continue
		}
		read++
		switch {
		case r.K == nil:
			skipped++
		case r.V == nil:
			delete(table, string(r.K))
		default:
			table[string(r.K)] = string(r.V)
		}
	}
	return table, read, skipped
}

// scanTable returns what `scan --format jsonl` prints for table, checking that
// rows come in strictly ascending key order.
func scanTable(t *testing.T, db, table string) map[string]string {
	t.Helper()
	r := mustCLI(t, 0, "scan", "--db", db, "--table", table, "--format", "jsonl")
	got := map[string]string{}
	var last *string
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	for sc.Scan() {
		var row struct {
			Key   *string `json:"key"`
			Value *string `json:"value"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil || row.Key == nil || row.Value == nil {
			t.Fatalf("scan line %q: not a {key, value} object (%v)", sc.Text(), err)
		}
		if last != nil && *row.Key <= *last {
			t.Fatalf("scan: key %q after %q, want strictly ascending", *row.Key, *last)
		}
		last = row.Key
		got[*row.Key] = *row.Value
	}
	return got
}

// scanJSON returns what `scan --format json` prints for table.
func scanJSON(t *testing.T, db, table string) map[string]string {
	t.Helper()
	r := mustCLI(t, 0, "scan", "--db", db, "--table", table, "--format", "json")
	got := map[string]string{}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("scan --format json: %v\n%s", err, r.stdout)
	}
	return got
}

func checkTable(t *testing.T, want, got map[string]string) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("table (-oracle +scan):\n%s", diff)
	}
}

// tableJSON is `tables --format json` for one table.
type tableJSON struct {
	Name       string `json:"name"`
	Topic      string `json:"topic"`
	Fold       string `json:"fold"`
	Generation uint64 `json:"generation"`
	Keys       int64  `json:"keys"`
	Records    int64  `json:"records"`
	Skipped    int64  `json:"skipped"`
	EndMark    string `json:"end_mark"`
	// PartitionSet is the partitions the table covers, e.g. "0-2".
	PartitionSet string `json:"partition_set"`
	Partitions   []struct {
		Partition             int32
		Low, Start, High, End int64
	} `json:"partitions"`
}

func tablesJSON(t *testing.T, db string) map[string]tableJSON {
	t.Helper()
	r := mustCLI(t, 0, "tables", "--db", db, "--format", "json")
	var ts []tableJSON
	if err := json.Unmarshal([]byte(r.stdout), &ts); err != nil {
		t.Fatalf("tables --format json: %v\n%s", err, r.stdout)
	}
	out := map[string]tableJSON{}
	for _, tb := range ts {
		out[tb.Name] = tb
	}
	return out
}

// logLines parses the JSON log lines in stderr; other lines are ignored.
func logLines(stderr string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(stderr, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// proc is a kmaterialize child process whose stderr is read line by line.
type proc struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	lines  chan string // stderr lines; closed at EOF
	done   chan struct{}
	mu     sync.Mutex
	stderr strings.Builder
}

// startProc starts the built binary with args. The process is killed at the
// end of the test if it is still running.
func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binPath, args...), lines: make(chan string, 1024), done: make(chan struct{})}
	p.cmd.Stdout = &p.stdout
	pipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("started pid %d: kmaterialize %s", p.cmd.Process.Pid, strings.Join(args, " "))
	go func() {
		defer close(p.done)
		defer close(p.lines)
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default: // nobody waits for lines now; the full text is kept
			}
		}
		_, _ = io.Copy(io.Discard, pipe)
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
			_ = p.cmd.Wait()
		}
		t.Logf("pid %d stderr:\n%s", p.cmd.Process.Pid, p.stderrText())
	})
	return p
}

func (p *proc) stderrText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// waitLine waits for a stderr line that satisfies match; it fails the test if
// the process ends first or nothing matches within limit (a "did not hang"
// bound, not a timing assertion).
func (p *proc) waitLine(t *testing.T, limit time.Duration, what string, match func(string) bool) string {
	t.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("process ended before %s; stderr:\n%s", what, p.stderrText())
			}
			if match(line) {
				return line
			}
		case <-timer.C:
			t.Fatalf("no %s within %s; stderr:\n%s", what, limit, p.stderrText())
		}
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		t.Fatalf("process did not exit within %s; stderr:\n%s", limit, p.stderrText())
	}
	err := p.cmd.Wait()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatal(err)
		}
	}
	return p.cmd.ProcessState.ExitCode()
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
