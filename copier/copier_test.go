package copier_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmaterialize/kmaterialize/copier"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/verify"
)

var broker *localkafka.Broker

func TestMain(m *testing.M) {
	code := localkafka.RunTests(m, &broker)
	if fpDir != "" { // the failpoints binary (process_test.go)
		_ = os.RemoveAll(fpDir)
	}
	os.Exit(code)
}

// ledger fills a source topic with n records over parts partitions (each
// record unique, with a header), ending partition 0 with a committed
// transaction so its last offset is a commit marker, plus an aborted
// transaction that must never be copied. It returns the committed records
// as "partition|key|value|header" strings.
func ledger(t *testing.T, topic string, parts int32, n int) []string {
	t.Helper()
	ctx := context.Background()
	broker.TestTopic(t, topic, parts, nil)
	var recs []localkafka.Record
	var want []string
	for i := 0; i < n; i++ {
		p := int32(i) % parts
		k, v := fmt.Sprintf("acct-%d", i%17), fmt.Sprintf("entry-%d", i)
		recs = append(recs, localkafka.Record{Partition: p, Key: []byte(k), Value: []byte(v)})
		want = append(want, fmt.Sprintf("%d|%s|%s", p, k, v))
	}
	if _, err := broker.Produce(ctx, topic, recs); err != nil {
		t.Fatal(err)
	}
	ab, err := broker.BeginTxn(ctx, topic, topic+"-aborted")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ab.Produce(ctx, []localkafka.Record{{Partition: 1 % parts, Key: []byte("x"), Value: []byte("aborted")}}); err != nil {
		t.Fatal(err)
	}
	if err := ab.End(ctx, false); err != nil {
		t.Fatal(err)
	}
	// Checked and, if franz-go aborted it instead, redone (see
	// localkafka.ErrCommitAborted): a test must not expect a record the
	// source never committed.
	if _, err := broker.CommitTxn(ctx, topic, topic+"-committed", []localkafka.Record{{Partition: 0, Key: []byte("last"), Value: []byte("committed")}}); err != nil {
		t.Fatal(err)
	}
	want = append(want, "0|last|committed")
	sort.Strings(want)
	return want
}

// readCommitted reads a topic to its high watermarks with an independent
// read_committed client (franz-go), as "partition|key|value" strings.
func readCommitted(t *testing.T, topic string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs, err := broker.ReadCommitted(ctx, topic, highs(t, topic))
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

// groupOffsets returns group's committed offsets on topic (OffsetFetch of
// that group alone: on a real Kafka the groups of earlier runs stay).
func groupOffsets(t *testing.T, group, topic string) map[int32]int64 {
	t.Helper()
	adm, done := admin(t)
	defer done()
	offs, err := adm.FetchOffsets(context.Background(), group)
	if err == nil {
		err = offs.Error()
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil // kfake, before the group's first commit (Kafka: no offsets)
	}
	if err != nil {
		t.Fatalf("fetch offsets of group %s: %v", group, err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			out[o.Partition] = o.At
		}
	})
	if len(out) == 0 {
		return nil
	}
	return out
}

// admin is a kadm client of the test's broker.
func admin(t *testing.T) (*kadm.Client, func()) {
	t.Helper()
	cl, err := broker.Client()
	if err != nil {
		t.Fatal(err)
	}
	return kadm.NewClient(cl), cl.Close
}

// awaitGroupStable waits until group is Stable with n members, through
// DescribeGroups (kfake's WaitGroupStable on both brokers' protocol).
func awaitGroupStable(t *testing.T, group string, n int, timeout time.Duration) kadm.DescribedGroup {
	t.Helper()
	adm, done := admin(t)
	defer done()
	var last kadm.DescribedGroup
	awaitCond(t, timeout, fmt.Sprintf("group %s Stable with %d members", group, n), func() bool {
		gs, err := adm.DescribeGroups(context.Background(), group)
		if err != nil {
			return false
		}
		last = gs[group]
		return last.Err == nil && last.State == "Stable" && len(last.Members) == n
	})
	return last
}

