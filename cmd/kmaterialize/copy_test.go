package main

// End-to-end tests of `copy` and `verify`: the built binary killed with
// SIGKILL at chosen points of its transactions, restarted, and fenced by a
// second copier; the CLI's summary, exit codes and verify report. The
// destination is always checked twice: by `verify`, and by an independent
// franz-go read_committed reader against the records the test produced.
//
// The kill points are made deterministic with kfake controls: the copier's
// Nth request of a kind (Produce to the destination, TxnOffsetCommit,
// EndTxn) is parked at the broker until the process is dead, then either
// dropped (the broker never sees it) or let through (the broker applies the
// request of a process that is no longer there).

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmaterialize/kmaterialize/copier"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// copyNames are the topics, group and transactional id of one test's copy.
type copyNames struct{ src, dst, group, tid string }

func newCopyNames(t *testing.T) copyNames {
	base := runName(t)
	n := copyNames{src: base + "-src", dst: base + "-dst", group: base + "-group", tid: base + "-txn"}
	t.Cleanup(func() { removeGroup(t, n.group, n.tid) })
	return n
}

// removeGroup takes the copier's static member out of group and deletes the
// group, so that later tests see no group committed to by this one. (A
// copier never sends LeaveGroup: its static member would otherwise stay until
// the session timeout.)
func removeGroup(t *testing.T, group, tid string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := broker.Client()
	if err != nil {
		t.Error(err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	notFound := func(err error) bool { return err == nil || errors.Is(err, kerr.GroupIDNotFound) }
	if _, err := adm.LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs(copier.InstanceID(tid))); !notFound(err) {
		t.Logf("leave group %s: %v", group, err)
	}
	if _, err := adm.DeleteGroup(ctx, group); !notFound(err) {
		t.Errorf("delete group %s: %v", group, err)
	}
}

func (n copyNames) copyArgs(extra ...string) []string {
	return append([]string{"--log-format", "json", "copy", "--brokers", broker.Addr, "--from", n.src, "--to", n.dst,
		"--group", n.group, "--transactional-id", n.tid, "--batch-records", "20", "--batch-interval", "300ms",
		"--stall-timeout", "20s"}, extra...)
}

// tinyFetches are librdkafka properties that make each fetch return about
// one batch per partition, so a transaction spans several partitions.
var tinyFetches = []string{"-X", "max.partition.fetch.bytes=1", "-X", "fetch.max.bytes=1024", "-X", "message.max.bytes=1000"}

func (n copyNames) verifyArgs() []string {
	return []string{"verify", "--brokers", broker.Addr, "--from", n.src, "--to", n.dst, "--stall-timeout", "20s"}
}

// copySource fills a 3-partition source topic with n plain records (unique
// values), a committed transaction in the middle, an aborted one (never to
// be copied) and a committed transaction that ends partition 0 with a
// commit marker. It returns every record written, aborted ones with
// Committed false.
func copySource(t *testing.T, topic string, n int) []rec {
	t.Helper()
	broker.TestTopic(t, topic, 3, nil)
	plain := func(from, to int) []localkafka.Record {
		var out []localkafka.Record
		for i := from; i < to; i++ {
			out = append(out, localkafka.Record{Partition: int32(i % 3), Key: []byte(fmt.Sprintf("acct-%d", i%17)),
				Value: []byte(fmt.Sprintf("entry-%04d", i))})
		}
		return out
	}
	var all []rec
	// Small produce requests make small batches, so that tiny fetches
	// (see tinyFetches) interleave the partitions.
	chunks := func(from, to int) {
		for i := from; i < to; i += 6 {
			all = append(all, produce(t, topic, plain(i, min(i+6, to)))...)
		}
	}
	chunks(0, n/2)
	all = append(all, txn(t, topic, topic+"-tx1", []localkafka.Record{
		{Partition: 0, Key: []byte("tx"), Value: []byte("txn-commit-0")},
		{Partition: 1, Key: []byte("tx"), Value: []byte("txn-commit-1")},
		{Partition: 2, Key: []byte("tx"), Value: []byte("txn-commit-2")},
	}, true)...)
	all = append(all, txn(t, topic, topic+"-tx2", []localkafka.Record{
		{Partition: 1, Key: []byte("tx"), Value: []byte("txn-aborted-1")},
		{Partition: 2, Key: []byte("tx"), Value: []byte("txn-aborted-2")},
	}, false)...)
	chunks(n/2, n)
	all = append(all, txn(t, topic, topic+"-tx3", []localkafka.Record{
		{Partition: 0, Key: []byte("last"), Value: []byte("txn-commit-last")},
	}, true)...)
	return all
}

// committedValues is what a read_committed reader must see of recs, per
// partition in offset order, below limit (nil: everything).
func committedValues(recs []rec, limit map[int32]int64) map[int32][]string {
	rs := append([]rec(nil), recs...)
	sort.SliceStable(rs, func(i, j int) bool {
		if rs[i].P != rs[j].P {
			return rs[i].P < rs[j].P
		}
		return rs[i].O < rs[j].O
	})
	out := map[int32][]string{}
	for _, r := range rs {
		if r.Committed && (limit == nil || r.O < limit[r.P]) {
			out[r.P] = append(out[r.P], string(r.V))
		}
	}
	return out
}

func countValues(m map[int32][]string) int {
	n := 0
	for _, vs := range m {
		n += len(vs)
	}
	return n
}

func countCommitted(recs []rec) int {
	n := 0
	for _, r := range recs {
		if r.Committed {
			n++
		}
	}
	return n
}

// partitionMarks returns each partition's high watermark, or with stable
// its last stable offset, as the broker has them now.
func partitionMarks(t testing.TB, topic string, stable bool) map[int32]int64 {
	t.Helper()
	out := map[int32]int64{}
	for p, m := range marksOf(t, topic) {
		if stable {
			out[p] = m.LSO
		} else {
			out[p] = m.High
		}
	}
	return out
}

// readCommittedValues reads topic from the start up to ends with an
// independent read_committed client (franz-go), and returns the values per
// partition in offset order.
func readCommittedValues(t *testing.T, topic string, ends map[int32]int64) map[int32][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs, err := broker.ReadCommitted(ctx, topic, ends)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int32][]string{}
	for p, rs := range recs {
		for _, r := range rs {
			got[p] = append(got[p], string(r.Value))
		}
	}
	return got
}

