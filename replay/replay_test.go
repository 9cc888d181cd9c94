package replay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

var broker *localkafka.Broker

func TestMain(m *testing.M) { os.Exit(localkafka.RunTests(m, &broker)) }

// rec is what the oracle compares: position, key, value.
type rec struct {
	P      int32
	O      int64
	K, V   string
	NK, NV bool
}

func toRec(r fold.Record) rec {
	return rec{P: r.Partition, O: r.Offset, K: string(r.Key), V: string(r.Value), NK: r.Key == nil, NV: r.Value == nil}
}

func newTopic(t *testing.T, partitions int32) string {
	t.Helper()
	return uniqueTopic(t, broker, partitions)
}

func cfg(t *testing.T, topic string) Config {
	return Config{
		Brokers:      broker.Addr,
		Topic:        topic,
		StallTimeout: 10 * time.Second,
		Log:          zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel),
	}
}

func collect(t *testing.T, c Config) ([]rec, Result, error) {
	t.Helper()
	var got []rec
	res, err := Run(context.Background(), c, func(b []fold.Record) error {
		for _, r := range b {
			got = append(got, toRec(r))
		}
		return nil
	})
	checkOrder(t, got)
	return sortRecs(got), res, err
}

// sortRecs orders by (partition, offset): the replay promises offset order
// only within a partition.
func sortRecs(rs []rec) []rec {
	out := append([]rec{}, rs...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].P != out[j].P {
			return out[i].P < out[j].P
		}
		return out[i].O < out[j].O
	})
	return out
}

// checkOrder fails unless offsets strictly increase within each partition,
// in delivery order.
func checkOrder(t *testing.T, rs []rec) {
	t.Helper()
	last := map[int32]int64{}
	for _, r := range rs {
		if prev, ok := last[r.P]; ok && r.O <= prev {
			t.Fatalf("partition %d: offset %d delivered after %d", r.P, r.O, prev)
		}
		last[r.P] = r.O
	}
}

func produce(t *testing.T, topic string, recs []localkafka.Record) []rec {
	t.Helper()
	offs, err := broker.Produce(context.Background(), topic, recs)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]rec, len(recs))
	for i, r := range recs {
		out[i] = rec{P: r.Partition, O: offs[i], K: string(r.Key), V: string(r.Value), NK: r.Key == nil, NV: r.Value == nil}
	}
	return out
}

func kv(p int32, k, v string) localkafka.Record {
	var key, val []byte
	if k != "<nil>" {
		key = []byte(k)
	}
	if v != "<nil>" {
		val = []byte(v)
	}
	return localkafka.Record{Partition: p, Key: key, Value: val}
}

func TestFullReplayEmptyPartitionNullKeyTombstone(t *testing.T) {
	topic := newTopic(t, 4)
	want := produce(t, topic, []localkafka.Record{
		kv(0, "a", "1"), kv(0, "b", "2"), kv(0, "a", "3"),
		kv(1, "<nil>", "nokey"), kv(1, "c", "4"), kv(1, "c", "<nil>"),
		kv(3, "d", ""), kv(3, "e", "5"),
	}) // partition 2 stays empty
	got, res, err := collect(t, cfg(t, topic))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sortRecs(want), got); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	wantEnd := map[int32]int64{0: 3, 1: 3, 2: 0, 3: 2}
	if diff := cmp.Diff(wantEnd, res.Positions()); diff != "" {
		t.Fatalf("end positions (-want +got):\n%s", diff)
	}
	if res.Records != int64(len(want)) {
		t.Fatalf("records = %d, want %d", res.Records, len(want))
	}
}

