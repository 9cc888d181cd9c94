package replay

// The batch reader (batch.go) against the per-record reader as its oracle:
// the same topic read both ways must give the same records, positions,
// headers, timestamps, EOF-driven completion and errors.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/record"
)

// fullRec is all of a record the two readers must agree on.
type fullRec struct {
	P      int32
	O      int64
	TS     int64 // milliseconds; 0 for none
	K, V   string
	NK, NV bool
	H      []hdr
}

type hdr struct {
	K  string
	V  string
	NV bool
}

func toFull(r fold.Record) fullRec {
	f := fullRec{P: r.Partition, O: r.Offset, K: string(r.Key), V: string(r.Value), NK: r.Key == nil, NV: r.Value == nil}
	if !r.Timestamp.IsZero() {
		f.TS = r.Timestamp.UnixMilli()
	}
	for _, h := range r.Headers {
		f.H = append(f.H, hdr{K: h.Key, V: string(h.Value), NV: h.Value == nil})
	}
	return f
}

// TestBatchLinksBundledLibrdkafka: the preamble's prototypes resolve
// against the librdkafka confluent-kafka-go bundles, not another one.
func TestBatchLinksBundledLibrdkafka(t *testing.T) {
	want, _ := kafka.LibraryVersion()
	if got := rdkVersion(); got != want {
		t.Fatalf("rd_kafka_version() = %#x in package replay, confluent-kafka-go links %#x", got, want)
	}
}