// checkExactlyOnce reads the whole destination read_committed and checks
// that it holds every committed source record exactly once, in source order
// per partition, and nothing else.
func checkExactlyOnce(t *testing.T, src []rec, dst string) {
	t.Helper()
	got := readCommittedValues(t, dst, partitionMarks(t, dst, false))
	seen := map[string]int{}
	for p, vs := range got {
		for _, v := range vs {
			seen[v]++
			if seen[v] == 2 {
				t.Errorf("saw %q twice in %s (second time in partition %d)", v, dst, p)
			}
		}
	}
	for _, r := range src {
		switch n := seen[string(r.V)]; {
		case r.Committed && n == 0:
			t.Errorf("source record %q (%d@%d) missing from %s", r.V, r.P, r.O, dst)
		case !r.Committed && n > 0:
			t.Errorf("aborted source record %q (%d@%d) copied to %s", r.V, r.P, r.O, dst)
		}
	}
	if diff := cmp.Diff(committedValues(src, nil), got); diff != "" {
		t.Fatalf("%s read_committed per partition (-source +destination):\n%s", dst, diff)
	}
}

// checkCopiedPrefix checks the invariant of a transactional copy at rest:
// what read_committed readers see of the destination is exactly the source
// records below the group's committed offsets (an open transaction of a
// dead copier holds the destination's last stable offset, so it is read up
// to there).
func checkCopiedPrefix(t *testing.T, src []rec, n copyNames) map[int32]int64 {
	t.Helper()
	committed := groupOffsets(t, n.group, n.src)
	got := readCommittedValues(t, n.dst, partitionMarks(t, n.dst, true))
	if diff := cmp.Diff(committedValues(src, committed), got); diff != "" {
		t.Fatalf("destination vs the source below the group's committed offsets %v (-source +destination):\n%s", committed, diff)
	}
	return committed
}