func TestFromOffsets(t *testing.T) {
	topic := newTopic(t, 3)
	var in []localkafka.Record
	for i := 0; i < 10; i++ {
		in = append(in, kv(int32(i%3), fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)))
	}
	all := produce(t, topic, in)
	if err := broker.DeleteRecords(context.Background(), topic, 1, 1); err != nil {
		t.Fatal(err)
	}
	c := cfg(t, topic)
	// partition 0 from 2, partition 1 from 0 (below its low of 1), partition 2 not named.
	c.Start.Offsets = map[int32]int64{0: 2, 1: 0}
	var want []rec
	for _, r := range all {
		if (r.P == 0 && r.O >= 2) || (r.P == 1 && r.O >= 1) || r.P == 2 {
			want = append(want, r)
		}
	}
	got, res, err := collect(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sortRecs(want), got); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	if len(res.Plan.Warnings) != 1 || !strings.Contains(res.Plan.Warnings[0], "partition 1") {
		t.Fatalf("warnings = %q, want one naming partition 1", res.Plan.Warnings)
	}
}

func TestOffsetAboveHigh(t *testing.T) {
	topic := newTopic(t, 2)
	produce(t, topic, []localkafka.Record{kv(0, "a", "1"), kv(1, "b", "2")})
	c := cfg(t, topic)
	c.Start.Offsets = map[int32]int64{1: 5}
	_, _, err := collect(t, c)
	var re *Error
	if !errors.Is(err, ErrBadStart) || !errors.As(err, &re) || re.Partition != 1 || re.Offset != 5 {
		t.Fatalf("err = %v, want ErrBadStart on partition 1 offset 5", err)
	}
	if !strings.Contains(err.Error(), "high mark 1") {
		t.Fatalf("message %q does not name the high mark", err)
	}
	c.Start.Offsets = map[int32]int64{7: 0}
	if _, _, err := collect(t, c); !errors.Is(err, ErrBadStart) {
		t.Fatalf("unknown partition: err = %v, want ErrBadStart", err)
	}
}

func TestFromTimestamp(t *testing.T) {
	topic := newTopic(t, 3)
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var in []localkafka.Record
	for i := 0; i < 12; i++ {
		r := kv(int32(i%2), fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)) // partition 2 empty
		r.Timestamp = base.Add(time.Duration(i) * time.Minute)
		in = append(in, r)
	}
	// Partition 0 gets one late record with an older timestamp at its end:
	// the start is the first offset whose timestamp is >= T, later offsets
	// are all read.
	all := produce(t, topic, in)
	T := base.Add(7 * time.Minute)
	var want []rec
	for i, r := range all {
		if !in[i].Timestamp.Before(T) {
			want = append(want, r)
		}
	}
	c := cfg(t, topic)
	c.Start.Timestamp = T
	got, _, err := collect(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sortRecs(want), got); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	// A timestamp after every record: nothing to read, still complete.
	c.Start.Timestamp = base.Add(time.Hour)
	got, res, err := collect(t, c)
	if err != nil || len(got) != 0 {
		t.Fatalf("late timestamp: %d records, err %v", len(got), err)
	}
	for _, p := range res.Plan.Partitions {
		if p.End != p.High {
			t.Fatalf("partition %d end %d, want high %d", p.Partition, p.End, p.High)
		}
	}
}

func TestTransactionsCommitMarkerLastAndAborted(t *testing.T) {
	topic := newTopic(t, 2)
	ctx := context.Background()
	plain := produce(t, topic, []localkafka.Record{kv(0, "a", "1"), kv(1, "x", "1")})
	// Aborted records in partition 1, then a committed transaction whose
	// commit marker is the last offset of partitions 0 and 1.
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
	recs := []localkafka.Record{kv(0, "a", "2"), kv(1, "y", "2")}
	offs, err := broker.WriteTxn(ctx, topic, topic+"-commit", recs, true)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]rec{}, plain...)
	for i, r := range recs {
		want = append(want, rec{P: r.Partition, O: offs[i], K: string(r.Key), V: string(r.Value)})
	}
	got, res, err := collect(t, cfg(t, topic))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sortRecs(want), got); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	marks, err := broker.Marks(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Plan.Partitions {
		if hw := marks[p.Partition].High; p.End != hw {
			t.Fatalf("partition %d ended at %d, high watermark %d", p.Partition, p.End, hw)
		}
		if last := offs[p.Partition]; p.End <= last+1 {
			t.Fatalf("partition %d: high %d should be past the commit marker after %d", p.Partition, p.End, last)
		}
	}
}

