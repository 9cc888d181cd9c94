package replay

// The replay under broker faults. Each test proves its fault fired (a
// Fault's Hits, a parked fetch seen in the middle of a partition, a request
// dropped) and compares what the replay delivered with the records as they
// were produced.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

var topicSeq atomic.Int64

// uniqueTopic creates a topic on b named after the test, unique per run so
// that -count=N repeats, and deletes it when the test ends.
func uniqueTopic(t *testing.T, b *localkafka.Broker, partitions int32) string {
	t.Helper()
	topic := fmt.Sprintf("%s-%d-%s", strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()), topicSeq.Add(1), randomHex(3))
	b.TestTopic(t, topic, partitions, nil)
	return topic
}

// produceEach writes n records round-robin over partitions, one record per
// produce request, so that each record is its own batch and small fetches
// read the topic a batch at a time. It returns the records as produced.
func produceEach(t *testing.T, b *localkafka.Broker, topic string, partitions int32, n int) []rec {
	t.Helper()
	return produceEachAt(t, b, topic, partitions, n, time.Time{})
}

// produceEachAt is produceEach with record i stamped base + i ms (now when
// base is zero).
func produceEachAt(t *testing.T, b *localkafka.Broker, topic string, partitions int32, n int, base time.Time) []rec {
	t.Helper()
	recs := make([]localkafka.Record, n)
	for i := range recs {
		recs[i] = localkafka.Record{Partition: int32(i) % partitions,
			Key: []byte(fmt.Sprintf("k%d", i%17)), Value: []byte(fmt.Sprintf("v%d-%s", i, strings.Repeat("x", 50)))}
		if !base.IsZero() {
			recs[i].Timestamp = base.Add(time.Duration(i) * time.Millisecond)
		}
	}
	offs, err := b.ProduceEach(context.Background(), topic, recs)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]rec, n)
	for i, r := range recs {
		out[i] = rec{P: r.Partition, O: offs[i], K: string(r.Key), V: string(r.Value)}
	}
	return out
}

// faultCfg is cfg against b with fetches kept to about one batch each, so
// that a read of a few hundred records takes many fetches and a fault can
// land in its middle.
func faultCfg(t *testing.T, b *localkafka.Broker, topic string, stall time.Duration) Config {
	c := cfg(t, topic)
	c.Brokers = b.Addr
	c.StallTimeout = stall
	c.BatchRecords = 10
	c.Props = map[string]string{}
	for k, v := range localkafka.SmallFetches {
		c.Props[k] = v
	}
	return c
}

// parkFetch parks b's first fetch of topic above offset from (see
// localkafka.ParkFetch), released at the latest when the test ends.
func parkFetch(t *testing.T, b *localkafka.Broker, topic string, from int64) *localkafka.ParkedFetch {
	p := b.ParkFetch(topic, from)
	t.Cleanup(p.Release)
	return p
}

// waitParked waits for the parked fetch, or fails the test.
func waitParked(t *testing.T, p *localkafka.ParkedFetch, errc <-chan error) {
	t.Helper()
	select {
	case <-p.Seen:
	case err := <-errc:
		t.Fatalf("the replay ended (%v) before the fetch was parked", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no fetch in the middle of the read was seen")
	}
}

// runAsync runs collect in a goroutine; the channel yields its outcome.
type outcome struct {
	got []rec
	res Result
	err error
}

func runAsync(t *testing.T, c Config) (<-chan outcome, <-chan error) {
	out := make(chan outcome, 1)
	errc := make(chan error, 1) // a copy of the error, for waitParked
	finished := make(chan struct{})
	// The replay logs through t: it must end before the test does, even
	// when the test fails early.
	t.Cleanup(func() { <-finished })
	go func() {
		defer close(finished)
		var got []rec
		res, err := Run(context.Background(), c, func(b []fold.Record) error {
			for _, r := range b {
				got = append(got, toRec(r))
			}
			return nil
		})
		errc <- err
		out <- outcome{got: got, res: res, err: err}
	}()
	return out, errc
}

func await(t *testing.T, out <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-out:
		checkOrder(t, o.got)
		o.got = sortRecs(o.got)
		return o
	case <-time.After(60 * time.Second):
		t.Fatal("the replay did not return")
		return outcome{}
	}
}