func groupOffsets(t *testing.T, group, topic string) map[int32]int64 {
	t.Helper()
	all, err := broker.GroupOffsets(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return all[group][topic]
}

// verifyReport is the JSON `verify` prints.
type verifyReport struct {
	SourceRecords      int64           `json:"source_records"`
	DestinationRecords int64           `json:"destination_records"`
	Missing            int64           `json:"missing"`
	Duplicated         int64           `json:"duplicated"`
	OK                 bool            `json:"ok"`
	MissingExamples    []verifyExample `json:"missing_examples"`
	DuplicatedExamples []verifyExample `json:"duplicated_examples"`
}

// verifyExample is one of the report's examples.
type verifyExample struct {
	Key         *string `json:"key"`
	Value       *string `json:"value"`
	Encoding    string  `json:"encoding"`
	Truncated   bool    `json:"truncated"`
	Source      []pos   `json:"source"`
	Destination []pos   `json:"destination"`
	SourceCount int64   `json:"source_count"`
	DestCount   int64   `json:"destination_count"`
}

type pos struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

func runVerifyCLI(t *testing.T, n copyNames, want int) verifyReport {
	t.Helper()
	r := mustCLI(t, want, n.verifyArgs()...)
	var rep verifyReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("verify output is not JSON: %v\n%s", err, r.stdout)
	}
	return rep
}

// verifyClean runs `verify` and checks that it exits 0 with nothing missing
// or duplicated over all want records.
func verifyClean(t *testing.T, n copyNames, want int) {
	t.Helper()
	rep := runVerifyCLI(t, n, 0)
	if !rep.OK || rep.Missing != 0 || rep.Duplicated != 0 || rep.SourceRecords != int64(want) || rep.DestinationRecords != int64(want) {
		t.Fatalf("verify report %+v, want ok with %d records on each side", rep, want)
	}
}

// copySummary is the JSON line `copy` prints last on stdout.
type copySummary struct {
	Records      int64 `json:"records"`
	Transactions int64 `json:"transactions"`
	Committed    bool  `json:"committed"`
	Retries      int64 `json:"retries"`
	Aborts       int64 `json:"aborts"`
}

func lastSummary(t *testing.T, stdout string) copySummary {
	t.Helper()
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	var s copySummary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		t.Fatalf("last stdout line %q is not the JSON summary: %v", lines[len(lines)-1], err)
	}
	return s
}

// heldRequest parks one request at the broker.
type heldRequest struct {
	held    chan struct{} // closed once the request is parked
	gate    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	through bool
}

// release wakes the parked request: through lets the broker handle it,
// otherwise it is dropped unanswered (its connection closed).
func (h *heldRequest) release(through bool) {
	h.once.Do(func() {
		h.mu.Lock()
		h.through = through
		h.mu.Unlock()
		close(h.gate)
	})
}

// holdRequest parks the request of kind key that is the (after+1)th to
// satisfy match, until release. Matching requests before it, and every
// request after it, pass untouched.
func holdRequest(t *testing.T, key kmsg.Key, after int, match func(kmsg.Request) bool) *heldRequest {
	t.Helper()
	localkafka.KfakeOnly(t)
	h := &heldRequest{held: make(chan struct{}), gate: make(chan struct{})}
	var (
		mu      sync.Mutex
		seen    int
		holding bool
	)
	t.Cleanup(func() { h.release(false) })
	broker.Cluster.ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
		broker.Cluster.KeepControl()
		mu.Lock()
		if holding || !match(req) {
			mu.Unlock()
			return nil, nil, false
		}
		seen++
		if seen <= after {
			mu.Unlock()
			return nil, nil, false
		}
		holding = true
		mu.Unlock()
		close(h.held)
		broker.Cluster.SleepControl(func() { <-h.gate })
		broker.Cluster.DropControl()
		h.mu.Lock()
		through := h.through
		h.mu.Unlock()
		if through {
			return nil, nil, false
		}
		return nil, errors.New("kmaterialize test: request dropped"), true
	})
	return h
}

