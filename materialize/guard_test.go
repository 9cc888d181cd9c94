package materialize_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/exportdoc"
	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

var topicSeq atomic.Int64

// uniqueTopic creates a topic whose name is new on every run, so the tests
// repeat with -count, and deletes it (on a real Kafka) when the test ends.
func uniqueTopic(t *testing.T, partitions int32) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d-%d", strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()), time.Now().UnixNano(), topicSeq.Add(1))
	broker.TestTopic(t, name, partitions, nil)
	return name
}

// marksOf is each partition's marks of topic as the broker answers
// ListOffsets (on kfake and on Kafka alike).
func marksOf(t testing.TB, topic string) map[int32]localkafka.Marks {
	t.Helper()
	m, err := broker.Marks(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// topicID is topic's ID as metadata reports it; the topic must exist.
func topicID(t testing.TB, topic string) [16]byte {
	t.Helper()
	id, exists, err := broker.TopicID(context.Background(), topic)
	if err != nil || !exists {
		t.Fatalf("topic %s: exists %v, err %v", topic, exists, err)
	}
	return id
}

type guardRig struct {
	t     *testing.T
	db    *store.DB
	topic string
	log   zerolog.Logger
}

func newGuardRig(t *testing.T) *guardRig {
	db, err := store.Open(filepath.Join(t.TempDir(), "t.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &guardRig{t: t, db: db, topic: uniqueTopic(t, 2), log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)}
}

func (g *guardRig) rebuild(f fold.Folder, start replay.Start, allowEmpty bool) (materialize.Report, error) {
	return materialize.Rebuild(context.Background(), materialize.Options{
		DB: g.db, Fold: f, AllowEmpty: allowEmpty, Log: g.log,
		Replay: replay.Config{Brokers: broker.Addr, Topic: g.topic, Start: start, StallTimeout: 20 * time.Second, Log: g.log},
	})
}

func (g *guardRig) export() []byte {
	g.t.Helper()
	var b bytes.Buffer
	if err := exportdoc.Write(g.db, g.topic, &b, exportdoc.Options{}); err != nil {
		g.t.Fatal(err)
	}
	return b.Bytes()
}

// generations counts the generation buckets in the file: only published
// ones once a rebuild has returned.
func (g *guardRig) generations() int {
	g.t.Helper()
	n := 0
	if err := g.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(store.BucketGenerations).ForEachBucket(func([]byte) error { n++; return nil })
	}); err != nil {
		g.t.Fatal(err)
	}
	return n
}

// TestEmptyGuardLatest: a rebuild starting after the last record would
// replace a full table with an empty one: refused with ErrWouldEmpty, the
// table byte-for-byte unchanged and the new generation dropped; with
// AllowEmpty it publishes the empty table. A first rebuild into an empty
// table, and an empty rebuild over an empty table, are allowed.
func TestEmptyGuardLatest(t *testing.T) {
	g := newGuardRig(t)

	// A first rebuild of an empty topic: nothing to wipe.
	if rep, err := g.rebuild(fold.NewLatest(), replay.Start{}, false); err != nil || rep.Meta.Keys != 0 || !rep.Meta.Empty {
		t.Fatalf("first rebuild of an empty topic = %+v, %v; want an empty table published", rep.Meta, err)
	}

	recs := []localkafka.Record{
		{Partition: 0, Key: []byte("a"), Value: []byte("1")},
		{Partition: 1, Key: []byte("b"), Value: []byte("2")},
		{Partition: 0, Key: []byte("a"), Value: []byte("3")},
		{Partition: 1, Key: nil, Value: []byte("orphan")},
	}
	if _, err := broker.Produce(context.Background(), g.topic, recs); err != nil {
		t.Fatal(err)
	}
	rep, err := g.rebuild(fold.NewLatest(), replay.Start{}, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Meta.Empty || rep.Meta.Keys != 2 {
		t.Fatalf("meta %+v, want 2 keys, not empty", rep.Meta)
	}
	before := g.export()

	future := replay.Start{Timestamp: time.Now().Add(time.Hour)}
	_, err = g.rebuild(fold.NewLatest(), future, false)
	var ee *materialize.EmptyTableError
	if !errors.Is(err, materialize.ErrWouldEmpty) || !errors.As(err, &ee) || ee.OldKeys != 2 || ee.Table != g.topic {
		t.Fatalf("rebuild from a future timestamp = %v, want an EmptyTableError naming %s with 2 keys", err, g.topic)
	}
	if !strings.Contains(err.Error(), "--allow-empty") {
		t.Fatalf("message %q lacks the --allow-empty hint", err)
	}
	if after := g.export(); !bytes.Equal(before, after) {
		t.Fatalf("refused rebuild changed the table:\n%s\n---\n%s", before, after)
	}
	if n := g.generations(); n != 1 {
		t.Fatalf("%d generations after a refused rebuild, want only the published one", n)
	}

	// Offsets at the end are refused the same way: the guard is always on.
	_, err = g.rebuild(fold.NewLatest(), replay.Start{Offsets: map[int32]int64{0: 2, 1: 2}}, false)
	if !errors.Is(err, materialize.ErrWouldEmpty) {
		t.Fatalf("rebuild from the end offsets = %v, want ErrWouldEmpty", err)
	}

	rep, err = g.rebuild(fold.NewLatest(), future, true)
	if err != nil || rep.Meta.Keys != 0 || !rep.Meta.Empty {
		t.Fatalf("rebuild with AllowEmpty = %+v, %v; want an empty table", rep.Meta, err)
	}
	// Empty over empty: nothing to wipe.
	if _, err := g.rebuild(fold.NewLatest(), future, false); err != nil {
		t.Fatalf("empty rebuild over an empty table = %v", err)
	}
}

// TestEmptyGuardCount: a count table with a catalog always has rows; it is
// empty when no vote counted. Votes then none is refused; none over none
// is allowed.
func TestEmptyGuardCount(t *testing.T) {
	g := newGuardRig(t)
	newCount := func() fold.Folder {
		f, err := fold.NewCount(fold.CountConfig{Topic: g.topic, IdentityField: "id", GroupField: "g", Catalog: []string{"x", "y"}})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	rep, err := g.rebuild(newCount(), replay.Start{}, false)
	if err != nil || !rep.Meta.Empty || rep.Meta.Keys != 2 {
		t.Fatalf("first count rebuild without votes = %+v, %v; want 2 zero rows, empty", rep.Meta, err)
	}
	if _, err := g.rebuild(newCount(), replay.Start{}, false); err != nil {
		t.Fatalf("no votes over no votes = %v", err)
	}
	if _, err := broker.Produce(context.Background(), g.topic, []localkafka.Record{
		{Partition: 0, Value: []byte(`{"id":"v1","g":"x"}`)}, {Partition: 1, Value: []byte(`{"id":"v2","g":"x"}`)},
	}); err != nil {
		t.Fatal(err)
	}
	rep, err = g.rebuild(newCount(), replay.Start{}, false)
	if err != nil || rep.Meta.Empty {
		t.Fatalf("count rebuild with votes = %+v, %v", rep.Meta, err)
	}
	before := g.export()
	rows := map[string]string{}
	if err := g.db.Scan(g.topic, nil, 0, func(k, v []byte) error { rows[string(k)] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]string{"x": "2", "y": "0"}, rows); d != "" {
		t.Fatalf("rows (-want +got):\n%s", d)
	}
	_, err = g.rebuild(newCount(), replay.Start{Timestamp: time.Now().Add(time.Hour)}, false)
	if !errors.Is(err, materialize.ErrWouldEmpty) {
		t.Fatalf("count rebuild from a future timestamp = %v, want ErrWouldEmpty", err)
	}
	if !bytes.Equal(before, g.export()) {
		t.Fatal("refused rebuild changed the table")
	}
}