// highs returns each partition's high watermark (ListOffsets, on both
// brokers).
func highs(t *testing.T, topic string) map[int32]int64 {
	t.Helper()
	marks, err := broker.Marks(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	for p, m := range marks {
		out[p] = m.High
	}
	return out
}

func cfg(t *testing.T, from, to string) copier.Config {
	c := copier.Config{
		Brokers: broker.Addr, From: from, To: to, Group: to + "-group", TransactionalID: to + "-txn",
		BatchRecords: 50, BatchInterval: 200 * time.Millisecond, StallTimeout: 20 * time.Second,
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	}
	// For hunting a flake: COPIER_TEST_DEBUG=consumer,fetch,msg logs the
	// copier at debug level with those librdkafka debug contexts (shown
	// for failed tests only, unless -v).
	if d := os.Getenv("COPIER_TEST_DEBUG"); d != "" {
		c.Log = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
		c.Props = map[string]string{"debug": d}
	}
	return c
}

func verifyClean(t *testing.T, from, to string) {
	t.Helper()
	rep, err := verify.Run(context.Background(), verify.Config{Brokers: broker.Addr, From: from, To: to,
		StallTimeout: 20 * time.Second, Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK {
		t.Fatalf("verify: %d missing %v, %d duplicated %v", rep.Missing, rep.MissingExamples, rep.Duplicated, rep.DuplicatedExamples)
	}
}

func TestCopyExactlyOnce(t *testing.T) {
	src := uniq(t, "ledger-a")
	dst := src + "-copy"
	want := ledger(t, src, 3, 400)
	broker.TestTopic(t, dst, 3, nil)
	sum, err := copier.Run(context.Background(), cfg(t, src, dst))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Records != int64(len(want)) || !sum.Committed || sum.Transactions < 2 {
		t.Fatalf("summary %+v, want %d records committed in several transactions", sum, len(want))
	}
	if diff := cmp.Diff(want, readCommitted(t, dst)); diff != "" {
		t.Fatalf("destination (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(highs(t, src), groupOffsets(t, dst+"-group", src)); diff != "" {
		t.Fatalf("group offsets vs source end offsets (-want +got):\n%s", diff)
	}
	verifyClean(t, src, dst)
	// A second run has nothing to do and copies nothing twice.
	sum, err = copier.Run(context.Background(), cfg(t, src, dst))
	if err != nil || sum.Records != 0 {
		t.Fatalf("second run: %+v, %v", sum, err)
	}
	verifyClean(t, src, dst)
}

func TestAbortThenCopy(t *testing.T) {
	src := uniq(t, "ledger-b")
	dst := src + "-copy"
	want := ledger(t, src, 2, 200)
	broker.TestTopic(t, dst, 2, nil)
	c := cfg(t, src, dst)
	c.Abort = true
	sum, err := copier.Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Records != int64(len(want)) || sum.Committed {
		t.Fatalf("abort summary %+v, want %d records not committed", sum, len(want))
	}
	if got := readCommitted(t, dst); len(got) != 0 {
		t.Fatalf("aborted records visible: %d", len(got))
	}
	// They are in the log, every one once: read_committed left them out.
	if n := len(readUncommitted(t, dst)); n != len(want) {
		t.Fatalf("the destination's log holds %d records after --abort, want the %d produced and aborted", n, len(want))
	}
	if offs := groupOffsets(t, dst+"-group", src); len(offs) != 0 {
		t.Fatalf("abort advanced the group: %v", offs)
	}
	c.Abort, c.MaxRecords = true, 30
	if sum, err := copier.Run(context.Background(), c); err != nil || sum.Records != 30 {
		t.Fatalf("abort --max-records 30: %+v, %v", sum, err)
	}
	c.Abort, c.MaxRecords = false, 0
	if _, err := copier.Run(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, readCommitted(t, dst)); diff != "" {
		t.Fatalf("destination (-want +got):\n%s", diff)
	}
	verifyClean(t, src, dst)
}

func TestDestinationTooSmall(t *testing.T) {
	src := uniq(t, "ledger-c")
	dst := src + "-copy"
	ledger(t, src, 3, 10)
	broker.TestTopic(t, dst, 2, nil)
	_, err := copier.Run(context.Background(), cfg(t, src, dst))
	if !errors.Is(err, copier.ErrBadDestination) {
		t.Fatalf("err = %v, want ErrBadDestination", err)
	}
}

func TestRepartition(t *testing.T) {
	src := uniq(t, "ledger-r")
	dst := src + "-copy"
	want := ledger(t, src, 3, 90)
	broker.TestTopic(t, dst, 2, nil)
	c := cfg(t, src, dst)
	c.Repartition = true
	if _, err := copier.Run(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	strip := func(rs []string) []string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = r[strings.Index(r, "|")+1:]
		}
		sort.Strings(out)
		return out
	}
	got := readCommitted(t, dst)
	if diff := cmp.Diff(strip(want), strip(got)); diff != "" {
		t.Fatalf("destination (-want +got):\n%s", diff)
	}
	// Per key ordering: every key lands in one destination partition.
	where := map[string]string{}
	for _, r := range got {
		parts := strings.SplitN(r, "|", 3)
		if p, ok := where[parts[1]]; ok && p != parts[0] {
			t.Fatalf("key %s in partitions %s and %s", parts[1], p, parts[0])
		}
		where[parts[1]] = parts[0]
	}
}

func TestFencing(t *testing.T) {
	src := uniq(t, "ledger-f")
	dst := src + "-copy"
	want := ledger(t, src, 2, 300)
	broker.TestTopic(t, dst, 2, nil)
	first := cfg(t, src, dst)
	first.Follow = true
	first.BatchRecords = 5
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var firstErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, firstErr = copier.Run(ctx, first)
	}()
	// Let the first copier commit something, then start the second.
	deadline := time.Now().Add(20 * time.Second)
	for len(groupOffsets(t, dst+"-group", src)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("first copier never committed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	second := cfg(t, src, dst)
	if _, err := copier.Run(context.Background(), second); err != nil {
		t.Fatalf("second copier: %v", err)
	}
	wg.Wait()
	if !errors.Is(firstErr, copier.ErrFenced) {
		t.Fatalf("first copier ended with %v, want ErrFenced", firstErr)
	}
	// Nothing of the fenced copier's open transaction is visible, and
	// nothing is doubled.
	if diff := cmp.Diff(want, readCommitted(t, dst)); diff != "" {
		t.Fatalf("destination (-source +destination):\n%s", diff)
	}
	verifyClean(t, src, dst)
}

// faultClass is what a broker fault must lead to.
type faultClass int

const (
	// retriable: the copy completes with exact output and no abort. A
	// retriable error that became an abort or a failure fails the test.
	retriableFault faultClass = iota
	// abortable: the copy completes with exact output after at least one
	// abort.
	abortableFault
	// fenced and unauthorized: the copy stops with that error and without
	// duplicates; a rerun without the fault completes exactly.
	fencedFault
	unauthorizedFault
)

// TestBrokerFaults injects each broker error a transactional copy can meet
// and asserts its class exactly (see faultClass), with the fault's hits
// counted so that no case passes without its fault.
func TestBrokerFaults(t *testing.T) {
	localkafka.KfakeOnly(t)
	txn := func(k kmsg.Key, e *kerr.Error, n int) kfake.Fault {
		return kfake.Fault{Keys: []kmsg.Key{k}, Err: e, TopLevel: true, Count: n}
	}
	cases := []struct {
		name  string
		fault kfake.Fault // Topic and TxnID are filled in per run
		class faultClass
	}{
		{"Produce NOT_LEADER_OR_FOLLOWER", kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotLeaderForPartition, Count: 3}, retriableFault},
		{"EndTxn COORDINATOR_NOT_AVAILABLE", txn(kmsg.EndTxn, kerr.CoordinatorNotAvailable, 2), retriableFault},
		{"AddOffsetsToTxn COORDINATOR_NOT_AVAILABLE", txn(kmsg.AddOffsetsToTxn, kerr.CoordinatorNotAvailable, 2), retriableFault},
		{"EndTxn NOT_COORDINATOR", txn(kmsg.EndTxn, kerr.NotCoordinator, 2), retriableFault},
		{"AddOffsetsToTxn NOT_COORDINATOR", txn(kmsg.AddOffsetsToTxn, kerr.NotCoordinator, 2), retriableFault},
		{"EndTxn CONCURRENT_TRANSACTIONS", txn(kmsg.EndTxn, kerr.ConcurrentTransactions, 2), retriableFault},
		{"AddOffsetsToTxn CONCURRENT_TRANSACTIONS", txn(kmsg.AddOffsetsToTxn, kerr.ConcurrentTransactions, 2), retriableFault},
		{"AddPartitionsToTxn CONCURRENT_TRANSACTIONS", txn(kmsg.AddPartitionsToTxn, kerr.ConcurrentTransactions, 2), retriableFault},
		{"Produce INVALID_RECORD", kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.InvalidRecord, Count: 1}, abortableFault},
		// librdkafka makes a transaction abortable when the coordinator
		// answers EndTxn with REQUEST_TIMED_OUT (the coordinator refuses an
		// abort of a commit it went on with, so this cannot lose or
		// double records). A commit that timed out in the client is a
		// different case: TestCommitTimeoutRetriedAsCommit.
		{"EndTxn REQUEST_TIMED_OUT", txn(kmsg.EndTxn, kerr.RequestTimedOut, 1), abortableFault},
		{"EndTxn PRODUCER_FENCED", txn(kmsg.EndTxn, kerr.ProducerFenced, 1), fencedFault},
		{"InitProducerID TRANSACTIONAL_ID_AUTHORIZATION_FAILED", txn(kmsg.InitProducerID, kerr.TransactionalIDAuthorizationFailed, 1), unauthorizedFault},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			from := uniq(t, "faults")
			to := from + "-copy"
			want := ledger(t, from, 2, 120)
			broker.TestTopic(t, to, 2, nil)
			c := cfg(t, from, to)
			fc := tc.fault
			if fc.Keys[0] == kmsg.Produce {
				fc.Topic = to
			} else {
				fc.TxnID = c.TransactionalID
			}
			h := broker.Cluster.Fault(fc)
			defer h.Remove()
			sum, err := copier.Run(context.Background(), c)
			if hits := h.Hits(); hits != fc.Count {
				t.Fatalf("the fault hit %d times, want %d: the test proves nothing", hits, fc.Count)
			}
			t.Logf("summary %+v, err %v", sum, err)
			switch tc.class {
			case retriableFault, abortableFault:
				if err != nil {
					t.Fatalf("copy failed: %v", err)
				}
				if tc.class == retriableFault && sum.Aborts != 0 {
					t.Fatalf("a retriable error caused %d aborts", sum.Aborts)
				}
				if tc.class == abortableFault && sum.Aborts < 1 {
					t.Fatalf("an abortable error caused no abort (summary %+v)", sum)
				}
			case fencedFault, unauthorizedFault:
				wantErr := copier.ErrFenced
				if tc.class == unauthorizedFault {
					wantErr = copier.ErrUnauthorized
				}
				if !errors.Is(err, wantErr) {
					t.Fatalf("err = %v, want %v", err, wantErr)
				}
				// A fenced producer leaves its transaction open (its
				// successor aborts it at init), so read_committed readers
				// wait for the rerun below; the exact comparison after it
				// proves that nothing of the failed run was doubled.
				h.Remove()
				rerun, err := copier.Run(context.Background(), c)
				if err != nil {
					t.Fatalf("rerun without the fault: %v", err)
				}
				t.Logf("rerun summary %+v", rerun)
			}
			if diff := cmp.Diff(want, readCommitted(t, to)); diff != "" {
				t.Fatalf("destination (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(highs(t, from), groupOffsets(t, c.Group, from)); diff != "" {
				t.Fatalf("group offsets vs source end offsets (-want +got):\n%s", diff)
			}
		})
	}
}

// TestProduceTimedOutButApplied holds the first Produce to the destination
// past the producer's socket timeout, so the client gives up on it while the
// broker applies it afterwards; the idempotent producer's retry carries the
// same sequence numbers, so the broker deduplicates it: exact output, no
// abort.
func TestProduceTimedOutButApplied(t *testing.T) {
	localkafka.KfakeOnly(t)
	from := uniq(t, "applied")
	to := from + "-copy"
	want := ledger(t, from, 2, 60)
	broker.TestTopic(t, to, 2, nil)
	var (
		mu              sync.Mutex
		held, retried   bool
		retry           = make(chan struct{})
		releasedByRetry bool
	)
	broker.Cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.ProduceRequest)
		if len(r.Topics) == 0 || r.Topics[0].Topic != to {
			broker.Cluster.KeepControl()
			return nil, nil, false
		}
		mu.Lock()
		first := !held
		held = true
		if !first && !retried {
			retried = true
			close(retry)
		}
		mu.Unlock()
		if !first {
			broker.Cluster.DropControl()
			return nil, nil, false
		}
		broker.Cluster.KeepControl()
		// Apply it only after the client timed it out and sent its retry
		// (bounded, so that a client that never retries fails the test
		// instead of hanging it).
		broker.Cluster.SleepControl(func() {
			select {
			case <-retry:
				mu.Lock()
				releasedByRetry = true
				mu.Unlock()
			case <-time.After(15 * time.Second):
			}
		})
		return nil, nil, false // the broker applies the held request now
	})
	c := cfg(t, from, to)
	c.Props = map[string]string{"socket.timeout.ms": "1500"}
	c.BatchRecords = 1000 // one transaction
	sum, err := copier.Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	ok := releasedByRetry
	mu.Unlock()
	if !ok {
		t.Fatal("the held Produce was not retried by the client: the test proves nothing")
	}
	if sum.Aborts != 0 {
		t.Fatalf("summary %+v: a timed-out produce caused an abort", sum)
	}
	if diff := cmp.Diff(want, readCommitted(t, to)); diff != "" {
		t.Fatalf("destination (-want +got):\n%s", diff)
	}
	verifyClean(t, from, to)
}