func txnProduceTo(tid, topic string) func(kmsg.Request) bool {
	id := broker.Cluster.TopicInfo(topic).TopicID
	return func(req kmsg.Request) bool {
		r := req.(*kmsg.ProduceRequest)
		if r.TransactionID == nil || *r.TransactionID != tid {
			return false
		}
		for _, tp := range r.Topics {
			if tp.Topic == topic || tp.TopicID == id {
				return true
			}
		}
		return false
	}
}

func endTxnCommit(tid string) func(kmsg.Request) bool {
	return func(req kmsg.Request) bool {
		r := req.(*kmsg.EndTxnRequest)
		return r.TransactionalID == tid && r.Commit
	}
}

func txnOffsetCommit(tid string) func(kmsg.Request) bool {
	return func(req kmsg.Request) bool { return req.(*kmsg.TxnOffsetCommitRequest).TransactionalID == tid }
}

// waitHeld waits for h to park a request of p, failing if p exits first.
func waitHeld(t *testing.T, p *proc, h *heldRequest, limit time.Duration, what string) {
	t.Helper()
	select {
	case <-h.held:
	case <-p.done:
		t.Fatalf("copier exited before %s; stderr:\n%s", what, p.stderrText())
	case <-time.After(limit):
		t.Fatalf("no %s within %s; stderr:\n%s", what, limit, p.stderrText())
	}
}

func kill9(t *testing.T, p *proc) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != -1 {
		t.Fatalf("killed copier exit code %d, want -1 (killed by a signal)", code)
	}
}

// waitFor polls cond until it holds or limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sessionBound is how long a restarted copier may take to finish, far below
// librdkafka's default session.timeout.ms of 45s that a copier without
// static membership would sit out before the dead member's partitions are
// given back.
const sessionBound = 20 * time.Second

// TestCopyKill9 kills the copier process with SIGKILL four times, each time
// with a transaction open at a different point, restarts it with the same
// transactional id and group, and checks after every kill that the
// destination holds exactly the source records below the group's committed
// offsets, and at the end that it holds every source record exactly once.
func TestCopyKill9(t *testing.T) {
	localkafka.KfakeOnly(t)
	n := newCopyNames(t)
	src := copySource(t, n.src, 240)
	broker.TestTopic(t, n.dst, 3, nil)
	// Produces are parked only after this run's first commit, so that
	// every kill has something committed before it.
	commits := broker.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: n.tid, Observe: true, Count: -1})
	defer commits.Remove()
	var commitsBefore atomic.Int64 // commits seen before this run
	produceAfterCommit := func(req kmsg.Request) bool {
		return int64(commits.Hits()) > commitsBefore.Load() && txnProduceTo(n.tid, n.dst)(req)
	}
	kills := []struct {
		name    string
		key     kmsg.Key
		after   int
		match   func(kmsg.Request) bool
		through bool // let the parked request reach the broker after the kill
		open    bool // the kill leaves records of an open transaction in the destination
	}{
		{"after the first commit, the second commit never reaches the broker", kmsg.EndTxn, 1, endTxnCommit(n.tid), false, true},
		{"mid-batch, a produce to the destination parked", kmsg.Produce, 0, produceAfterCommit, false, false},
		// The producer's records may be queued behind the parked
		// request on the same connection, or already at the broker.
		{"records produced, the offsets' commit to the transaction parked", kmsg.TxnOffsetCommit, 1, txnOffsetCommit(n.tid), false, false},
		{"the commit reaches the broker only after the copier died", kmsg.EndTxn, 1, endTxnCommit(n.tid), true, true},
	}
	var prev map[int32]int64
	for i, k := range kills {
		commitsBefore.Store(int64(commits.Hits()))
		h := holdRequest(t, k.key, k.after, k.match)
		p := startProc(t, n.copyArgs(tinyFetches...)...)
		// A restart that sat out the killed member's session timeout
		// would not commit and reach the parked request in time.
		waitHeld(t, p, h, sessionBound, fmt.Sprintf("kill %d (%s): parked request", i+1, k.name))
		kill9(t, p)
		if k.open && cmp.Equal(partitionMarks(t, n.dst, true), partitionMarks(t, n.dst, false)) {
			t.Fatalf("kill %d: no open transaction in the destination (last stable offsets %v = high watermarks): the kill did not land mid-transaction",
				i+1, partitionMarks(t, n.dst, true))
		}
		before := groupOffsets(t, n.group, n.src)
		h.release(k.through)
		if k.through {
			// The dead copier's commit lands: the group moves on.
			waitFor(t, 10*time.Second, "the late commit applied", func() bool {
				return !cmp.Equal(before, groupOffsets(t, n.group, n.src)) &&
					cmp.Equal(partitionMarks(t, n.dst, true), partitionMarks(t, n.dst, false))
			})
		}
		now := checkCopiedPrefix(t, src, n)
		t.Logf("kill %d (%s): group offsets %v", i+1, k.name, now)
		if cmp.Equal(now, prev) {
			t.Fatalf("kill %d: the group did not advance (%v): the kill landed before anything was committed", i+1, now)
		}
		prev = now
	}

	started := time.Now()
	p := startProc(t, n.copyArgs()...)
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("final copy exit %d, want 0; stderr:\n%s", code, p.stderrText())
	}
	if d := time.Since(started); d > sessionBound {
		t.Fatalf("final copy after the kills took %s, want < %s", d, sessionBound)
	}
	// The final run copies exactly what the killed runs left.
	left := countCommitted(src) - countValues(committedValues(src, prev))
	if sum := lastSummary(t, p.stdout.String()); !sum.Committed || sum.Records != int64(left) {
		t.Fatalf("final copy summary %+v, want the %d records left after the kills", sum, left)
	}
	checkExactlyOnce(t, src, n.dst)
	verifyClean(t, n, countCommitted(src))
	if diff := cmp.Diff(partitionMarks(t, n.src, false), groupOffsets(t, n.group, n.src)); diff != "" {
		t.Fatalf("group offsets vs source high watermarks (-source +group):\n%s", diff)
	}
}