func TestOpenTransaction(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (string, []rec, *localkafka.Txn, []localkafka.Record) {
		topic := newTopic(t, 2)
		before := produce(t, topic, []localkafka.Record{kv(0, "a", "1"), kv(1, "b", "1")})
		tx, err := broker.BeginTxn(ctx, topic, topic)
		if err != nil {
			t.Fatal(err)
		}
		open := []localkafka.Record{kv(0, "a", "open")}
		if _, err := tx.Produce(ctx, open); err != nil {
			t.Fatal(err)
		}
		// Committed after the open transaction: beyond the LSO.
		after := produce(t, topic, []localkafka.Record{kv(0, "c", "later")})
		return topic, append(before, after...), tx, open
	}

	t.Run("default waits then fails", func(t *testing.T) {
		topic, _, tx, _ := setup(t)
		defer tx.End(ctx, false)
		c := cfg(t, topic)
		c.StallTimeout = 1500 * time.Millisecond
		var sawWaiting bool
		c.ProgressInterval = 100 * time.Millisecond
		c.Progress = func(p Progress) {
			for _, pp := range p.Partitions {
				if pp.State == StateWaiting && pp.Partition == 0 {
					sawWaiting = true
				}
			}
		}
		_, _, err := collect(t, c)
		var re *Error
		if !errors.Is(err, ErrStalled) || !errors.Is(err, ErrOpenTransaction) || !errors.As(err, &re) || re.Partition != 0 {
			t.Fatalf("err = %v, want an open-transaction stall on partition 0", err)
		}
		for _, s := range []string{"last stable offset at 1", "high mark 3"} {
			if !strings.Contains(err.Error(), s) {
				t.Fatalf("message %q lacks %q", err, s)
			}
		}
		if !sawWaiting {
			t.Fatal("progress never showed partition 0 waiting")
		}
	})
	t.Run("commit while waiting", func(t *testing.T) {
		topic, committed, tx, open := setup(t)
		c := cfg(t, topic)
		c.ProgressInterval = 50 * time.Millisecond
		var ended bool
		c.Progress = func(p Progress) {
			for _, pp := range p.Partitions {
				if pp.State == StateWaiting && !ended {
					ended = true
					if err := tx.End(ctx, true); err != nil {
						t.Error(err)
					}
				}
			}
		}
		got, _, err := collect(t, c)
		if err != nil {
			t.Fatal(err)
		}
		if !ended {
			t.Fatal("the replay never waited for the transaction")
		}
		want := append(committed, rec{P: 0, O: 1, K: string(open[0].Key), V: string(open[0].Value)})
		if diff := cmp.Diff(sortRecs(want), got); diff != "" {
			t.Fatalf("records (-want +got):\n%s", diff)
		}
	})
	t.Run("end stable", func(t *testing.T) {
		topic, committed, tx, _ := setup(t)
		defer tx.End(ctx, false)
		c := cfg(t, topic)
		c.End = EndStable
		got, res, err := collect(t, c)
		if err != nil {
			t.Fatal(err)
		}
		var want []rec
		for _, r := range committed {
			if r.P != 0 || r.O < 1 { // partition 0 stops at the LSO 1
				want = append(want, r)
			}
		}
		if diff := cmp.Diff(sortRecs(want), got); diff != "" {
			t.Fatalf("records (-want +got):\n%s", diff)
		}
		if e := res.Positions()[0]; e != 1 {
			t.Fatalf("partition 0 ended at %d, want the LSO 1", e)
		}
	})
}

func TestRetainedLowAboveZero(t *testing.T) {
	topic := newTopic(t, 1)
	var in []localkafka.Record
	for i := 0; i < 6; i++ {
		in = append(in, kv(0, fmt.Sprintf("k%d", i), "v"))
	}
	all := produce(t, topic, in)
	if err := broker.DeleteRecords(context.Background(), topic, 0, 4); err != nil {
		t.Fatal(err)
	}
	got, res, err := collect(t, cfg(t, topic))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(all[4:], got); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	if p := res.Plan.Partitions[0]; p.Low != 4 || p.Start != 4 || p.End != 6 {
		t.Fatalf("bounds = %+v, want low 4 start 4 end 6", p)
	}
}

