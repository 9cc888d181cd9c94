package localkafka

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/internal/kafkatest"
)

// testBroker is the broker RunTests would give: the real Kafka the
// environment names, or a kfake of the test's own.
func testBroker(t *testing.T) *Broker {
	t.Helper()
	e, ok, err := kafkatest.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		return &Broker{Addr: e.Addr, Kafka: e}
	}
	b, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// TestAwaitCompacted: on a compacted topic (CompactedConfig), a key's
// superseded values and a key's tombstone (delete.retention.ms 1 ms) are
// awaited gone; the log read back independently has neither, keeps the
// last value of every key, and has its filler at the offsets reported.
// Awaiting a key's last value, which compaction never removes, ends with
// the context's error naming the offset.
func TestAwaitCompacted(t *testing.T) {
	b := testBroker(t)
	topic := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	b.TestTopic(t, topic, 1, CompactedConfig(time.Millisecond))
	ctx := context.Background()
	var offs []int64
	for _, r := range []Record{
		{Key: []byte("a"), Value: []byte("1")},
		{Key: []byte("b"), Value: []byte("1")},
		{Key: []byte("a"), Value: []byte("2")},
		{Key: []byte("b")},
	} {
		o, err := b.Produce(ctx, topic, []Record{r})
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, o[0])
	}
	gone := []int64{offs[0], offs[1], offs[3]} // a=1, b=1, b's tombstone
	c, err := b.AwaitCompacted(ctx, topic, 0, gone...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gone after %v, %d filler records", c.Gone, len(c.Fillers))
	if len(c.Gone) != len(gone) || len(c.Fillers) == 0 {
		t.Fatalf("gone %v, filler %v: want every offset timed and some filler", c.Gone, c.Fillers)
	}
	recs, err := b.ReadCommitted(ctx, topic, map[int32]int64{0: c.High})
	if err != nil {
		t.Fatal(err)
	}
	held := map[int64]string{}
	for _, r := range recs[0] {
		held[r.Offset] = string(r.Key)
	}
	for _, o := range gone {
		if _, ok := held[o]; ok {
			t.Fatalf("offset %d is still in the log: %v", o, held)
		}
	}
	if held[offs[2]] != "a" {
		t.Fatalf("a's last value (offset %d) is not in the log: %v", offs[2], held)
	}
	if last := c.Fillers[len(c.Fillers)-1]; held[last] != string(FillerKey) || last != c.High-1 {
		t.Fatalf("the last filler (offset %d, high %d) is not the log's last record: %v", last, c.High, held)
	}

	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = b.AwaitCompacted(short, topic, 0, offs[2])
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("awaiting a last value: %v, want the deadline", err)
	}
	t.Log(err)
}