// TestCopyRestartAfterKill9IsPrompt kills a copier with a transaction open
// and checks that the restart (same transactional id and group) finishes
// well within the dead member's session timeout: static membership gives it
// the partitions back at once.
func TestCopyRestartAfterKill9IsPrompt(t *testing.T) {
	localkafka.KfakeOnly(t)
	n := newCopyNames(t)
	src := copySource(t, n.src, 90)
	broker.TestTopic(t, n.dst, 3, nil)
	h := holdRequest(t, kmsg.EndTxn, 1, endTxnCommit(n.tid))
	p := startProc(t, n.copyArgs()...)
	p.waitLine(t, sessionBound, "partitions assigned", func(l string) bool { return strings.Contains(l, "partitions assigned") })
	waitHeld(t, p, h, sessionBound, "the second commit")
	kill9(t, p)
	h.release(false)

	started := time.Now()
	r := startProc(t, n.copyArgs()...)
	assigned := r.waitLine(t, sessionBound, "partitions assigned after the restart", func(l string) bool {
		return strings.Contains(l, "partitions assigned")
	})
	assignedAfter := time.Since(started)
	select {
	case <-r.done:
	case <-time.After(sessionBound - time.Since(started)):
		t.Fatalf("the restarted copier did not finish within %s (waiting out the killed member's session timeout?); stderr:\n%s", sessionBound, r.stderrText())
	}
	if c := r.wait(t, 10*time.Second); c != 0 {
		t.Fatalf("restarted copier exit %d, want 0; stderr:\n%s", c, r.stderrText())
	}
	t.Logf("restart: partitions assigned after %s (%s), done after %s", assignedAfter, assigned, time.Since(started))
	checkExactlyOnce(t, src, n.dst)
	verifyClean(t, n, countCommitted(src))
}

