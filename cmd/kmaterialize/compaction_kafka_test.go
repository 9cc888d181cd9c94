package main

// End-to-end tests of `update` refusing a checkpoint it cannot continue
// (exit 4) that use only the broker's protocol fixtures, so that they run
// on kfake and on Apache Kafka alike: a tombstone removed by compaction
// (kfake's on demand, Kafka's log cleaner awaited: AwaitCompacted), and a
// topic recreated under its name (its ID from Metadata).

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// logRecs reads topic's partition 0 to its high watermark with an
// independent client and returns what the log holds.
func logRecs(t *testing.T, topic string, high int64) []rec {
	t.Helper()
	recs, err := broker.ReadCommitted(context.Background(), topic, map[int32]int64{0: high})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]rec, 0, len(recs[0]))
	for _, r := range recs[0] {
		out = append(out, rec{P: r.Partition, O: r.Offset, K: r.Key, V: r.Value, Committed: true})
	}
	return out
}

// TestUpdateRemovedTombstoneExit4: after a rebuild of a compacted topic
// (delete.retention.ms=1000), compaction removes the tombstone of k1 and
// k1's value (shown by an independent read): update exits 4 naming the
// retention and leaves the table as it was; --rebuild-if-needed makes it
// the fold of what the compacted log holds, which is the fold of every
// record produced.
func TestUpdateRemovedTombstoneExit4(t *testing.T) {
	topic := runName(t)
	broker.TestTopic(t, topic, 1, localkafka.CompactedConfig(time.Second))
	db := dbPath(t)
	const table = "config"
	all := produce(t, topic, []localkafka.Record{{Key: []byte("k1"), Value: []byte("a")}, {Key: []byte("k2"), Value: []byte("b")}})
	bin(t, 0, rebuildArgs(topic, db, "--table", table)...)
	tomb := produce(t, topic, []localkafka.Record{{Key: []byte("k1")}})
	all = append(all, tomb...)
	all = append(all, produce(t, topic, []localkafka.Record{{Key: []byte("k3"), Value: []byte("c")}})...)
	gone := []int64{all[0].O, tomb[0].O}
	c, err := broker.AwaitCompacted(context.Background(), topic, 0, gone...)
	if err != nil {
		t.Fatal(err)
	}
	log := logRecs(t, topic, c.High)
	for _, r := range log {
		if slices.Contains(gone, r.O) {
			t.Fatalf("offset %d is still in the log", r.O)
		}
	}
	t.Logf("compaction removed offsets %v after %v", gone, c.Gone)

	r := bin(t, 4, updateArgs(db, table)...)
	if !strings.Contains(r.stderr, "compacted") || !strings.Contains(r.stderr, "older than delete.retention.ms=1000") {
		t.Fatalf("refusal does not name the retention:\n%s", r.stderr)
	}
	checkTable(t, map[string]string{"k1": "a", "k2": "b"}, scanTable(t, db, table))
	bin(t, 0, updateArgs(db, table, "--rebuild-if-needed")...)
	want, _, _ := oracle(log, nil)
	checkTable(t, want, scanTable(t, db, table))
	if produced, _, _ := oracle(all, nil); !cmp.Equal(produced, want) {
		t.Fatalf("the compacted log folds unlike the records produced (-produced +log):\n%s", cmp.Diff(produced, want))
	}
}

// TestUpdateRecreatedTopicExit4: the table's topic is deleted and created
// again (awaited through Metadata: Kafka deletes asynchronously) and grows
// past the checkpoint, so only its ID tells: update exits 4 naming both
// IDs and the export is unchanged; --rebuild-if-needed publishes the new
// topic's fold.
func TestUpdateRecreatedTopicExit4(t *testing.T) {
	rng := newRand(t)
	topic := runName(t)
	broker.TestTopic(t, topic, 1, nil)
	db := dbPath(t)
	const table = "re"
	produce(t, topic, genRecords(rng, []int32{0}, 50))
	bin(t, 0, rebuildArgs(topic, db, "--table", table)...)
	end := tablesJSON(t, db)[table].Partitions[0].End

	ctx := context.Background()
	id := func() [16]byte {
		t.Helper()
		id, exists, err := broker.TopicID(ctx, topic)
		if err != nil || !exists {
			t.Fatalf("topic %s: exists %v, err %v", topic, exists, err)
		}
		return id
	}
	was := id()
	if err := broker.DeleteTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	if err := broker.CreateTopic(topic, 1, nil); err != nil {
		t.Fatal(err)
	}
	now := id()
	if was == now || now == ([16]byte{}) {
		t.Fatalf("topic ID %x, then %x: not recreated", was, now)
	}
	fresh := produce(t, topic, genRecords(rng, []int32{0}, 150))
	marks, err := broker.Marks(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if marks[0].High <= end {
		t.Fatalf("the new topic's high %d is not past the checkpoint %d", marks[0].High, end)
	}

	before := bin(t, 0, "export", "--db", db, "--table", table).stdout
	r := bin(t, 4, updateArgs(db, table)...)
	enc := func(b [16]byte) string { return base64.RawURLEncoding.EncodeToString(b[:]) }
	if want := fmt.Sprintf("topic %s was recreated: id %s, now %s", topic, enc(was), enc(now)); !strings.Contains(r.stderr, want) {
		t.Fatalf("refusal lacks %q:\n%s", want, r.stderr)
	}
	if after := bin(t, 0, "export", "--db", db, "--table", table).stdout; after != before {
		t.Fatalf("a refused update changed the export:\nbefore %s\nafter  %s", before, after)
	}
	bin(t, 0, updateArgs(db, table, "--rebuild-if-needed")...)
	want, _, _ := oracle(fresh, nil)
	checkTable(t, want, scanTable(t, db, table))
}