func TestVerifyCatchesMissingAndDuplicated(t *testing.T) {
	ctx := context.Background()
	vsrc, vdst := uniq(t, "verify-src"), uniq(t, "verify-dst")
	src := []localkafka.Record{}
	for i := 0; i < 10; i++ {
		src = append(src, localkafka.Record{Partition: int32(i % 2), Key: []byte(fmt.Sprint("k", i)), Value: []byte(fmt.Sprint("v", i))})
	}
	for _, tpc := range []string{vsrc, vdst} {
		broker.TestTopic(t, tpc, 2, nil)
	}
	if _, err := broker.Produce(ctx, vsrc, src); err != nil {
		t.Fatal(err)
	}
	// Destination: record 3 missing, record 6 twice.
	var dst []localkafka.Record
	for i, r := range src {
		if i != 3 {
			dst = append(dst, r)
		}
		if i == 6 {
			dst = append(dst, r)
		}
	}
	if _, err := broker.Produce(ctx, vdst, dst); err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Run(ctx, verify.Config{Brokers: broker.Addr, From: vsrc, To: vdst,
		StallTimeout: 10 * time.Second, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || rep.Missing != 1 || rep.Duplicated != 1 {
		t.Fatalf("report %+v, want 1 missing and 1 duplicated", rep)
	}
	if ex := rep.MissingExamples[0]; ex.Value == nil || *ex.Value != "v3" || len(ex.Source) != 1 || ex.Source[0].Partition != 1 || ex.Source[0].Offset != 1 {
		t.Fatalf("missing example %+v, want v3 at source 1@1", ex)
	}
	if ex := rep.DuplicatedExamples[0]; ex.Value == nil || *ex.Value != "v6" || ex.DestCount != 2 || ex.SourceCount != 1 {
		t.Fatalf("duplicated example %+v, want v6 twice", ex)
	}
}

// TestCommitTimeoutRetriedAsCommit delays the first EndTxn past the
// copier's call timeout: the commit's outcome is unknown, so it must be
// retried as a commit (no abort, no redo) and the copy stays exactly-once.
func TestCommitTimeoutRetriedAsCommit(t *testing.T) {
	localkafka.KfakeOnly(t)
	src := uniq(t, "ledger-t")
	dst := src + "-copy"
	want := ledger(t, src, 2, 60)
	broker.TestTopic(t, dst, 2, nil)
	var once sync.Once
	var delayed atomic.Bool // set by the broker's control goroutine
	broker.Cluster.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.EndTxnRequest)
		if r.TransactionalID != dst+"-txn" || !r.Commit {
			broker.Cluster.KeepControl()
			return nil, nil, false
		}
		once.Do(func() {
			delayed.Store(true)
			broker.Cluster.SleepControl(func() { time.Sleep(1500 * time.Millisecond) })
		})
		return nil, nil, false
	})
	c := cfg(t, src, dst)
	c.CallTimeout = 300 * time.Millisecond
	c.BatchRecords = 1000 // one transaction
	sum, err := copier.Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if !delayed.Load() || sum.Retries == 0 || sum.Aborts != 0 {
		t.Fatalf("summary %+v (delayed %v): want a retried commit and no abort", sum, delayed.Load())
	}
	if diff := cmp.Diff(want, readCommitted(t, dst)); diff != "" {
		t.Fatalf("destination (-want +got):\n%s", diff)
	}
	verifyClean(t, src, dst)
}