// TestCopyFencedProcess runs copier A with --follow, parks its second
// commit, and runs copier B with the same transactional id and group to
// completion. A must then exit 1 saying it was fenced, and the destination
// holds every record exactly once.
func TestCopyFencedProcess(t *testing.T) {
	localkafka.KfakeOnly(t)
	n := newCopyNames(t)
	src := copySource(t, n.src, 120)
	broker.TestTopic(t, n.dst, 3, nil)
	h := holdRequest(t, kmsg.EndTxn, 1, endTxnCommit(n.tid))
	a := startProc(t, n.copyArgs(append([]string{"--follow"}, tinyFetches...)...)...)
	waitHeld(t, a, h, sessionBound, "copier A's second commit")

	byA := groupOffsets(t, n.group, n.src)
	if len(byA) == 0 {
		t.Fatal("copier A committed nothing before its commit was parked")
	}
	b := startProc(t, n.copyArgs()...)
	if code := b.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("copier B exit %d, want 0; stderr:\n%s", code, b.stderrText())
	}
	// B copies what A committed no further than, and no more: A's open
	// transaction was aborted when B's producer fenced A's.
	left := countCommitted(src) - countValues(committedValues(src, byA))
	if sum := lastSummary(t, b.stdout.String()); !sum.Committed || sum.Records != int64(left) {
		t.Fatalf("copier B summary %+v, want the %d records A had not committed", sum, left)
	}
	// A's parked commit now reaches the broker with A's old producer
	// epoch.
	h.release(true)
	if code := a.wait(t, 30*time.Second); code != 1 {
		t.Fatalf("fenced copier A exit %d, want 1; stderr:\n%s", code, a.stderrText())
	}
	fenced := false
	for _, l := range strings.Split(a.stderrText(), "\n") {
		// The CLI's own error line, not a librdkafka log line.
		if strings.HasPrefix(l, "kmaterialize: ") && strings.Contains(l, "fenced") {
			fenced = true
		}
	}
	if !fenced {
		t.Fatalf("copier A's error does not say it was fenced:\n%s", a.stderrText())
	}
	checkExactlyOnce(t, src, n.dst)
	verifyClean(t, n, countCommitted(src))
	if diff := cmp.Diff(partitionMarks(t, n.src, false), groupOffsets(t, n.group, n.src)); diff != "" {
		t.Fatalf("group offsets vs source high watermarks (-source +group):\n%s", diff)
	}
}

// TestCopySummary checks the summary line of a normal copy and the group's
// committed offsets, and that a second copy copies nothing.
func TestCopySummary(t *testing.T) {
	n := newCopyNames(t)
	src := copySource(t, n.src, 100)
	broker.TestTopic(t, n.dst, 3, nil)
	r := mustCLI(t, 0, n.copyArgs()...)
	sum := lastSummary(t, r.stdout)
	if sum.Records != int64(countCommitted(src)) || sum.Transactions < 1 || !sum.Committed {
		t.Fatalf("summary %+v, want %d records in at least one committed transaction", sum, countCommitted(src))
	}
	if diff := cmp.Diff(partitionMarks(t, n.src, false), groupOffsets(t, n.group, n.src)); diff != "" {
		t.Fatalf("group offsets vs source high watermarks (-source +group):\n%s", diff)
	}
	checkExactlyOnce(t, src, n.dst)
	verifyClean(t, n, countCommitted(src))

	// Nothing left to copy: a run that committed nothing says so.
	r = mustCLI(t, 0, n.copyArgs()...)
	if sum := lastSummary(t, r.stdout); sum.Records != 0 || sum.Transactions != 0 || sum.Committed {
		t.Fatalf("second copy summary %+v, want 0 records in 0 transactions, committed false", sum)
	}
	checkExactlyOnce(t, src, n.dst)
}

