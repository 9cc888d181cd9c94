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
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmaterialize/kmaterialize/copier"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/verify"
)

var broker *localkafka.Broker

func TestMain(m *testing.M) { os.Exit(localkafka.RunTests(m, &broker)) }

// ledger fills a source topic with n records over parts partitions (each
// record unique, with a header), ending partition 0 with a committed
// transaction so its last offset is a commit marker, plus an aborted
// transaction that must never be copied. It returns the committed records
// as "partition|key|value|header" strings.
func ledger(t *testing.T, topic string, parts int32, n int) []string {
	t.Helper()
	ctx := context.Background()
	if err := broker.CreateTopic(topic, parts, nil); err != nil {
		t.Fatal(err)
	}
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
	tx, err := broker.BeginTxn(ctx, topic, topic+"-committed")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Produce(ctx, []localkafka.Record{{Partition: 0, Key: []byte("last"), Value: []byte("committed")}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.End(ctx, true); err != nil {
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
	ends := map[int32]int64{}
	for _, pi := range broker.Cluster.PartitionInfos(topic) {
		ends[pi.Partition] = pi.HighWatermark
	}
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

func groupOffsets(t *testing.T, group, topic string) map[int32]int64 {
	t.Helper()
	all, err := broker.GroupOffsets(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return all[group][topic]
}

func highs(topic string) map[int32]int64 {
	out := map[int32]int64{}
	for _, pi := range broker.Cluster.PartitionInfos(topic) {
		out[pi.Partition] = pi.HighWatermark
	}
	return out
}

func cfg(t *testing.T, from, to string) copier.Config {
	return copier.Config{
		Brokers: broker.Addr, From: from, To: to, Group: to + "-group", TransactionalID: to + "-txn",
		BatchRecords: 50, BatchInterval: 200 * time.Millisecond, StallTimeout: 20 * time.Second,
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	}
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
	want := ledger(t, "ledger-a", 3, 400)
	if err := broker.CreateTopic("ledger-a-copy", 3, nil); err != nil {
		t.Fatal(err)
	}
	sum, err := copier.Run(context.Background(), cfg(t, "ledger-a", "ledger-a-copy"))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Records != int64(len(want)) || !sum.Committed || sum.Transactions < 2 {
		t.Fatalf("summary %+v, want %d records committed in several transactions", sum, len(want))
	}
	if diff := cmp.Diff(want, readCommitted(t, "ledger-a-copy")); diff != "" {
		t.Fatalf("destination (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(highs("ledger-a"), groupOffsets(t, "ledger-a-copy-group", "ledger-a")); diff != "" {
		t.Fatalf("group offsets vs source end offsets (-want +got):\n%s", diff)
	}
	verifyClean(t, "ledger-a", "ledger-a-copy")
	// A second run has nothing to do and copies nothing twice.
	sum, err = copier.Run(context.Background(), cfg(t, "ledger-a", "ledger-a-copy"))
	if err != nil || sum.Records != 0 {
		t.Fatalf("second run: %+v, %v", sum, err)
	}
	verifyClean(t, "ledger-a", "ledger-a-copy")
}

func TestAbortThenCopy(t *testing.T) {
	want := ledger(t, "ledger-b", 2, 200)
	if err := broker.CreateTopic("ledger-b-copy", 2, nil); err != nil {
		t.Fatal(err)
	}
	c := cfg(t, "ledger-b", "ledger-b-copy")
	c.Abort = true
	sum, err := copier.Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Records != int64(len(want)) || sum.Committed {
		t.Fatalf("abort summary %+v, want %d records not committed", sum, len(want))
	}
	if got := readCommitted(t, "ledger-b-copy"); len(got) != 0 {
		t.Fatalf("aborted records visible: %d", len(got))
	}
	if offs := groupOffsets(t, "ledger-b-copy-group", "ledger-b"); len(offs) != 0 {
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
	if diff := cmp.Diff(want, readCommitted(t, "ledger-b-copy")); diff != "" {
		t.Fatalf("destination (-want +got):\n%s", diff)
	}
	verifyClean(t, "ledger-b", "ledger-b-copy")
}

func TestDestinationTooSmall(t *testing.T) {
	ledger(t, "ledger-c", 3, 10)
	if err := broker.CreateTopic("ledger-c-copy", 2, nil); err != nil {
		t.Fatal(err)
	}
	_, err := copier.Run(context.Background(), cfg(t, "ledger-c", "ledger-c-copy"))
	if !errors.Is(err, copier.ErrBadDestination) {
		t.Fatalf("err = %v, want ErrBadDestination", err)
	}
}

func TestRepartition(t *testing.T) {
	want := ledger(t, "ledger-r", 3, 90)
	if err := broker.CreateTopic("ledger-r-copy", 2, nil); err != nil {
		t.Fatal(err)
	}
	c := cfg(t, "ledger-r", "ledger-r-copy")
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
	got := readCommitted(t, "ledger-r-copy")
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
	ledger(t, "ledger-f", 2, 300)
	if err := broker.CreateTopic("ledger-f-copy", 2, nil); err != nil {
		t.Fatal(err)
	}
	first := cfg(t, "ledger-f", "ledger-f-copy")
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
	for len(groupOffsets(t, "ledger-f-copy-group", "ledger-f")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("first copier never committed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	second := cfg(t, "ledger-f", "ledger-f-copy")
	if _, err := copier.Run(context.Background(), second); err != nil {
		t.Fatalf("second copier: %v", err)
	}
	wg.Wait()
	if !errors.Is(firstErr, copier.ErrFenced) {
		t.Fatalf("first copier ended with %v, want ErrFenced", firstErr)
	}
	verifyClean(t, "ledger-f", "ledger-f-copy")
}

func TestBrokerFaults(t *testing.T) {
	cases := []struct {
		name  string
		fault kfake.Fault
	}{
		{"retriable produce error", kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "ledger-x0-copy", Err: kerr.NotLeaderForPartition, Count: 3}},
		{"failed EndTxn", kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.CoordinatorNotAvailable, TopLevel: true, Count: 2}},
		{"coordinator not available on AddOffsetsToTxn", kfake.Fault{Keys: []kmsg.Key{kmsg.AddOffsetsToTxn}, Err: kerr.CoordinatorNotAvailable, TopLevel: true, Count: 2}},
		{"EndTxn timed out (outcome unknown)", kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.RequestTimedOut, TopLevel: true, Count: 1}},
		{"abortable produce error", kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "ledger-x4-copy", Err: kerr.InvalidRecord, Count: 1}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			from, to := fmt.Sprintf("ledger-x%d", i), fmt.Sprintf("ledger-x%d-copy", i)
			want := ledger(t, from, 2, 120)
			if err := broker.CreateTopic(to, 2, nil); err != nil {
				t.Fatal(err)
			}
			fc := tc.fault
			if fc.TxnID == "" && (fc.Keys[0] == kmsg.EndTxn || fc.Keys[0] == kmsg.AddOffsetsToTxn) {
				fc.TxnID = to + "-txn"
			}
			h := broker.Cluster.Fault(fc)
			defer h.Remove()
			sum, err := copier.Run(context.Background(), cfg(t, from, to))
			if h.Hits() == 0 {
				t.Fatal("the fault never hit: the test proves nothing")
			}
			if err != nil {
				// Allowed only if nothing partial was published.
				if got := readCommitted(t, to); len(got) != 0 && len(got) != len(want) {
					t.Fatalf("copy failed (%v) with a partial destination of %d records", err, len(got))
				}
				t.Logf("copy failed cleanly: %v", err)
				return
			}
			t.Logf("summary %+v", sum)
			if diff := cmp.Diff(want, readCommitted(t, to)); diff != "" {
				t.Fatalf("destination (-want +got):\n%s", diff)
			}
			verifyClean(t, from, to)
		})
	}
}

func TestVerifyCatchesMissingAndDuplicated(t *testing.T) {
	ctx := context.Background()
	src := []localkafka.Record{}
	for i := 0; i < 10; i++ {
		src = append(src, localkafka.Record{Partition: int32(i % 2), Key: []byte(fmt.Sprint("k", i)), Value: []byte(fmt.Sprint("v", i))})
	}
	for _, tpc := range []string{"verify-src", "verify-dst"} {
		if err := broker.CreateTopic(tpc, 2, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := broker.Produce(ctx, "verify-src", src); err != nil {
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
	if _, err := broker.Produce(ctx, "verify-dst", dst); err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Run(ctx, verify.Config{Brokers: broker.Addr, From: "verify-src", To: "verify-dst",
		StallTimeout: 10 * time.Second, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || rep.Missing != 1 || rep.Duplicated != 1 {
		t.Fatalf("report %+v, want 1 missing and 1 duplicated", rep)
	}
	if ex := rep.MissingExamples[0]; ex.Value != `"v3"` || len(ex.Source) != 1 || ex.Source[0].Partition != 1 || ex.Source[0].Offset != 1 {
		t.Fatalf("missing example %+v, want v3 at source 1@1", ex)
	}
	if ex := rep.DuplicatedExamples[0]; ex.Value != `"v6"` || ex.DestCount != 2 || ex.SourceCount != 1 {
		t.Fatalf("duplicated example %+v, want v6 twice", ex)
	}
}

// TestCommitTimeoutRetriedAsCommit delays the first EndTxn past the
// copier's call timeout: the commit's outcome is unknown, so it must be
// retried as a commit (no abort, no redo) and the copy stays exactly-once.
func TestCommitTimeoutRetriedAsCommit(t *testing.T) {
	want := ledger(t, "ledger-t", 2, 60)
	if err := broker.CreateTopic("ledger-t-copy", 2, nil); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	delayed := false
	broker.Cluster.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.EndTxnRequest)
		if r.TransactionalID != "ledger-t-copy-txn" || !r.Commit {
			broker.Cluster.KeepControl()
			return nil, nil, false
		}
		once.Do(func() {
			delayed = true
			broker.Cluster.SleepControl(func() { time.Sleep(1500 * time.Millisecond) })
		})
		return nil, nil, false
	})
	c := cfg(t, "ledger-t", "ledger-t-copy")
	c.CallTimeout = 300 * time.Millisecond
	c.BatchRecords = 1000 // one transaction
	sum, err := copier.Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if !delayed || sum.Retries == 0 || sum.Aborts != 0 {
		t.Fatalf("summary %+v (delayed %v): want a retried commit and no abort", sum, delayed)
	}
	if diff := cmp.Diff(want, readCommitted(t, "ledger-t-copy")); diff != "" {
		t.Fatalf("destination (-want +got):\n%s", diff)
	}
	verifyClean(t, "ledger-t", "ledger-t-copy")
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
	ledger(t, "ledger-h", 2, 100)
	if err := broker.CreateTopic("ledger-h-copy", 2, nil); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	held := make(chan struct{})
	var once sync.Once
	broker.Cluster.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.EndTxnRequest)
		if r.TransactionalID != "ledger-h-copy-txn" || !r.Commit {
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
	first := cfg(t, "ledger-h", "ledger-h-copy")
	first.Follow = true
	first.Log = zerolog.New(&logs)
	var firstErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, firstErr = copier.Run(context.Background(), first)
	}()
	<-held
	if _, err := copier.Run(context.Background(), cfg(t, "ledger-h", "ledger-h-copy")); err != nil {
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
	verifyClean(t, "ledger-h", "ledger-h-copy")
}

// TestAbortRewindsPartitionNewToTransaction is the reproduction of a lost
// record: a delivery failure on destination partition 0 makes the
// transaction abortable; the next record, on source partition 1 (new to the
// transaction), fails to produce; the abort must rewind partition 1 too, or
// its first record is skipped while the group commits past it.
func TestAbortRewindsPartitionNewToTransaction(t *testing.T) {
	from, to := uniq(t, "repro-src"), uniq(t, "repro-dst")
	for _, tpc := range []string{from, to} {
		if err := broker.CreateTopic(tpc, 2, nil); err != nil {
			t.Fatal(err)
		}
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