// syncBuffer is a log sink the test can search while the copier writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Contains(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Contains(s.b.String(), sub)
}

// TestFencedWhileCommitting holds the first copier's commit until a second
// copier with the same transactional id has finished and the first one's
// static group member has been fenced too; released, the first copier must
// stop with ErrFenced (not hang in the consumer's Close) and the destination
// stays exactly-once.
func TestFencedWhileCommitting(t *testing.T) {
	localkafka.KfakeOnly(t)
	src := uniq(t, "ledger-h")
	dst := src + "-copy"
	ledger(t, src, 2, 100)
	broker.TestTopic(t, dst, 2, nil)
	release := make(chan struct{})
	held := make(chan struct{})
	var once sync.Once
	broker.Cluster.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.EndTxnRequest)
		if r.TransactionalID != dst+"-txn" || !r.Commit {
			broker.Cluster.KeepControl()
			return nil, nil, false
		}
		hold := false
		once.Do(func() { hold = true })
		if !hold {
			broker.Cluster.KeepControl()
			return nil, nil, false
		}
		close(held)
		broker.Cluster.SleepControl(func() { <-release })
		return nil, nil, false
	})
	var logs syncBuffer
	first := cfg(t, src, dst)
	first.Follow = true
	first.Log = zerolog.New(&logs)
	var firstErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, firstErr = copier.Run(context.Background(), first)
	}()
	<-held
	if _, err := copier.Run(context.Background(), cfg(t, src, dst)); err != nil {
		t.Fatalf("second copier: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !logs.Contains("fenced") {
		if time.Now().After(deadline) {
			t.Fatal("the first copier's consumer was never fenced")
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(release)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the fenced copier hangs")
	}
	if !errors.Is(firstErr, copier.ErrFenced) {
		t.Fatalf("first copier ended with %v, want ErrFenced", firstErr)
	}
	verifyClean(t, src, dst)
}

// TestAbortRewindsPartitionNewToTransaction is the reproduction of a lost
// record: a delivery failure on destination partition 0 makes the
// transaction abortable; the next record, on source partition 1 (new to the
// transaction), fails to produce; the abort must rewind partition 1 too, or
// its first record is skipped while the group commits past it.
func TestAbortRewindsPartitionNewToTransaction(t *testing.T) {
	localkafka.KfakeOnly(t)
	from, to := uniq(t, "repro-src"), uniq(t, "repro-dst")
	for _, tpc := range []string{from, to} {
		broker.TestTopic(t, tpc, 2, nil)
	}
	ctx := context.Background()
	if _, err := broker.Produce(ctx, from, []localkafka.Record{{Partition: 0, Key: []byte("p0"), Value: []byte("p0-0")}}); err != nil {
		t.Fatal(err)
	}
	h := broker.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: to, Partitions: []int32{0}, Err: kerr.InvalidRecord, Count: 1})
	defer h.Remove()
	c := cfg(t, from, to)
	c.Follow = true
	c.BatchInterval = 2 * time.Second // keep the failed transaction open for the next record
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		sum copier.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := copier.Run(runCtx, c)
		done <- result{sum, err}
	}()
	awaitCond(t, 20*time.Second, "the INVALID_RECORD fault to hit", func() bool { return h.Hits() == 1 })
	if _, err := broker.Produce(ctx, from, []localkafka.Record{
		{Partition: 1, Key: []byte("p1"), Value: []byte("p1-0")},
		{Partition: 1, Key: []byte("p1"), Value: []byte("p1-1")},
	}); err != nil {
		t.Fatal(err)
	}
	wantOffsets := map[int32]int64{0: 1, 1: 2}
	awaitCond(t, 30*time.Second, "the group to commit the source's end", func() bool {
		return cmp.Equal(wantOffsets, groupOffsets(t, c.Group, from))
	})
	cancel()
	res := <-done
	if res.err != nil {
		t.Fatalf("copy: %v", res.err)
	}
	if res.sum.Aborts < 1 {
		t.Fatalf("summary %+v: want at least one abort", res.sum)
	}
	want := []string{"0|p0|p0-0", "1|p1|p1-0", "1|p1|p1-1"}
	if diff := cmp.Diff(want, readCommitted(t, to)); diff != "" {
		t.Fatalf("destination (-want +got):\n%s", diff)
	}
}

