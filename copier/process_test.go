package copier_test

// Copier processes: the kmaterialize binary built with the failpoints tag
// (package internal/failpoint), run as `kmaterialize copy` against the
// test's broker, parked or held at a transaction point, and killed with
// SIGKILL. These tests need no broker controls, so they run on kfake and on
// Apache Kafka alike.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/copier"
	"github.com/kmaterialize/kmaterialize/internal/failpoint"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

var (
	fpOnce     sync.Once
	fpDir      string // removed by TestMain
	fpBinary   string
	fpBuildErr error
)

// failpointBinary builds cmd/kmaterialize with -tags failpoints once per
// test binary, into a temporary directory that TestMain removes.
func failpointBinary(t *testing.T) string {
	t.Helper()
	fpOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kmaterialize-copier-test-")
		if err != nil {
			fpBuildErr = err
			return
		}
		fpDir = dir
		fpBinary = filepath.Join(dir, "kmaterialize-failpoints")
		out, err := exec.Command("go", "build", "-tags", "failpoints", "-o", fpBinary,
			"github.com/kmaterialize/kmaterialize/cmd/kmaterialize").CombinedOutput()
		if err != nil {
			fpBuildErr = fmt.Errorf("go build -tags failpoints: %v\n%s", err, out)
		}
	})
	if fpBuildErr != nil {
		t.Fatal(fpBuildErr)
	}
	return fpBinary
}

// copyProc is one `kmaterialize copy` process.
type copyProc struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr syncBuffer
	done   chan struct{} // closed when the process has exited
	err    error         // Wait's result, set before done is closed
}

// copyNames are the topics, group and transactional id of one copy.
type copyNames struct{ from, to, group, tid string }

func (n copyNames) args(extra ...string) []string {
	return append([]string{"--log-format", "json", "copy", "--brokers", broker.Addr, "--from", n.from, "--to", n.to,
		"--group", n.group, "--transactional-id", n.tid, "--batch-records", "20", "--batch-interval", "300ms",
		"--stall-timeout", "30s", "--progress", "off"}, extra...)
}

// startCopy starts the failpoints binary with args and env (added to the
// test's environment). The process is killed when the test ends if it is
// still running, and its stderr logged.
func startCopy(t *testing.T, env []string, args ...string) *copyProc {
	t.Helper()
	p := &copyProc{cmd: exec.Command(failpointBinary(t), args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("started pid %d: %s kmaterialize %s", p.cmd.Process.Pid, strings.Join(env, " "), strings.Join(args, " "))
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		t.Logf("pid %d stderr:\n%s", p.cmd.Process.Pid, p.stderr.String())
	})
	return p
}