// TestCopyAbortCLI: --abort produces everything and commits nothing; verify
// then finds every record missing; a normal copy afterwards is complete.
func TestCopyAbortCLI(t *testing.T) {
	n := newCopyNames(t)
	src := copySource(t, n.src, 60)
	broker.TestTopic(t, n.dst, 3, nil)
	r := mustCLI(t, 0, n.copyArgs("--abort")...)
	sum := lastSummary(t, r.stdout)
	if sum.Records != int64(countCommitted(src)) || sum.Committed {
		t.Fatalf("--abort summary %+v, want %d records, committed false", sum, countCommitted(src))
	}
	hw := partitionMarks(t, n.dst, false)
	produced := int64(0)
	for _, h := range hw {
		produced += h
	}
	if produced == 0 {
		t.Fatal("--abort wrote nothing to the destination: the test proves nothing")
	}
	got := readCommittedValues(t, n.dst, hw)
	for p, vs := range got {
		if len(vs) > 0 {
			t.Fatalf("read_committed sees %d aborted records in partition %d: %q", len(vs), p, vs)
		}
	}
	if offs := groupOffsets(t, n.group, n.src); len(offs) != 0 {
		t.Fatalf("--abort advanced the group: %v", offs)
	}
	rep := runVerifyCLI(t, n, 3)
	if rep.OK || rep.Missing != int64(countCommitted(src)) || rep.Duplicated != 0 || rep.DestinationRecords != 0 {
		t.Fatalf("verify after --abort: %+v, want all %d missing", rep, countCommitted(src))
	}

	mustCLI(t, 0, n.copyArgs()...)
	checkExactlyOnce(t, src, n.dst)
	verifyClean(t, n, countCommitted(src))
}

// TestCopyExitCodes: a destination with fewer partitions is bad usage (2), a
// missing source topic is 5.
func TestCopyExitCodes(t *testing.T) {
	n := newCopyNames(t)
	copySource(t, n.src, 9)
	broker.TestTopic(t, n.dst, 2, nil)
	r := mustCLI(t, 2, n.copyArgs()...)
	if !strings.Contains(r.stderr, "partitions") || !strings.Contains(r.stderr, "--repartition") {
		t.Fatalf("fewer destination partitions: stderr does not explain:\n%s", r.stderr)
	}
	// The refused run's summary says that it did nothing.
	if sum := lastSummary(t, r.stdout); sum.Committed || sum.Records != 0 || sum.Transactions != 0 {
		t.Fatalf("refused copy's summary %+v, want committed false, no records, no transactions", sum)
	}
	if got := readCommittedValues(t, n.dst, partitionMarks(t, n.dst, false)); len(got) != 0 {
		t.Fatalf("a refused copy wrote %v", got)
	}
	missing := n
	missing.src = n.src + "-nonexistent"
	r = mustCLI(t, 5, missing.copyArgs()...)
	if !strings.Contains(r.stderr, missing.src) {
		t.Fatalf("missing source: stderr does not name %s:\n%s", missing.src, r.stderr)
	}

	// The brokers refuse the transactional id: exit 5, naming it (a kfake
	// Fault; on Kafka the ACL tests refuse it for real).
	t.Run("refused transactional id", func(t *testing.T) {
		localkafka.KfakeOnly(t)
		wide := n
		wide.dst = n.dst + "-wide"
		broker.TestTopic(t, wide.dst, 3, nil)
		h := broker.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, TxnID: n.tid, TopLevel: true,
			Err: kerr.TransactionalIDAuthorizationFailed, Count: 1})
		defer h.Remove()
		r := mustCLI(t, 5, wide.copyArgs()...)
		if h.Hits() != 1 {
			t.Fatalf("the authorization fault hit %d times, want 1", h.Hits())
		}
		if !strings.Contains(r.stderr, "not authorized") || !strings.Contains(r.stderr, n.tid) {
			t.Fatalf("refused transactional id: stderr does not say so:\n%s", r.stderr)
		}
		if got := readCommittedValues(t, wide.dst, partitionMarks(t, wide.dst, false)); len(got) != 0 {
			t.Fatalf("an unauthorized copy wrote %v", got)
		}
	})
}