// TestFaultRetriableFetch: NOT_LEADER_OR_FOLLOWER and UNKNOWN_LEADER_EPOCH
// on Fetch are retried by the client: every record exactly once.
func TestFaultRetriableFetch(t *testing.T) {
	localkafka.KfakeOnly(t)
	topic := uniqueTopic(t, broker, 2)
	want := produceEach(t, broker, topic, 2, 60)
	h := broker.Cluster.Fault(
		kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Partitions: []int32{0}, Err: kerr.NotLeaderForPartition, Count: 2},
		kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Partitions: []int32{1}, Err: kerr.UnknownLeaderEpoch, Count: 2},
	)
	defer h.Remove()
	got, _, err := collect(t, faultCfg(t, broker, topic, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if n := h.Hits(); n != 4 {
		t.Fatalf("fetch faults fired %d times, want 4", n)
	}
	if diff := cmp.Diff(sortRecs(want), got); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
}

// listOffsetsFault faults one ListOffsets query kind of partition 1 of
// topic once: earliest (-2), latest read_uncommitted (-1, 0), latest
// read_committed (-1, 1) or by timestamp (>= 0, ts).
func listOffsetsFault(topic string, ts int64, iso int8, code *kerr.Error) kfake.Fault {
	return kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: topic, Partitions: []int32{1}, Err: code, Count: 1,
		When: func(req kmsg.Request) bool {
			lo := req.(*kmsg.ListOffsetsRequest)
			if lo.IsolationLevel != iso {
				return false
			}
			for _, t := range lo.Topics {
				for _, p := range t.Partitions {
					if p.Timestamp == ts || (ts >= 0 && p.Timestamp >= 0) {
						return true
					}
				}
			}
			return false
		}}
}

// TestFaultRetriableListOffsets: one transient error on each start-time
// ListOffsets (low, high, LSO, offsets for a timestamp), and an
// UNKNOWN_TOPIC_OR_PARTITION for a topic metadata still lists, are retried:
// the replay reads exactly the records at or after the timestamp.
func TestFaultRetriableListOffsets(t *testing.T) {
	localkafka.KfakeOnly(t)
	topic := uniqueTopic(t, broker, 2)
	now := time.Now()
	produceEachAt(t, broker, topic, 2, 20, now.Add(-time.Hour))
	later := produceEachAt(t, broker, topic, 2, 10, now.Add(-30*time.Minute))
	T := now.Add(-45 * time.Minute)
	faults := []kfake.Fault{
		listOffsetsFault(topic, -2, 0, kerr.NotLeaderForPartition),
		listOffsetsFault(topic, -1, 0, kerr.LeaderNotAvailable),
		listOffsetsFault(topic, -1, 1, kerr.NotLeaderForPartition),
		listOffsetsFault(topic, 0, 0, kerr.UnknownLeaderEpoch),
		// A broker that has not yet learned of the partition: retried
		// because metadata still lists the topic.
		listOffsetsFault(topic, -2, 0, kerr.UnknownTopicOrPartition),
	}
	var hs []*kfake.FaultHandle
	for _, f := range faults {
		hs = append(hs, broker.Cluster.Fault(f))
	}
	defer func() {
		for _, h := range hs {
			h.Remove()
		}
	}()
	c := faultCfg(t, broker, topic, 10*time.Second)
	c.Start.Timestamp = T
	got, _, err := collect(t, c)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range hs {
		if n := h.Hits(); n != 1 {
			t.Fatalf("ListOffsets fault %d fired %d times, want 1", i, n)
		}
	}
	if diff := cmp.Diff(sortRecs(later), got); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
}

// TestFaultMetadataLeaderNotAvailable: one LEADER_NOT_AVAILABLE on the
// topic's metadata is retried; a persistent one is ErrUnavailable after the
// stall timeout, with a message that says what failed and for how long.
func TestFaultMetadataLeaderNotAvailable(t *testing.T) {
	localkafka.KfakeOnly(t)
	topic := uniqueTopic(t, broker, 2)
	want := produceEach(t, broker, topic, 2, 10)
	h := broker.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: topic, Err: kerr.LeaderNotAvailable, Count: 1})
	defer h.Remove()
	got, _, err := collect(t, faultCfg(t, broker, topic, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if n := h.Hits(); n != 1 {
		t.Fatalf("metadata fault fired %d times, want 1", n)
	}
	if diff := cmp.Diff(sortRecs(want), got); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}

	persistent := broker.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: topic, Err: kerr.LeaderNotAvailable, Count: -1})
	defer persistent.Remove()
	_, _, err = collect(t, faultCfg(t, broker, topic, 1500*time.Millisecond))
	persistent.Remove()
	if persistent.Hits() < 2 {
		t.Fatalf("persistent metadata fault fired %d times, want retries", persistent.Hits())
	}
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	t.Logf("persistent LEADER_NOT_AVAILABLE: %v", err)
	for _, s := range []string{"Kafka unavailable", "failed for", "attempts", broker.Addr, "Leader not available"} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("message %q lacks %q", err, s)
		}
	}
}