var uniqSeq atomic.Int64

// uniq names a topic (or group, or transactional id) for one run of one
// test, so that -count=N runs never see each other's data.
func uniq(t *testing.T, base string) string {
	name := strings.NewReplacer("/", "-", " ", "-", "_", "-").Replace(t.Name())
	return fmt.Sprintf("%s-%s-%d-%d", base, strings.ToLower(name), os.Getpid(), uniqSeq.Add(1))
}

// awaitCond polls cond until it holds, failing the test after timeout.
func awaitCond(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRebalanceBetweenCopiers runs two copiers with different transactional
// ids in one group: the second one's join moves partitions away from the
// first (whose open transaction is aborted at the revocation), and each
// source record must still appear exactly once.
func TestRebalanceBetweenCopiers(t *testing.T) {
	from := uniq(t, "rebalance")
	to := from + "-copy"
	const parts = 4
	want := ledger(t, from, parts, 200)
	broker.TestTopic(t, to, parts, nil)
	a := cfg(t, from, to)
	a.Follow, a.BatchRecords, a.BatchInterval = true, 5, 50*time.Millisecond
	b := a
	b.TransactionalID = to + "-txn-b"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		sum copier.Summary
		err error
	}
	start := func(c copier.Config) chan result {
		ch := make(chan result, 1)
		go func() {
			sum, err := copier.Run(ctx, c)
			ch <- result{sum, err}
		}()
		return ch
	}
	doneA := start(a)
	awaitCond(t, 20*time.Second, "the first copier's first commit", func() bool {
		return len(groupOffsets(t, a.Group, from)) > 0
	})
	doneB := start(b)
	awaitGroupStable(t, a.Group, 2, 60*time.Second)
	// Records produced after the rebalance land on every partition, so
	// both copiers have some to copy.
	var more []localkafka.Record
	for i := 0; i < 40; i++ {
		p := int32(i % parts)
		k, v := fmt.Sprintf("later-%d", i%5), fmt.Sprintf("after-rebalance-%d", i)
		more = append(more, localkafka.Record{Partition: p, Key: []byte(k), Value: []byte(v)})
		want = append(want, fmt.Sprintf("%d|%s|%s", p, k, v))
	}
	sort.Strings(want)
	if _, err := broker.Produce(ctx, from, more); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 60*time.Second, "the group to commit the source's end", func() bool {
		return cmp.Equal(highs(t, from), groupOffsets(t, a.Group, from))
	})
	cancel()
	ra, rb := <-doneA, <-doneB
	if ra.err != nil || rb.err != nil {
		t.Fatalf("copier a: %v; copier b: %v", ra.err, rb.err)
	}
	t.Logf("a %+v\nb %+v", ra.sum, rb.sum)
	if ra.sum.Records == 0 || rb.sum.Records == 0 {
		t.Fatalf("one copier copied nothing (a %d, b %d): no rebalance was exercised", ra.sum.Records, rb.sum.Records)
	}
	// The destination first: if a record is missing, say which.
	if diff := cmp.Diff(want, readCommitted(t, to)); diff != "" {
		t.Errorf("destination (-want +got):\n%s", diff)
	}
	if got := ra.sum.Records + rb.sum.Records; got != int64(len(want)) {
		t.Fatalf("the copiers committed %d records together, want %d", got, len(want))
	}
	verifyClean(t, from, to)
}

