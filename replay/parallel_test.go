package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// TestReadersMatchOneReader: N readers deliver what one per-record reader
// does, the sink is never called by two at once, and the progress names
// every partition once.
func TestReadersMatchOneReader(t *testing.T) {
	topic := newTopic(t, 4)
	produceMixed(t, topic)
	one := cfg(t, topic)
	one.Headers, one.perRecord = true, true
	want, _, err := readAll(t, one)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 3, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			c := cfg(t, topic)
			c.Headers, c.Readers, c.BatchRecords = true, n, 13
			var lowered atomic.Int32
			c.Lower = func(fn func()) {
				lowered.Add(1)
				fn()
			}
			var inSink, overlaps atomic.Int32
			var last Progress
			c.Progress = func(p Progress) { last = p }
			var got []fullRec
			res, err := Run(context.Background(), c, func(b []fold.Record) error {
				if inSink.Add(1) > 1 {
					overlaps.Add(1)
				}
				defer inSink.Add(-1)
				for _, r := range b {
					got = append(got, toFull(r))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			checkOrderFull(t, got)
			sortFull(got)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("records (-one reader +%d readers):\n%s", n, diff)
			}
			if overlaps.Load() != 0 {
				t.Fatalf("the sink was called by two readers at once %d times", overlaps.Load())
			}
			if want := int32(min(n, 4) - 1); lowered.Load() != want {
				t.Fatalf("%d loops run by Config.Lower, want %d (all but the caller's)", lowered.Load(), want)
			}
			if res.Records != int64(len(want)) || last.Records != res.Records || len(last.Partitions) != 4 {
				t.Fatalf("result %d records, last progress %d records over %d partitions; want %d over 4", res.Records, last.Records, len(last.Partitions), len(want))
			}
			for i, p := range last.Partitions {
				if p.Partition != int32(i) || p.State != StateDone || p.Position != p.End {
					t.Fatalf("last progress of partition %d: %+v", i, p)
				}
			}
		})
	}
}

func checkOrderFull(t *testing.T, rs []fullRec) {
	t.Helper()
	last := map[int32]int64{}
	for _, r := range rs {
		if o, ok := last[r.P]; ok && r.O <= o {
			t.Fatalf("partition %d: offset %d after %d", r.P, r.O, o)
		}
		last[r.P] = r.O
	}
}

// TestReadersShareMemory: N readers divide the prefetch queue and the
// batch bytes one would have.
func TestReadersShareMemory(t *testing.T) {
	for _, c := range []struct {
		props     map[string]string
		batch, n  int
		wantKiB   string
		wantBatch int
	}{
		{nil, 0, 2, "8192", 0},
		{map[string]string{PrefetchProperty: "32768"}, 4 << 20, 4, "8192", 1 << 20},
		{map[string]string{PrefetchProperty: "3"}, 5, 8, "1", 1},
	} {
		got := Config{Props: c.props, BatchBytes: c.batch, Readers: c.n}.shared()
		if got.Props[PrefetchProperty] != c.wantKiB || got.BatchBytes != c.wantBatch {
			t.Errorf("%v, batch %d, %d readers: prefetch %s KiB, batch %d; want %s, %d", c.props, c.batch, c.n, got.Props[PrefetchProperty], got.BatchBytes, c.wantKiB, c.wantBatch)
		}
		if c.props != nil && c.props[PrefetchProperty] == got.Props[PrefetchProperty] && c.n > 1 && c.wantKiB != c.props[PrefetchProperty] {
			t.Errorf("the caller's Props were changed")
		}
	}
}

// TestReadersFirstErrorWins: records removed under one reader fail the
// replay with that reader's error, naming its partition, not with the
// others' interruption.
func TestReadersFirstErrorWins(t *testing.T) {
	topic := newTopic(t, 2)
	var in []localkafka.Record
	for i := 0; i < 600; i++ {
		in = append(in, kv(int32(i%2), fmt.Sprintf("k%d", i), strings.Repeat("v", 100)))
	}
	if _, err := broker.ProduceEach(context.Background(), topic, in); err != nil {
		t.Fatal(err)
	}
	c := cfg(t, topic)
	c.Readers, c.BatchRecords = 2, 1
	c.Props = map[string]string{
		"fetch.max.bytes": "1024", "message.max.bytes": "1000", "max.partition.fetch.bytes": "1",
		"queued.min.messages": "1", "queued.max.messages.kbytes": "2", "fetch.wait.max.ms": "10",
	}
	deleted := false
	_, err := Run(context.Background(), c, func(b []fold.Record) error {
		if !deleted && b[0].Partition == 1 && b[0].Offset >= 10 {
			deleted = true
			return broker.DeleteRecords(context.Background(), topic, 1, 250)
		}
		return nil
	})
	var re *Error
	if !errors.Is(err, ErrRecordsRemoved) || !errors.As(err, &re) || re.Partition != 1 || !strings.Contains(err.Error(), "retained low is now 250") {
		t.Fatalf("err = %v, want records removed from partition 1 naming the low 250", err)
	}
}