// TestDroppedConnectionMidRead: the broker closes the connection of a fetch
// in the middle of a partition; the client reconnects and the replay
// delivers every record exactly once.
func TestDroppedConnectionMidRead(t *testing.T) {
	localkafka.KfakeOnly(t)
	topic := uniqueTopic(t, broker, 2)
	want := produceEach(t, broker, topic, 2, 100)
	var dropped atomic.Int64
	broker.Cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if !broker.MidFetch(topic, req, 10) {
			return nil, nil, false
		}
		dropped.Add(1)
		return nil, errors.New("test: drop the connection"), true
	})
	got, _, err := collect(t, faultCfg(t, broker, topic, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if n := dropped.Load(); n != 1 {
		t.Fatalf("dropped %d fetch connections, want 1", n)
	}
	if diff := cmp.Diff(sortRecs(want), got); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
}

// ownBroker starts a broker of the test's own, which it can stop.
func ownBroker(t *testing.T, opts ...kfake.Opt) *localkafka.Broker {
	t.Helper()
	b, err := localkafka.Start(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// TestBrokerStoppedMidRead: the only broker stops while the replay is in
// the middle of a partition: ErrUnavailable naming the broker, never an
// open-transaction stall with an LSO of -1001.
func TestBrokerStoppedMidRead(t *testing.T) {
	localkafka.KfakeOnly(t)
	b := ownBroker(t)
	topic := uniqueTopic(t, b, 2)
	produceEach(t, b, topic, 2, 60)
	p := parkFetch(t, b, topic, 5)
	out, errc := runAsync(t, faultCfg(t, b, topic, 1500*time.Millisecond))
	waitParked(t, p, errc)
	b.Close()
	p.Release()
	o := await(t, out)
	if !errors.Is(o.err, ErrUnavailable) || errors.Is(o.err, ErrOpenTransaction) {
		t.Fatalf("err = %v, want ErrUnavailable and no open transaction", o.err)
	}
	msg := o.err.Error()
	for _, s := range []string{"Kafka unavailable", "no broker of " + b.Addr + " answered for"} {
		if !strings.Contains(msg, s) {
			t.Fatalf("message %q lacks %q", msg, s)
		}
	}
	for _, s := range []string{"-1001", "transaction", "--end stable"} {
		if strings.Contains(msg, s) {
			t.Fatalf("message %q mentions %q", msg, s)
		}
	}
}

// TestBrokerRestartedMidRead: the broker restarts with its log (DataDir)
// on the same port while the replay is in the middle of a partition. The
// replay either completes with exactly the records produced, or fails with
// ErrUnavailable; never anything else.
func TestBrokerRestartedMidRead(t *testing.T) {
	localkafka.KfakeOnly(t)
	dir := t.TempDir()
	b := ownBroker(t, kfake.DataDir(dir))
	topic := uniqueTopic(t, b, 2)
	want := produceEach(t, b, topic, 2, 60)
	_, port, err := splitPort(b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	p := parkFetch(t, b, topic, 5)
	out, errc := runAsync(t, faultCfg(t, b, topic, 10*time.Second))
	waitParked(t, p, errc)
	b.Close()
	p.Release()
	b2 := ownBroker(t, kfake.DataDir(dir), kfake.Ports(port))
	if b2.Addr != b.Addr {
		t.Fatalf("restarted on %s, want %s", b2.Addr, b.Addr)
	}
	o := await(t, out)
	switch {
	case o.err == nil:
		if diff := cmp.Diff(sortRecs(want), o.got); diff != "" {
			t.Fatalf("records (-want +got):\n%s", diff)
		}
		t.Logf("completed across the restart with %d records", len(o.got))
	case errors.Is(o.err, ErrUnavailable):
		t.Logf("failed as unavailable: %v", o.err)
	default:
		t.Fatalf("err = %v, want success or ErrUnavailable", o.err)
	}
}

func splitPort(addr string) (string, int, error) {
	i := strings.LastIndexByte(addr, ':')
	var port int
	_, err := fmt.Sscan(addr[i+1:], &port)
	return addr[:i], port, err
}

// TestTopicDeletedMidRead: the topic is deleted while the replay is in the
// middle of a partition: ErrTopicNotFound with ErrTopicDeleted, not a stall.
func TestTopicDeletedMidRead(t *testing.T) {
	localkafka.KfakeOnly(t)
	topic := uniqueTopic(t, broker, 2)
	produceEach(t, broker, topic, 2, 60)
	p := parkFetch(t, broker, topic, 5)
	out, errc := runAsync(t, faultCfg(t, broker, topic, 1500*time.Millisecond))
	waitParked(t, p, errc)
	if err := broker.Cluster.DeleteTopic(topic); err != nil {
		t.Fatal(err)
	}
	p.Release()
	o := await(t, out)
	if !errors.Is(o.err, ErrTopicNotFound) || !errors.Is(o.err, ErrTopicDeleted) || errors.Is(o.err, ErrStalled) {
		t.Fatalf("err = %v, want ErrTopicDeleted", o.err)
	}
	if !strings.Contains(o.err.Error(), "topic deleted") {
		t.Fatalf("message %q does not say the topic was deleted", o.err)
	}
}

// TestPartitionsAddedMidRead: partitions added while the replay reads are
// not read (their records are not in the result), the captured ones are
// read exactly, and a warning names the new partitions.
func TestPartitionsAddedMidRead(t *testing.T) {
	localkafka.KfakeOnly(t)
	topic := uniqueTopic(t, broker, 2)
	want := produceEach(t, broker, topic, 2, 40)
	p := parkFetch(t, broker, topic, 5)
	var logs bytes.Buffer
	c := faultCfg(t, broker, topic, 10*time.Second)
	c.Log = zerolog.New(zerolog.MultiLevelWriter(&syncWriter{w: &logs}, zerolog.NewTestWriter(t))).Level(zerolog.InfoLevel)
	out, errc := runAsync(t, c)
	waitParked(t, p, errc)
	cl, err := broker.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	res, err := kadm.NewClient(cl).CreatePartitions(context.Background(), 2, topic)
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	if n := len(broker.Cluster.PartitionInfos(topic)); n != 4 {
		t.Fatalf("topic has %d partitions after adding 2, want 4", n)
	}
	// Records in the new partitions: the replay must not read them.
	if _, err := broker.Produce(context.Background(), topic, []localkafka.Record{kv(2, "new", "2"), kv(3, "new", "3")}); err != nil {
		t.Fatal(err)
	}
	p.Release()
	o := await(t, out)
	if o.err != nil {
		t.Fatal(o.err)
	}
	if diff := cmp.Diff(sortRecs(want), o.got); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	if len(o.res.Plan.Partitions) != 2 {
		t.Fatalf("plan covers %d partitions, want the 2 captured", len(o.res.Plan.Partitions))
	}
	const warn = "partitions 2-3 were added"
	if len(o.res.Plan.Warnings) != 1 || !strings.Contains(o.res.Plan.Warnings[0], warn) {
		t.Fatalf("warnings %q, want one with %q", o.res.Plan.Warnings, warn)
	}
	if !strings.Contains(logs.String(), warn) {
		t.Fatalf("log %q lacks the warning %q", logs.String(), warn)
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func TestPartitionSet(t *testing.T) {
	for _, c := range []struct {
		in   []int32
		want string
	}{{nil, ""}, {[]int32{0}, "0"}, {[]int32{2, 0, 1}, "0-2"}, {[]int32{0, 1, 2, 5, 7, 8}, "0-2,5,7-8"}} {
		if got := PartitionSet(c.in); got != c.want {
			t.Errorf("PartitionSet(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestMissingTopicNotRetried: a topic that metadata says does not exist
// fails at once (one metadata request for it), not after the retry budget.
func TestMissingTopicNotRetried(t *testing.T) {
	localkafka.KfakeOnly(t)
	topic := fmt.Sprintf("no-such-topic-%d-%s", topicSeq.Add(1), randomHex(3))
	h := broker.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: topic, Observe: true, Count: -1})
	defer h.Remove()
	_, _, err := collect(t, faultCfg(t, broker, topic, 10*time.Second))
	if !errors.Is(err, ErrTopicNotFound) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrTopicNotFound", err)
	}
	if n := h.Hits(); n != 1 {
		t.Fatalf("%d metadata requests named the missing topic, want 1 (no retry)", n)
	}
	if broker.Cluster.TopicInfo(topic) != nil {
		t.Fatal("the replay created the topic")
	}
}