// TestConsumerHandle pins the reflection consumerHandle does: if an
// upgrade of confluent-kafka-go renames Consumer.handle or handle.rk, this
// fails, rather than every replay falling back to one message a Poll.
func TestConsumerHandle(t *testing.T) {
	cm, _, err := consumerConfig(cfg(t, "any"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := kafka.NewConsumer(cm)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		for range c.Logs() {
		}
	}()
	if _, err := consumerHandle(c); err != nil {
		t.Fatalf("consumerHandle: %v (confluent-kafka-go %s)", err, confluentVersion(t))
	}
	// closeConsumer's fields: without them every Close waits out a poll of
	// the log queue (100 ms) again.
	if _, ok := logWakerOf(c); !ok {
		t.Fatalf("logWakerOf: confluent-kafka-go (%s) has no handle.logq, handle.waitGroup or Consumer.readerTermChan of the types closeConsumer knows", confluentVersion(t))
	}
	q, err := newBatchQueue(c, "any", true)
	if err != nil {
		t.Fatal(err)
	}
	q.close()
}

func confluentVersion(t *testing.T) string {
	_, s := kafka.LibraryVersion()
	return "librdkafka " + s
}

// produceMixed fills topic's four partitions with what a batch must carry
// exactly: NULL and empty keys and values, headers (NULL, empty, repeated
// keys), timestamps, transaction markers and an aborted transaction, an
// empty partition and records larger than a batch.
func produceMixed(t *testing.T, topic string) {
	t.Helper()
	ctx := context.Background()
	cl, err := broker.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Within the topic's retention: older records would be deleted.
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var rs []*kgo.Record
	for i := 0; i < 300; i++ {
		r := &kgo.Record{Topic: topic, Partition: 0, Key: []byte(fmt.Sprintf("k%d", i%37)), Value: []byte(fmt.Sprintf("v%d", i)),
			Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
		switch i % 7 {
		case 1:
			r.Key = nil
		case 2:
			r.Key = []byte{}
		case 3:
			r.Value = nil
		case 4:
			r.Value = []byte{}
		}
		if i%3 == 0 {
			r.Headers = []kgo.RecordHeader{{Key: "trace", Value: []byte(fmt.Sprint(i))}, {Key: "empty", Value: []byte{}}, {Key: "nil"}, {Key: "trace", Value: []byte("again")}}
		}
		rs = append(rs, r)
	}
	// Partition 3: records larger than a batch's byte budget.
	for i := 0; i < 4; i++ {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: 3, Key: []byte(fmt.Sprintf("big%d", i)), Value: bytes.Repeat([]byte{byte('a' + i)}, 200<<10)})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Partition 1: plain, aborted, committed (its marker the last offset).
	produce(t, topic, []localkafka.Record{kv(1, "x", "1")})
	ab, err := broker.BeginTxn(ctx, topic, topic+"-abort")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ab.Produce(ctx, []localkafka.Record{kv(1, "x", "aborted"), kv(0, "a", "aborted")}); err != nil {
		t.Fatal(err)
	}
	if err := ab.End(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, err := broker.WriteTxn(ctx, topic, topic+"-commit", []localkafka.Record{kv(1, "y", "2"), kv(0, "z", "2")}, true); err != nil {
		t.Fatal(err)
	}
	// Partition 2 stays empty.
}

// readAll replays c and returns the records (sorted by partition and
// offset) and the result. The sink keeps every batch as it was handed over
// and a second goroutine reads them while the replay goes on, as the
// rebuild's writer does: a record's bytes must not change after the
// handover (compared with what was seen at the handover).
func readAll(t *testing.T, c Config) ([]fullRec, Result, error) {
	t.Helper()
	var (
		kept []fold.Record
		seen []fullRec
		wg   sync.WaitGroup
	)
	batches := make(chan []fold.Record, 16)
	var readerSeen []fullRec
	wg.Add(1)
	go func() {
		defer wg.Done()
		for b := range batches {
			for _, r := range b {
				readerSeen = append(readerSeen, toFull(r))
			}
		}
	}()
	res, err := Run(context.Background(), c, func(b []fold.Record) error {
		for _, r := range b {
			seen = append(seen, toFull(r))
		}
		kept = append(kept, b...)
		batches <- b
		return nil
	})
	close(batches)
	wg.Wait()
	var later []fullRec
	for _, r := range kept {
		later = append(later, toFull(r))
	}
	if diff := cmp.Diff(seen, later); diff != "" {
		t.Fatalf("records changed after their batch was handed over (-at handover +at the end):\n%s", diff)
	}
	if diff := cmp.Diff(seen, readerSeen); diff != "" {
		t.Fatalf("the sink's goroutine saw other records (-sink +goroutine):\n%s", diff)
	}
	sortFull(seen)
	return seen, res, err
}

func sortFull(rs []fullRec) {
	sort.SliceStable(rs, func(i, j int) bool {
		if rs[i].P != rs[j].P {
			return rs[i].P < rs[j].P
		}
		return rs[i].O < rs[j].O
	})
}

// TestBatchReaderMatchesPerRecord reads the same topics in batches and one
// message a Poll, with batch limits small and large.
func TestBatchReaderMatchesPerRecord(t *testing.T) {
	mixed := newTopic(t, 4)
	produceMixed(t, mixed)
	compacted := compactedTopic(t)
	for _, topic := range []string{mixed, compacted} {
		for _, lim := range []struct {
			records, bytes int
			headers        bool
		}{{1, 0, true}, {7, 1 << 10, true}, {20000, 0, true}, {20000, 0, false}} {
			t.Run(fmt.Sprintf("%s/records=%d,bytes=%d,headers=%v", topic, lim.records, lim.bytes, lim.headers), func(t *testing.T) {
				c := cfg(t, topic)
				c.Headers = lim.headers
				c.BatchRecords, c.BatchBytes = lim.records, lim.bytes
				one := c
				one.perRecord = true
				before := batchesTaken.Load()
				want, wres, err := readAll(t, one)
				if err != nil {
					t.Fatalf("per record: %v", err)
				}
				mid := batchesTaken.Load()
				got, gres, err := readAll(t, c)
				if err != nil {
					t.Fatalf("batches: %v", err)
				}
				if after := batchesTaken.Load(); mid != before || after == mid {
					t.Fatalf("batches taken: %d by the per-record reader, %d by the batch reader", mid-before, after-mid)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("records (-per record +batches):\n%s", diff)
				}
				if diff := cmp.Diff(wres.Plan.Partitions, gres.Plan.Partitions); diff != "" {
					t.Fatalf("positions (-per record +batches):\n%s", diff)
				}
				if wres.Records != gres.Records || gres.Records != int64(len(got)) {
					t.Fatalf("records counted: per record %d, batches %d, delivered %d", wres.Records, gres.Records, len(got))
				}
			})
		}
	}
	// The oracle itself is checked against what was produced: headers,
	// timestamps and NULLs arrive at all.
	c := cfg(t, mixed)
	c.Headers, c.perRecord = true, true
	got, _, err := readAll(t, c)
	if err != nil {
		t.Fatal(err)
	}
	var withHeaders, nulls, big, p1 int
	for _, r := range got {
		if len(r.H) == 4 && r.H[2].NV && !r.H[1].NV && r.H[1].V == "" && r.H[3].V == "again" && r.TS > 0 {
			withHeaders++
		}
		if r.NK || r.NV {
			nulls++
		}
		if len(r.V) == 200<<10 {
			big++
		}
		if r.P == 1 {
			p1++
			if r.V == "aborted" {
				t.Fatalf("aborted record read: %+v", r)
			}
		}
	}
	if withHeaders != 100 || nulls < 80 || big != 4 || p1 != 2 {
		t.Fatalf("oracle read %d records with headers, %d NULLs, %d big, %d in partition 1; want 100, >= 80, 4, 2", withHeaders, nulls, big, p1)
	}
}

// compactedTopic is a one-partition topic with compaction holes.
func compactedTopic(t *testing.T) string {
	topic := fmt.Sprintf("%s-c-%d-%s", strings.ReplaceAll(t.Name(), "/", "-"), topicSeq.Add(1), randomHex(3))
	broker.TestTopic(t, topic, 1, localkafka.CompactedConfig(time.Hour))
	var all []rec
	for i := 0; i < 5; i++ {
		all = append(all, produce(t, topic, []localkafka.Record{kv(0, "a", fmt.Sprint(i)), kv(0, fmt.Sprintf("u%d", i), "x")})...)
	}
	all = append(all, produce(t, topic, []localkafka.Record{kv(0, "z", "end")})...)
	var superseded []int64
	for _, r := range all {
		if r.K == "a" && r.V != "4" {
			superseded = append(superseded, r.O)
		}
	}
	if _, err := broker.AwaitCompacted(context.Background(), topic, 0, superseded...); err != nil {
		t.Fatal(err)
	}
	return topic
}

// TestBatchReaderErrorsMatchPerRecord: records removed under the replay
// fail both readers the same way.
func TestBatchReaderErrorsMatchPerRecord(t *testing.T) {
	type outcome struct {
		Kind      string
		Partition int32
		Named     bool
	}
	run := func(perRecord bool) outcome {
		topic := newTopic(t, 1)
		var in []localkafka.Record
		for i := 0; i < 600; i++ {
			in = append(in, kv(0, fmt.Sprintf("k%d", i), strings.Repeat("v", 100)))
		}
		if _, err := broker.ProduceEach(context.Background(), topic, in); err != nil {
			t.Fatal(err)
		}
		c := cfg(t, topic)
		c.perRecord = perRecord
		c.BatchRecords = 1
		c.Props = map[string]string{
			"fetch.max.bytes": "1024", "message.max.bytes": "1000", "max.partition.fetch.bytes": "1",
			"queued.min.messages": "1", "queued.max.messages.kbytes": "1", "fetch.wait.max.ms": "10",
		}
		deleted := false
		_, err := Run(context.Background(), c, func(b []fold.Record) error {
			if !deleted && b[0].Offset >= 10 {
				deleted = true
				return broker.DeleteRecords(context.Background(), topic, 0, 500)
			}
			return nil
		})
		var re *Error
		if !errors.As(err, &re) {
			t.Fatalf("perRecord=%v: err = %v, want an *Error", perRecord, err)
		}
		return outcome{Kind: fmt.Sprint(re.Kind), Partition: re.Partition, Named: strings.Contains(err.Error(), "retained low is now 500")}
	}
	want, got := run(true), run(false)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("error (-per record +batches):\n%s", diff)
	}
	if want.Kind != fmt.Sprint(ErrRecordsRemoved) || !want.Named {
		t.Fatalf("oracle error %+v, want records removed naming the new low", want)
	}
}

// TestBatchReaderKeepsConsumerEvents: with partitions read from the batch
// queue, librdkafka's log lines still reach the log, and the client's
// errors (served by Poll on the consumer queue) still reach the reader: a
// broker stopped mid-read is ErrUnavailable, and the transport errors the
// client reported on the way were handled (logged as retried).
func TestBatchReaderKeepsConsumerEvents(t *testing.T) {
	localkafka.KfakeOnly(t) // stops its own broker mid-read
	b := ownBroker(t)
	topic := uniqueTopic(t, b, 2)
	produceEach(t, b, topic, 2, 60)
	p := parkFetch(t, b, topic, 5)
	var buf bytes.Buffer
	logs := &syncWriter{w: &buf}
	c := faultCfg(t, b, topic, 1500*time.Millisecond)
	c.Log = zerolog.New(logs).Level(zerolog.DebugLevel)
	out, errc := runAsync(t, c)
	waitParked(t, p, errc)
	b.Close()
	p.Release()
	o := await(t, out)
	if !errors.Is(o.err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", o.err)
	}
	logs.mu.Lock()
	text := buf.String()
	logs.mu.Unlock()
	// The client's errors come only through the consumer queue's Poll,
	// which logs each one it retries (partReader.clientEvent).
	if !strings.Contains(text, "kafka client error (retrying)") {
		t.Fatalf("no client error reached the reader through the consumer queue; log:\n%s", text)
	}
	if !strings.Contains(text, `"librdkafka"`) {
		t.Fatalf("no librdkafka log line reached the log:\n%s", text)
	}
}

// TestFollowHeldRecordsOwnTheirBytes: records held past a cut are copied
// out of their batch's arena (followPart.own), once, and keep their
// contents.
func TestFollowHeldRecordsOwnTheirBytes(t *testing.T) {
	arena := []byte("k1v1k2v2hk")
	st := &followPart{}
	st.start(0)
	st.read(record.Record{Offset: 0, Key: arena[0:2], Value: arena[2:4]})
	st.read(record.Record{Offset: 1, Key: arena[4:6], Value: arena[6:8], Headers: []record.Header{{Key: "hk", Value: nil}}})
	st.own()
	copy(arena, "XXXXXXXXXX")
	if st.owned != 2 {
		t.Fatalf("owned %d, want 2", st.owned)
	}
	st.read(record.Record{Offset: 2, Key: arena[0:2], Value: nil})
	first := &st.held[0].Key[0]
	st.own()
	if &st.held[0].Key[0] != first {
		t.Fatal("an owned record was copied again")
	}
	out := st.take(1, nil)
	if st.owned != 2 {
		t.Fatalf("owned %d after taking one, want 2", st.owned)
	}
	var got []string
	for _, r := range append(out, st.held...) {
		got = append(got, fmt.Sprintf("%s=%s%v", r.Key, r.Value, r.Value == nil))
		for _, h := range r.Headers {
			got = append(got, "h:"+h.Key)
		}
	}
	want := []string{"k1=v1false", "k2=v2false", "h:hk", "XX=true"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("held records (-want +got):\n%s", diff)
	}
}

// countingPacer is a one-turn Pacer that counts its turns and says whether
// one is held.
type countingPacer struct {
	held  atomic.Bool
	turns atomic.Int64
}

func (p *countingPacer) Acquire(context.Context) error {
	if p.held.Swap(true) {
		return errors.New("a second turn taken while one is held")
	}
	p.turns.Add(1)
	return nil
}

func (p *countingPacer) Release() { p.held.Store(false) }

// TestBatchReaderPaced: with Config.CPU, each batch's Go work runs in a
// turn, the sink is never called inside one (it may wait for a writer
// that needs a turn), and the records are the oracle's.
func TestBatchReaderPaced(t *testing.T) {
	topic := newTopic(t, 4)
	produceMixed(t, topic)
	one := cfg(t, topic)
	one.perRecord = true
	want, _, err := readAll(t, one)
	if err != nil {
		t.Fatal(err)
	}
	p := &countingPacer{}
	c := cfg(t, topic)
	c.CPU, c.BatchRecords = p, 17
	var got []fullRec
	inTurn := 0
	_, err = Run(context.Background(), c, func(b []fold.Record) error {
		if p.held.Load() {
			inTurn++
		}
		for _, r := range b {
			got = append(got, toFull(r))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sortFull(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("records (-per record +paced):\n%s", diff)
	}
	if p.turns.Load() == 0 || inTurn != 0 || p.held.Load() {
		t.Fatalf("%d turns, %d sink calls inside a turn, held at the end %v; want some, 0, false", p.turns.Load(), inTurn, p.held.Load())
	}
}

// TestCloseConsumer: closeConsumer closes the consumer as Close does (its
// logs channel closes, a second close is refused, not hung) with records
// read and logs forwarded.
func TestCloseConsumer(t *testing.T) {
	topic := newTopic(t, 2)
	want := produceEach(t, broker, topic, 2, 20)
	c := cfg(t, topic)
	c = c.withDefaults()
	cl, err := newClients(c)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := capture(context.Background(), cl, c)
	if err != nil {
		t.Fatal(err)
	}
	var got int
	r := newReader(c, cl, plan, func(b []record.Record) error { got += len(b); return nil }, time.Now())
	if _, err := r.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got != len(want) {
		t.Fatalf("read %d records, want %d", got, len(want))
	}
	if err := cl.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if !cl.consumer.IsClosed() {
		t.Fatal("the consumer is not closed")
	}
	if err := closeConsumer(cl.consumer); err == nil {
		t.Fatal("a second close was not refused")
	}
}