// TestVerifyCLIMissingAndDuplicated: verify on hand-made topics, one record
// missing and one duplicated, exits 3 and names both with partition and
// offset on each side.
func TestVerifyCLIMissingAndDuplicated(t *testing.T) {
	n := newCopyNames(t)
	for _, tp := range []string{n.src, n.dst} {
		broker.TestTopic(t, tp, 2, nil)
	}
	var recs []localkafka.Record
	for i := 0; i < 10; i++ {
		recs = append(recs, localkafka.Record{Partition: int32(i % 2), Key: []byte(fmt.Sprint("k", i)), Value: []byte(fmt.Sprint("v", i))})
	}
	src := produce(t, n.src, recs)
	var dstRecs []localkafka.Record
	for i, r := range recs {
		if i != 3 { // v3 missing
			dstRecs = append(dstRecs, r)
		}
		if i == 6 { // v6 twice
			dstRecs = append(dstRecs, r)
		}
	}
	dst := produce(t, n.dst, dstRecs)
	where := func(rs []rec, v string) []pos {
		var out []pos
		for _, r := range rs {
			if string(r.V) == v {
				out = append(out, pos{r.P, r.O})
			}
		}
		return out
	}
	rep := runVerifyCLI(t, n, 3)
	if rep.OK || rep.Missing != 1 || rep.Duplicated != 1 || rep.SourceRecords != 10 || rep.DestinationRecords != 10 {
		t.Fatalf("report %+v, want 1 missing and 1 duplicated of 10", rep)
	}
	if len(rep.MissingExamples) != 1 || len(rep.DuplicatedExamples) != 1 {
		t.Fatalf("report examples %+v, want one of each", rep)
	}
	m := rep.MissingExamples[0]
	if m.Value == nil || *m.Value != "v3" || m.Key == nil || *m.Key != "k3" || m.SourceCount != 1 || m.DestCount != 0 || len(m.Destination) != 0 ||
		!cmp.Equal(m.Source, where(src, "v3")) {
		t.Fatalf("missing example %+v, want v3 at source %v", m, where(src, "v3"))
	}
	d := rep.DuplicatedExamples[0]
	if d.Value == nil || *d.Value != "v6" || d.SourceCount != 1 || d.DestCount != 2 ||
		!cmp.Equal(d.Source, where(src, "v6")) || !cmp.Equal(d.Destination, where(dst, "v6")) {
		t.Fatalf("duplicated example %+v, want v6 at source %v and destination %v", d, where(src, "v6"), where(dst, "v6"))
	}
}

// TestVerifyExamplesEncodedOnce: the examples show keys and values as the
// records hold them, encoded once by the report's JSON: text as text, a
// null key and a tombstone as null, a value that is not UTF-8 as base64
// (saying so), and a long value cut at a character boundary (saying so).
func TestVerifyExamplesEncodedOnce(t *testing.T) {
	n := newCopyNames(t)
	for _, tp := range []string{n.src, n.dst} {
		broker.TestTopic(t, tp, 1, nil)
	}
	long := strings.Repeat("é", 40) // 80 bytes, two per character
	recs := []localkafka.Record{
		{Key: []byte(`k "quoted"`), Value: []byte(`{"a":1}`)},
		{Key: nil, Value: []byte("no key")},
		{Key: []byte("gone"), Value: nil},
		{Key: []byte("bin"), Value: []byte{0xff, 0x00, 'x'}},
		{Key: []byte("long"), Value: []byte(long)},
	}
	produce(t, n.src, recs) // the destination stays empty: all missing
	rep := runVerifyCLI(t, n, 3)
	if rep.Missing != int64(len(recs)) || len(rep.MissingExamples) != len(recs) {
		t.Fatalf("report %+v, want all %d records missing, one example each", rep, len(recs))
	}
	str := func(s string) *string { return &s }
	want := []verifyExample{
		{Key: str(`k "quoted"`), Value: str(`{"a":1}`)},
		{Key: nil, Value: str("no key")},
		{Key: str("gone"), Value: nil},
		{Key: str(base64.StdEncoding.EncodeToString([]byte("bin"))), Value: str(base64.StdEncoding.EncodeToString([]byte{0xff, 0x00, 'x'})), Encoding: "base64"},
		{Key: str("long"), Value: str(long[:64]), Truncated: true}, // 32 whole characters
	}
	for i := range want {
		want[i].Source, want[i].Destination, want[i].SourceCount = []pos{{0, int64(i)}}, []pos{}, 1
	}
	if diff := cmp.Diff(want, rep.MissingExamples); diff != "" {
		t.Fatalf("missing examples (-want +got):\n%s", diff)
	}
}