// exitCode waits for the process and returns its exit code (-1: killed by
// a signal).
func (p *copyProc) exitCode(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		t.Fatalf("pid %d did not exit within %s; stderr:\n%s", p.cmd.Process.Pid, limit, p.stderr.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// kill9 kills the process with SIGKILL and checks that the signal ended it.
func (p *copyProc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("pid %d ended with %v, want killed by SIGKILL", p.cmd.Process.Pid, p.cmd.ProcessState)
	}
}

// awaitFailpoint waits until the process announced in file that it reached
// the point (park or wait), failing if it exits first.
func (p *copyProc) awaitFailpoint(t *testing.T, file, line string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if b, err := os.ReadFile(file); err == nil && strings.TrimSpace(string(b)) == line {
			return
		}
		select {
		case <-p.done:
			t.Fatalf("pid %d exited (%v) before %q; stderr:\n%s", p.cmd.Process.Pid, p.err, line, p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q within %s; stderr:\n%s", line, limit, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sourceRecord is one committed source record as an independent reader
// sees it.
type sourceRecord struct {
	offset int64
	text   string // "partition|key|value"
}

// sourceRecords reads the source's committed records with offsets (the
// oracle the copy's prefix is judged by).
func sourceRecords(t *testing.T, topic string) map[int32][]sourceRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs, err := broker.ReadCommitted(ctx, topic, highs(t, topic))
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32][]sourceRecord{}
	for p, rs := range recs {
		for _, r := range rs {
			out[p] = append(out[p], sourceRecord{r.Offset, fmt.Sprintf("%d|%s|%s", r.Partition, r.Key, r.Value)})
		}
	}
	return out
}

// below returns the texts of the records below the given offsets, sorted.
func below(src map[int32][]sourceRecord, offsets map[int32]int64) []string {
	out := []string{}
	for p, rs := range src {
		for _, r := range rs {
			if r.offset < offsets[p] {
				out = append(out, r.text)
			}
		}
	}
	sort.Strings(out)
	return out
}

// stableMarks returns each partition's last stable offset and high
// watermark.
func stableMarks(t *testing.T, topic string) (lso, high map[int32]int64) {
	t.Helper()
	marks, err := broker.Marks(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	lso, high = map[int32]int64{}, map[int32]int64{}
	for p, m := range marks {
		lso[p], high[p] = m.LSO, m.High
	}
	return lso, high
}

// readCommittedTo reads topic read_committed up to ends, as sorted
// "partition|key|value" strings.
func readCommittedTo(t *testing.T, topic string, ends map[int32]int64) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs, err := broker.ReadCommitted(ctx, topic, ends)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, rs := range recs {
		for _, r := range rs {
			got = append(got, fmt.Sprintf("%d|%s|%s", r.Partition, r.Key, r.Value))
		}
	}
	sort.Strings(got)
	return got
}

// checkCopiedPrefix checks a transactional copy at rest: a read_committed
// reader of the destination (up to its last stable offsets: an open
// transaction of a dead copier holds them) sees exactly the source records
// below the group's committed offsets. It returns those offsets.
func checkCopiedPrefix(t *testing.T, src map[int32][]sourceRecord, n copyNames) map[int32]int64 {
	t.Helper()
	committed := groupOffsets(t, n.group, n.from)
	lso, _ := stableMarks(t, n.to)
	if diff := cmp.Diff(below(src, committed), readCommittedTo(t, n.to, lso)); diff != "" {
		t.Fatalf("destination vs the source below the group's committed offsets %v (-source +destination):\n%s", committed, diff)
	}
	return committed
}

// TestCopyKill9AtTransactionPoints parks a copier process at each point of
// a transaction (records produced; offsets sent, before the commit; just
// after the commit), at its second transaction so that something was
// committed before, and kills it with SIGKILL there. After each kill a
// read_committed reader of the destination sees exactly the source records
// below the group's committed offsets; the next process (same group and
// transactional id) resolves what the dead one left, and the last one, run
// without a failpoint, completes the copy: every committed source record
// exactly once, no aborted one.
func TestCopyKill9AtTransactionPoints(t *testing.T) {
	from := uniq(t, "kill9")
	n := copyNames{from: from, to: from + "-copy", group: from + "-group", tid: from + "-txn"}
	want := append(ledger(t, n.from, 3, 30), interleaved(t, n.from, 3, 270)...)
	sort.Strings(want)
	broker.TestTopic(t, n.to, 3, nil)
	src := sourceRecords(t, n.from)

	points := []struct {
		point string
		open  bool // the kill leaves an open transaction in the destination
	}{
		{failpoint.CopyProduced, true},
		{failpoint.CopyCommitBefore, true},
		{failpoint.CopyCommitAfter, false},
	}
	var prev map[int32]int64
	for i, pt := range points {
		file := filepath.Join(t.TempDir(), "failpoint")
		p := startCopy(t, []string{failpoint.EnvPoint + "=" + pt.point + "@2", failpoint.EnvFile + "=" + file},
			n.args("-X", "max.partition.fetch.bytes=1", "-X", "fetch.max.bytes=1024", "-X", "message.max.bytes=1000")...)
		p.awaitFailpoint(t, file, "failpoint "+pt.point+" parked", 60*time.Second)
		if pt.open {
			// The parked copier's records reach the broker on
			// librdkafka's threads: the kill must land with them in the
			// log, in a transaction that is still open.
			awaitCond(t, 30*time.Second, "the parked transaction's records in the destination", func() bool {
				lso, high := stableMarks(t, n.to)
				for q, h := range high {
					if lso[q] < h {
						return true
					}
				}
				return false
			})
		} else {
			// Committed: the markers are in (Kafka writes them after
			// EndTxn returns) and the group moved.
			awaitCond(t, 30*time.Second, "the commit's markers in the destination", func() bool {
				lso, high := stableMarks(t, n.to)
				return cmp.Equal(lso, high)
			})
		}
		p.kill9(t)
		now := checkCopiedPrefix(t, src, n)
		t.Logf("kill %d at %s: group offsets %v", i+1, pt.point, now)
		if len(now) == 0 || cmp.Equal(now, prev) {
			t.Fatalf("kill %d at %s: the group is at %v (before: %v): the run committed nothing before the kill", i+1, pt.point, now, prev)
		}
		prev = now
	}

	last := startCopy(t, nil, n.args()...)
	if code := last.exitCode(t, 90*time.Second); code != 0 {
		t.Fatalf("the copy after the kills exited %d, want 0; stderr:\n%s", code, last.stderr.String())
	}
	left := len(want) - len(below(src, prev))
	if sum := lastSummaryLine(t, last.stdout.String()); !sum.Committed || sum.Records != int64(left) {
		t.Fatalf("final copy summary %+v, want the %d records the killed runs left", sum, left)
	}
	if diff := cmp.Diff(want, readCommitted(t, n.to)); diff != "" {
		t.Fatalf("destination (-source +destination):\n%s", diff)
	}
	if diff := cmp.Diff(highs(t, n.from), groupOffsets(t, n.group, n.from)); diff != "" {
		t.Fatalf("group offsets vs source end offsets (-want +got):\n%s", diff)
	}
	verifyClean(t, n.from, n.to)
}

// interleaved appends n records to topic's parts partitions in produces of
// six (small batches), so that with tiny fetches (one batch per fetch) the
// copier's transactions span partitions. It returns them as
// "partition|key|value".
func interleaved(t *testing.T, topic string, parts int32, n int) []string {
	t.Helper()
	var out []string
	for i := 0; i < n; i += 6 {
		var recs []localkafka.Record
		for j := i; j < min(i+6, n); j++ {
			p := int32(j) % parts
			k, v := fmt.Sprintf("acct-%d", j%17), fmt.Sprintf("chunk-%d", j)
			recs = append(recs, localkafka.Record{Partition: p, Key: []byte(k), Value: []byte(v)})
			out = append(out, fmt.Sprintf("%d|%s|%s", p, k, v))
		}
		if _, err := broker.Produce(context.Background(), topic, recs); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// lastSummaryLine parses the JSON summary `copy` prints last on stdout.
func lastSummaryLine(t *testing.T, stdout string) copier.Summary {
	t.Helper()
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	var s copier.Summary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		t.Fatalf("last stdout line %q is not the JSON summary: %v", lines[len(lines)-1], err)
	}
	return s
}

// TestZombieFencedAtCommit holds a copier process (A) at its second
// transaction, its records in the destination's log and its positions sent
// to the transaction, just before the commit; a second copier (B) with the
// same transactional id and group then runs the copy to its end. B's
// InitTransactions fences A's producer (and aborts A's open transaction),
// B's consumer with the same group.instance.id replaces A's member. When A
// is let go, its commit must fail: A exits 1 saying it was fenced, and none
// of its held records ever becomes visible: the destination holds every
// committed source record exactly once.
func TestZombieFencedAtCommit(t *testing.T) {
	from := uniq(t, "zombie")
	n := copyNames{from: from, to: from + "-copy", group: from + "-group", tid: from + "-txn"}
	want := ledger(t, n.from, 3, 200)
	broker.TestTopic(t, n.to, 3, nil)

	file := filepath.Join(t.TempDir(), "failpoint")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	a := startCopy(t, []string{failpoint.EnvPoint + "=" + failpoint.CopyCommitBefore + "@2=wait", failpoint.EnvFile + "=" + file},
		n.args("--follow")...)
	a.awaitFailpoint(t, file, "failpoint "+failpoint.CopyCommitBefore+" waiting", 60*time.Second)
	var held map[int32]int64 // A's open transaction: the destination's LSO below its high watermark
	awaitCond(t, 30*time.Second, "copier A's held records in the destination", func() bool {
		lso, high := stableMarks(t, n.to)
		held = map[int32]int64{}
		for p, h := range high {
			if lso[p] < h {
				held[p] = h - lso[p]
			}
		}
		return len(held) > 0
	})
	byA := groupOffsets(t, n.group, n.from)
	if len(byA) == 0 {
		t.Fatal("copier A committed nothing before its second transaction")
	}
	t.Logf("copier A holds an open transaction (offsets above the LSO per destination partition: %v); the group is at %v", held, byA)

	b := cfg(t, n.from, n.to)
	b.Group, b.TransactionalID = n.group, n.tid
	sum, err := copier.Run(context.Background(), b)
	if err != nil {
		t.Fatalf("copier B: %v", err)
	}
	left := len(want) - countBelow(t, n.from, byA)
	if sum.Records != int64(left) || !sum.Committed {
		t.Fatalf("copier B summary %+v, want the %d records copier A had not committed", sum, left)
	}

	if err := os.Remove(file); err != nil { // A's commit goes on
		t.Fatal(err)
	}
	if code := a.exitCode(t, 60*time.Second); code != 1 {
		t.Fatalf("the zombie copier exited %d, want 1; stderr:\n%s", code, a.stderr.String())
	}
	if !strings.Contains(cliError(a.stderr.String()), "fenced") {
		t.Fatalf("the zombie copier's error does not say it was fenced; stderr:\n%s", a.stderr.String())
	}
	lso, high := stableMarks(t, n.to)
	if !cmp.Equal(lso, high) {
		t.Fatalf("an open transaction is left in the destination after the zombie's end: LSO %v, high %v", lso, high)
	}
	if diff := cmp.Diff(want, readCommitted(t, n.to)); diff != "" {
		t.Fatalf("destination (-source +destination):\n%s", diff)
	}
	if diff := cmp.Diff(highs(t, n.from), groupOffsets(t, n.group, n.from)); diff != "" {
		t.Fatalf("group offsets vs source end offsets (-want +got):\n%s", diff)
	}
	verifyClean(t, n.from, n.to)
}

// countBelow counts the committed source records below offsets.
func countBelow(t *testing.T, topic string, offsets map[int32]int64) int {
	t.Helper()
	return len(below(sourceRecords(t, topic), offsets))
}

// cliError returns the CLI's own error line ("kmaterialize: ..."), not a
// log line.
func cliError(stderr string) string {
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "kmaterialize: ") {
			return l
		}
	}
	return ""
}