// TestRetentionGapIsLogged deletes records between the group's committed
// offset and the next copy (as retention would): the copy continues from the
// log start offset, as auto.offset.reset=earliest says, and logs and counts
// the records it could not copy instead of skipping them silently.
func TestRetentionGapIsLogged(t *testing.T) {
	from := uniq(t, "retention")
	to := from + "-copy"
	for _, tpc := range []string{from, to} {
		broker.TestTopic(t, tpc, 1, nil)
	}
	ctx := context.Background()
	batch := func(lo, hi int) []localkafka.Record {
		var rs []localkafka.Record
		for i := lo; i < hi; i++ {
			rs = append(rs, localkafka.Record{Key: []byte("k"), Value: []byte(fmt.Sprint("v", i))})
		}
		return rs
	}
	if _, err := broker.Produce(ctx, from, batch(0, 10)); err != nil {
		t.Fatal(err)
	}
	c := cfg(t, from, to)
	if _, err := copier.Run(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := broker.Produce(ctx, from, batch(10, 20)); err != nil {
		t.Fatal(err)
	}
	if err := broker.DeleteRecords(ctx, from, 0, 15); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	c.Log = zerolog.New(&logs)
	sum, err := copier.Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if sum.SkippedByRetention != 5 || !logs.Contains("records 10..14 of "+from+"/0 were deleted by retention") {
		t.Fatalf("summary %+v; logs:\n%s", sum, logs.b.String())
	}
	var want []string
	for _, i := range append([]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 15, 16, 17, 18, 19) {
		want = append(want, fmt.Sprintf("0|k|v%d", i))
	}
	sort.Strings(want)
	if diff := cmp.Diff(want, readCommitted(t, to)); diff != "" {
		t.Fatalf("destination (-want +got):\n%s", diff)
	}
}

// TestAbortNotCutShortByCallTimeout holds the abort that follows an
// abortable error for longer than the call timeout: the abort must wait
// (librdkafka's remaining transaction timeout bounds it), not give up and
// retry.
func TestAbortNotCutShortByCallTimeout(t *testing.T) {
	localkafka.KfakeOnly(t)
	from := uniq(t, "slowabort")
	to := from + "-copy"
	want := ledger(t, from, 2, 40)
	broker.TestTopic(t, to, 2, nil)
	c := cfg(t, from, to)
	c.CallTimeout = 200 * time.Millisecond
	h := broker.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: to, Err: kerr.InvalidRecord, Count: 1})
	defer h.Remove()
	var held atomic.Bool
	broker.Cluster.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.EndTxnRequest)
		if r.TransactionalID != c.TransactionalID || r.Commit {
			broker.Cluster.KeepControl()
			return nil, nil, false
		}
		held.Store(true)
		broker.Cluster.DropControl()
		// The delay is the fault: an abort slower than 5 call timeouts.
		broker.Cluster.SleepControl(func() { time.Sleep(5 * c.CallTimeout) })
		return nil, nil, false
	})
	sum, err := copier.Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if h.Hits() != 1 || !held.Load() {
		t.Fatalf("fault hits %d, abort held %v: the test proves nothing", h.Hits(), held.Load())
	}
	if sum.Aborts != 1 || sum.Retries != 0 {
		t.Fatalf("summary %+v: want 1 abort and no retried call", sum)
	}
	if diff := cmp.Diff(want, readCommitted(t, to)); diff != "" {
		t.Fatalf("destination (-want +got):\n%s", diff)
	}
}

