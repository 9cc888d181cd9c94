package localkafka

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Compaction on both brokers. kfake compacts when asked (Cluster.Compact):
// it keeps the last batch, drops superseded records, and drops a tombstone
// whose own timestamp is older than delete.retention.ms, all in one pass.
// Kafka's log cleaner runs on its own schedule and only over closed
// segments (never the active one); a tombstone survives the pass that
// first cleans its batch, which stamps the batch with a delete horizon
// (that pass's time plus delete.retention.ms), and is removed by a later
// pass after the horizon, which needs new dirty data to run. AwaitCompacted
// drives both the same way: it appends filler, compacts (kfake) or lets the
// cleaner run (Kafka), and reads the log until the offsets are gone.

// FillerKey is the key of the records AwaitCompacted appends: tombstones
// of a key no test writes a value for, so a latest-value fold of the log
// has no row for it (on a compacted topic every record needs a key).
var FillerKey = []byte("localkafka-compaction-filler")

// compactionTimeout bounds AwaitCompacted (issue 20: 60 s).
const compactionTimeout = 60 * time.Second

// fillerEvery is how often AwaitCompacted appends a filler record. With
// CompactedConfig's segment.ms below it, every filler rolls Kafka's active
// segment, so the records before it become cleanable and the cleaner has
// dirty data for another pass.
const fillerEvery = 200 * time.Millisecond

// CompactedConfig is the configuration of a compacted topic whose log
// Kafka's cleaner compacts within a second or so of a segment roll:
// segment.ms 100 (a record appended 100 ms after its segment's first one
// rolls the segment; segment.bytes cannot serve, its minimum is 1 MiB in
// Kafka 4.x), min.cleanable.dirty.ratio 0.01 (any dirty segment is worth a
// pass) and min.compaction.lag.ms 0, with the given delete.retention.ms.
// The broker's log.cleaner.backoff.ms (200 ms, internal/kafkatest) is how
// long the idle cleaner waits between looks. kfake takes the same
// configuration and reads only cleanup.policy and delete.retention.ms.
func CompactedConfig(deleteRetention time.Duration) map[string]string {
	return map[string]string{
		"cleanup.policy":            "compact",
		"delete.retention.ms":       strconv.FormatInt(deleteRetention.Milliseconds(), 10),
		"segment.ms":                "100",
		"min.cleanable.dirty.ratio": "0.01",
		"min.compaction.lag.ms":     "0",
	}
}

// Compacted is what AwaitCompacted saw.
type Compacted struct {
	// High is the partition's high watermark at the read that found the
	// offsets gone. The log below it changes no more unless the cleaner
	// removes more (superseded filler) or more is written.
	High int64
	// Gone is, for each awaited offset, how long after the call's start
	// a read first found it absent.
	Gone map[int64]time.Duration
	// Fillers are the offsets of the filler records appended.
	Fillers []int64
}

// AwaitCompacted waits until none of offsets is in topic's partition, as an
// independent read_committed read up to the high watermark shows, bounded
// at 60 s (and by ctx). Every 200 ms it appends one filler record (a
// tombstone of FillerKey) to the partition, then on kfake compacts
// (Cluster.Compact), and reads. On Kafka the filler is what lets the
// cleaner reach the offsets: it rolls the active segment (given
// CompactedConfig) and gives the cleaner the dirty data that starts the
// pass after a tombstone's delete horizon. The topic must be compacted
// (cleanup.policy=compact); the offsets are records the test wrote and
// compaction can remove (superseded values; tombstones, once
// delete.retention.ms allows).
func (b *Broker) AwaitCompacted(ctx context.Context, topic string, partition int32, offsets ...int64) (Compacted, error) {
	ctx, cancel := context.WithTimeout(ctx, compactionTimeout)
	defer cancel()
	cl, err := b.Client(kgo.DefaultProduceTopic(topic))
	if err != nil {
		return Compacted{}, err
	}
	defer cl.Close()
	start := time.Now()
	out := Compacted{Gone: map[int64]time.Duration{}}
	var lastErr error
	for {
		offs, err := produce(ctx, cl, topic, []Record{{Partition: partition, Key: FillerKey}})
		if err == nil {
			out.Fillers = append(out.Fillers, offs[0])
			if b.Cluster != nil {
				b.Cluster.Compact()
			}
			var recs []*kgo.Record
			var high int64
			if recs, high, err = b.readPartition(ctx, topic, partition); err == nil {
				held := map[int64]bool{}
				for _, r := range recs {
					held[r.Offset] = true
				}
				left := 0
				for _, o := range offsets {
					if held[o] {
						left++
					} else if _, seen := out.Gone[o]; !seen {
						out.Gone[o] = time.Since(start)
					}
				}
				if left == 0 {
					out.High = high
					return out, nil
				}
				err = fmt.Errorf("%d of offsets %v still in the log", left, offsets)
			}
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return out, fmt.Errorf("%s/%d: compaction did not remove offsets %v in %s (gone so far %v; last: %v): %w",
				topic, partition, offsets, time.Since(start).Round(time.Millisecond), out.Gone, lastErr, ctx.Err())
		case <-time.After(fillerEvery):
		}
	}
}

// readPartition reads partition of topic read_committed from its start to
// its high watermark (asked first) and returns the data records in offset
// order and that high watermark.
func (b *Broker) readPartition(ctx context.Context, topic string, partition int32) ([]*kgo.Record, int64, error) {
	marks, err := b.Marks(ctx, topic)
	if err != nil {
		return nil, 0, err
	}
	m, ok := marks[partition]
	if !ok {
		return nil, 0, fmt.Errorf("%s has no partition %d", topic, partition)
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	recs, err := b.ReadCommitted(rctx, topic, map[int32]int64{partition: m.High})
	if err != nil {
		return nil, 0, err
	}
	got := recs[partition]
	slices.SortFunc(got, func(x, y *kgo.Record) int { return cmp.Compare(x.Offset, y.Offset) })
	return got, m.High, nil
}