func TestRecordsDeletedUnderTheReplay(t *testing.T) {
	topic := newTopic(t, 1)
	var in []localkafka.Record
	for i := 0; i < 1000; i++ {
		in = append(in, kv(0, fmt.Sprintf("k%d", i), strings.Repeat("v", 100)))
	}
	// One record per produce request, so one record per batch: fetches can
	// then be kept small.
	if _, err := broker.ProduceEach(context.Background(), topic, in); err != nil {
		t.Fatal(err)
	}
	c := cfg(t, topic)
	c.BatchRecords = 1
	c.Props = map[string]string{
		"fetch.max.bytes":            "1024",
		"message.max.bytes":          "1000",
		"max.partition.fetch.bytes":  "1",
		"queued.min.messages":        "1",
		"queued.max.messages.kbytes": "1",
		"fetch.wait.max.ms":          "10",
	}
	deleted := false
	res, err := Run(context.Background(), c, func(b []fold.Record) error {
		if !deleted && b[0].Offset >= 10 {
			deleted = true
			if err := broker.DeleteRecords(context.Background(), topic, 0, 900); err != nil {
				return err
			}
		}
		return nil
	})
	var re *Error
	if !errors.Is(err, ErrRecordsRemoved) || !errors.As(err, &re) || re.Partition != 0 {
		t.Fatalf("err = %v (read %d records), want ErrRecordsRemoved on partition 0", err, res.Records)
	}
	if !strings.Contains(err.Error(), "retained low is now 900") {
		t.Fatalf("message %q does not name the new low", err)
	}
}

func TestMissingTopic(t *testing.T) {
	topic := fmt.Sprintf("no-such-topic-%d-%s", topicSeq.Add(1), randomHex(3))
	_, _, err := collect(t, cfg(t, topic))
	if !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("err = %v, want ErrTopicNotFound", err)
	}
	if _, exists, err := broker.TopicID(context.Background(), topic); err != nil || exists {
		t.Fatalf("the replay created the topic (exists %v, err %v)", exists, err)
	}
}

func TestUnreachableBroker(t *testing.T) {
	c := cfg(t, "anything")
	c.Brokers = "127.0.0.1:1"
	c.StallTimeout = 2 * time.Second
	start := time.Now()
	_, _, err := collect(t, c)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	// Bounded by the stall timeout, not a hang: generous slack for a
	// loaded 2-core machine, this is about not hanging forever.
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("took %s", d)
	}
}

// TestCompactionGaps: a compacted log (kfake's Compact, or Kafka's log
// cleaner awaited through localkafka.AwaitCompacted) has offset holes where
// superseded values were; the replay reads what is left, in order, and
// ends at the high mark. The oracle is the latest value per key of what
// was produced, and the holes are the superseded offsets, first shown gone
// from the log by an independent read.
func TestCompactionGaps(t *testing.T) {
	topic := fmt.Sprintf("%s-%d-%s", t.Name(), topicSeq.Add(1), randomHex(3))
	broker.TestTopic(t, topic, 1, localkafka.CompactedConfig(time.Hour))
	var all []rec
	for i := 0; i < 5; i++ {
		all = append(all, produce(t, topic, []localkafka.Record{kv(0, "a", fmt.Sprint(i)), kv(0, fmt.Sprintf("u%d", i), "x")})...)
	}
	all = append(all, produce(t, topic, []localkafka.Record{kv(0, "z", "end")})...)
	var superseded []int64 // every value of "a" but its last
	for _, r := range all {
		if r.K == "a" && r.V != "4" {
			superseded = append(superseded, r.O)
		}
	}
	c, err := broker.AwaitCompacted(context.Background(), topic, 0, superseded...)
	if err != nil {
		t.Fatal(err)
	}
	got, res, err := collect(t, cfg(t, topic))
	if err != nil {
		t.Fatal(err)
	}
	latest := func(rs []rec) map[string]string {
		m := map[string]string{}
		for _, r := range rs {
			if r.K != string(localkafka.FillerKey) {
				m[r.K] = r.V
			}
		}
		return m
	}
	if diff := cmp.Diff(latest(all), latest(got)); diff != "" {
		t.Fatalf("table (-want +got):\n%s", diff)
	}
	read := map[int64]bool{}
	for i, r := range got {
		if i > 0 && r.O <= got[i-1].O {
			t.Fatalf("offset %d read after %d", r.O, got[i-1].O)
		}
		read[r.O] = true
	}
	for _, o := range superseded {
		if read[o] {
			t.Fatalf("offset %d, compacted away, was read", o)
		}
	}
	if res.Positions()[0] != c.High {
		t.Fatalf("ended at %d, want the high watermark %d", res.Positions()[0], c.High)
	}
	t.Logf("compaction left %d records below %d (%d produced, %d filler)", len(got), c.High, len(all), len(c.Fillers))
}