// TestEOFPastUndeliveredRecordIsReread is the regression test of the record
// lost under load (issue 7): the source partition ends with a record in
// another producer's committed transaction, then its commit marker, and the
// consumer reaches a partition EOF past that record without having been
// given it. The broker is made to answer the consumer's fetch at the
// record's offset, once, from the marker on (the fetch offset is moved
// past the record), which is exactly what the copier would see if anything
// between the log and the consumer dropped the record: its position jumps
// to the end and an EOF follows. The copier must not commit past the record
// on the word of that EOF: it re-reads from its last record, copies the
// record, and only then commits the end.
func TestEOFPastUndeliveredRecordIsReread(t *testing.T) {
	localkafka.KfakeOnly(t)
	ctx := context.Background()
	from := uniq(t, "eofgap")
	to := from + "-copy"
	for _, tpc := range []string{from, to} {
		broker.TestTopic(t, tpc, 1, nil)
	}
	// Offset 0: a plain record; then "last" in a committed transaction
	// (offset 1, or later if franz-go aborted a first attempt and
	// CommitTxn redid it), then its commit marker. Separate produces, so
	// that each is its own batch.
	if _, err := broker.Produce(ctx, from, []localkafka.Record{{Key: []byte("first"), Value: []byte("plain")}}); err != nil {
		t.Fatal(err)
	}
	offs, err := broker.CommitTxn(ctx, from, from+"-committed", []localkafka.Record{{Key: []byte("last"), Value: []byte("committed")}})
	if err != nil {
		t.Fatal(err)
	}
	last := offs[0]
	if h := highs(t, from); h[0] != last+2 {
		t.Fatalf("source high watermark %d, want %d (the commit marker after the record at %d)", h[0], last+2, last)
	}

	var topicID [16]byte
	if ti := broker.Cluster.TopicInfo(from); ti != nil {
		topicID = ti.TopicID
	}
	var mu sync.Mutex
	skipped := 0 // fetches at the record's offset answered from the marker on
	ended := false
	t.Cleanup(func() { mu.Lock(); ended = true; mu.Unlock() })
	broker.Cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		mu.Lock()
		defer mu.Unlock()
		if ended {
			return nil, nil, false // not kept: the broker drops this control
		}
		broker.Cluster.KeepControl()
		f := req.(*kmsg.FetchRequest)
		for i := range f.Topics {
			ft := &f.Topics[i]
			if ft.Topic != from && (ft.TopicID == [16]byte{} || ft.TopicID != topicID) {
				continue
			}
			for j := range ft.Partitions {
				fp := &ft.Partitions[j]
				switch {
				case fp.FetchOffset < last:
					// One batch per answer, so that the consumer asks
					// for the record's offset on its own.
					fp.PartitionMaxBytes = 1
				case fp.FetchOffset == last && skipped == 0:
					fp.FetchOffset = last + 1 // the fault: "last" is not delivered
					skipped++
				}
			}
		}
		return nil, nil, false // the broker answers the (changed) request
	})

	c := cfg(t, from, to)
	sum, err := copier.Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("summary %+v", sum)
	mu.Lock()
	n := skipped
	mu.Unlock()
	if n != 1 {
		t.Fatalf("the fetch at offset %d was moved past the record %d times, want 1: the test proves nothing", last, n)
	}
	want := []string{"0|first|plain", "0|last|committed"}
	if diff := cmp.Diff(want, readCommitted(t, to)); diff != "" {
		t.Fatalf("destination (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(highs(t, from), groupOffsets(t, c.Group, from)); diff != "" {
		t.Fatalf("group offsets vs source end offsets (-want +got):\n%s", diff)
	}
	if sum.Records != 2 || sum.EOFRereads != 1 {
		t.Fatalf("summary %+v: want 2 records, 1 of them recovered by an EOF re-read", sum)
	}
}