func TestInspect(t *testing.T) {
	topic := newTopic(t, 2)
	produce(t, topic, []localkafka.Record{kv(0, "a", "1"), kv(0, "b", "1"), kv(1, "c", "1")})
	if err := broker.DeleteRecords(context.Background(), topic, 0, 1); err != nil {
		t.Fatal(err)
	}
	plan, err := Inspect(context.Background(), cfg(t, topic))
	if err != nil {
		t.Fatal(err)
	}
	marks, err := broker.Marks(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Partitions) != len(marks) {
		t.Fatalf("plan has %d partitions, broker says %d", len(plan.Partitions), len(marks))
	}
	// The oracle: what the broker itself answers, and what was produced
	// and deleted.
	want := map[int32]localkafka.Marks{0: {Low: 1, High: 2, LSO: 2}, 1: {Low: 0, High: 1, LSO: 1}}
	for _, p := range plan.Partitions {
		m := marks[p.Partition]
		if p.Low != m.Low || p.High != m.High || p.LSO != m.LSO || p.Leader != m.Leader {
			t.Fatalf("partition %d: got %+v, broker says %+v", p.Partition, p, m)
		}
		if w := want[p.Partition]; p.Low != w.Low || p.High != w.High || p.LSO != w.LSO {
			t.Fatalf("partition %d: got %+v, want low %d high %d LSO %d", p.Partition, p, w.Low, w.High, w.LSO)
		}
	}
}

// TestUntilTimestamp: Until.Timestamp ends each partition at the first
// offset whose timestamp is >= T (ListOffsets by timestamp): every record
// before it is read, a late record with an older timestamp after it is
// not, and a partition with no record at or after T reads to its end.
func TestUntilTimestamp(t *testing.T) {
	topic := newTopic(t, 3)
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var in []localkafka.Record
	for i := 0; i < 12; i++ {
		r := kv(int32(i%2), fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i))
		r.Timestamp = base.Add(time.Duration(i) * time.Minute)
		in = append(in, r)
	}
	// Partition 0 ends with a late record stamped before T, partition 2
	// holds only records before T.
	late := kv(0, "late", "old")
	late.Timestamp = base
	early := kv(2, "early", "e")
	early.Timestamp = base.Add(time.Minute)
	in = append(in, late, early)
	all := produce(t, topic, in)
	T := base.Add(7 * time.Minute)
	// The oracle: per partition, the first offset stamped >= T.
	end := map[int32]int64{}
	for i, r := range all {
		if _, ok := end[r.P]; !ok && !in[i].Timestamp.Before(T) {
			end[r.P] = r.O
		}
	}
	var want []rec
	for _, r := range all {
		if e, ok := end[r.P]; !ok || r.O < e {
			want = append(want, r)
		}
	}
	c := cfg(t, topic)
	c.Until.Timestamp = T
	got, res, err := collect(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sortRecs(want), got); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	if len(end) != 2 {
		t.Fatalf("%d partitions have a record at or after T, want 2: the test proves nothing", len(end))
	}
	for _, p := range res.Plan.Partitions {
		e, bounded := end[p.Partition]
		if !bounded {
			e = p.High
		}
		if p.End != e || p.Bounded != bounded {
			t.Fatalf("partition %d: end %d bounded %v, want %d %v", p.Partition, p.End, p.Bounded, e, bounded)
		}
	}
}
