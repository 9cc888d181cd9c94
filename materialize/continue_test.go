package materialize_test

// Tests of the continuation check every continuation of a table passes
// (update, follow at its start and while it runs, a rebuild's catch-up):
// compaction that removed a tombstone the table never read, a topic
// deleted and created again under the same name, records removed above a
// rebuild's end before its catch-up read them. Each test first shows the
// condition happened (the tombstone's offset gone from the log, the topic
// ID changed, the retained low past the start), then the outcome against
// the oracle of the records it produced.

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/exportdoc"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// onTopic points r at topic (created by the test with its own config).
func (r *followRig) onTopic(topic string) *followRig {
	r.topic, r.spec.Topic = topic, topic
	return r
}

// compactedTopic creates a one-partition compacted topic with
// delete.retention.ms=ms, configured so that Kafka's log cleaner compacts
// it promptly (localkafka.CompactedConfig).
func compactedTopic(t *testing.T, ms string) string {
	t.Helper()
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("%s-%d-%d", strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()), time.Now().UnixNano(), topicSeq.Add(1))
	broker.TestTopic(t, name, 1, localkafka.CompactedConfig(time.Duration(n)*time.Millisecond))
	return name
}

// awaitGone waits until compaction has removed offs from topic's
// partition 0 (broker.AwaitCompacted: filler appended, kfake compacted on
// demand, Kafka's log cleaner awaited), then shows it with a read of its
// own, and returns the records the partition holds: the compacted log.
func awaitGone(t *testing.T, topic string, offs ...int64) []*kgo.Record {
	t.Helper()
	c, err := broker.AwaitCompacted(context.Background(), topic, 0, offs...)
	if err != nil {
		t.Fatal(err)
	}
	var first, last time.Duration = -1, 0
	for _, d := range c.Gone {
		if first < 0 || d < first {
			first = d
		}
		last = max(last, d)
	}
	t.Logf("compaction removed %d offsets: the first gone after %s, the last after %s (%d filler records)",
		len(offs), first.Round(time.Millisecond), last.Round(time.Millisecond), len(c.Fillers))
	recs, err := broker.ReadCommitted(context.Background(), topic, map[int32]int64{0: c.High})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs[0] {
		if slices.Contains(offs, rec.Offset) {
			t.Fatalf("offset %d of %s is still in the log", rec.Offset, topic)
		}
	}
	return recs[0]
}

// produceTombstoneAfter writes a tombstone for key and then two more
// records, each in its own batch (compaction keeps the last batch), and
// returns the tombstone's offset.
func (r *followRig) produceTombstoneAfter(key string) int64 {
	r.t.Helper()
	offs, err := broker.Produce(context.Background(), r.topic, []localkafka.Record{{Key: []byte(key)}})
	if err != nil {
		r.t.Fatal(err)
	}
	r.add([]localkafka.Record{{Key: []byte(key)}}, offs, true)
	r.produce([]localkafka.Record{{Key: []byte("k3"), Value: []byte("c")}})
	r.produce([]localkafka.Record{{Key: []byte("k4"), Value: []byte("d")}})
	return offs[0]
}

// awaitStop waits for the follower to end by itself and returns its error.
func (r *followRig) awaitStop() error {
	r.t.Helper()
	select {
	case err := <-r.done:
		r.cancel = nil
		return err
	case <-time.After(60 * time.Second):
		r.t.Fatal("the follower did not stop")
		return nil
	}
}

// staleFollow asserts err is a follower's *StaleCheckpointError whose
// message has each of want.
func staleFollow(t *testing.T, err error, op string, want ...string) {
	t.Helper()
	var se *materialize.StaleCheckpointError
	if !errors.As(err, &se) || !errors.Is(err, materialize.ErrStaleCheckpoint) || se.Op != op {
		t.Fatalf("error %v, want a *StaleCheckpointError of %s", err, op)
	}
	if materialize.FollowRetriable(err) {
		t.Fatalf("a stale checkpoint is retriable: %v", err)
	}
	for _, s := range want {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
}

// loadCheckpoint reads the table's checkpoint.
func loadCheckpoint(t *testing.T, db *store.DB, table string) checkpoint.Checkpoint {
	t.Helper()
	var cp checkpoint.Checkpoint
	if err := db.ReadTable(table, func(s *store.Snapshot) error {
		var err error
		cp, _, err = checkpoint.Load(s.Tx, table)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestFollowStaleAfterDowntime: a followed compacted table whose daemon
// was down longer than delete.retention.ms: the tombstone of k1 written
// meanwhile was compacted away, so following from the checkpoint would
// keep k1 forever. The follower refuses at its start, naming the
// retention, and the table is unchanged; the rebuild rebuild_if_needed
// runs has no k1 (the oracle over every record produced, and the fold of
// the compacted log). It runs on both brokers: on Kafka the log cleaner
// removes the tombstone (awaitGone).
func TestFollowStaleAfterDowntime(t *testing.T) {
	r := newFollowRig(t, 1, materialize.Spec{Name: "cfg"}).onTopic(compactedTopic(t, "1"))
	r.produce([]localkafka.Record{{Key: []byte("k1"), Value: []byte("a")}, {Key: []byte("k2"), Value: []byte("b")}})
	r.rebuild()
	log := awaitGone(t, r.topic, r.produceTombstoneAfter("k1"))
	before := r.rows()
	if before["k1"] != "a" {
		t.Fatalf("rows %v: want k1 before the tombstone", before)
	}
	r.follow()
	staleFollow(t, r.awaitStop(), materialize.OpFollow, "follow of table", "compacted", "older than delete.retention.ms=1")
	if got := r.rows(); !cmp.Equal(got, before) {
		t.Fatalf("table changed: %s", cmp.Diff(before, got))
	}
	r.rebuild()
	if got, want := r.rows(), r.latestOracle(); !cmp.Equal(got, want) || got["k1"] != "" {
		t.Fatalf("after the rebuild (-oracle +table):\n%s", cmp.Diff(want, got))
	}
	if got, want := r.rows(), foldLog(log); !cmp.Equal(got, want) {
		t.Fatalf("after the rebuild (-compacted log's fold +table):\n%s", cmp.Diff(want, got))
	}
}

// TestFollowImportedCompacted: an imported table's checkpoint has no
// capture time, so on a compacted topic (a day's retention) following it
// is refused (its age is unknown), as its update is.
func TestFollowImportedCompacted(t *testing.T) {
	r := newFollowRig(t, 1, materialize.Spec{Name: "cfg"}).onTopic(compactedTopic(t, "86400000"))
	r.produce([]localkafka.Record{{Key: []byte("k1"), Value: []byte("a")}, {Key: []byte("k2"), Value: []byte("b")}})
	r.rebuild()
	var doc bytes.Buffer
	if err := exportdoc.Write(r.db, "cfg", &doc, exportdoc.Options{}); err != nil {
		t.Fatal(err)
	}
	imp := newFollowRig(t, 1, materialize.Spec{Name: "cfg"}).onTopic(r.topic)
	if _, err := materialize.Import(context.Background(), materialize.ImportOptions{DB: imp.db, In: &doc, Source: "doc", Log: imp.log}); err != nil {
		t.Fatal(err)
	}
	if cp := loadCheckpoint(t, imp.db, "cfg"); !cp.CapturedAt.IsZero() {
		t.Fatalf("the imported checkpoint claims a capture time %s", cp.CapturedAt)
	}
	imp.follow()
	staleFollow(t, imp.awaitStop(), materialize.OpFollow, "age is unknown", "delete.retention.ms=86400000")
	if got, want := imp.rows(), r.rows(); !cmp.Equal(got, want) {
		t.Fatalf("imported table changed: %s", cmp.Diff(want, got))
	}
}

// TestFollowRolledBackToOldGeneration: a rollback to a kept generation
// older than delete.retention.ms brings back its checkpoint, from before a
// tombstone compaction has since removed: following it is refused, naming
// the retention, and the rolled-back rows stay as they were.
func TestFollowRolledBackToOldGeneration(t *testing.T) {
	r := newFollowRig(t, 1, materialize.Spec{Name: "cfg"}).onTopic(compactedTopic(t, "1"))
	rebuildKeep := func() materialize.Report {
		opts, err := r.spec.Options(r.db, broker.Addr, nil, r.log)
		if err != nil {
			t.Fatal(err)
		}
		opts.Keep = 1
		rep, err := materialize.Rebuild(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	r.produce([]localkafka.Record{{Key: []byte("k1"), Value: []byte("a")}, {Key: []byte("k2"), Value: []byte("b")}})
	old := rebuildKeep()
	oldRows := r.rows()
	awaitGone(t, r.topic, r.produceTombstoneAfter("k1"))
	rebuildKeep()
	if got, want := r.rows(), r.latestOracle(); !cmp.Equal(got, want) {
		t.Fatalf("the second rebuild (-oracle +table):\n%s", cmp.Diff(want, got))
	}
	if _, err := r.db.Rollback("cfg", old.Meta.Generation); err != nil {
		t.Fatal(err)
	}
	if got := r.rows(); !cmp.Equal(got, oldRows) || got["k1"] != "a" {
		t.Fatalf("after the rollback: %v, want %v", got, oldRows)
	}
	r.follow()
	staleFollow(t, r.awaitStop(), materialize.OpFollow, "older than delete.retention.ms=1",
		old.Checkpoint.CapturedAt.UTC().Format(time.RFC3339))
	if got := r.rows(); !cmp.Equal(got, oldRows) {
		t.Fatalf("table changed: %s", cmp.Diff(oldRows, got))
	}
}

// TestFollowBehindLongerThanRetention: while a compacted table follows,
// a caught-up follower on a quiet topic keeps its checkpoint's capture
// time current (it does not age past delete.retention.ms); held behind by
// an open transaction, its capture time stays where it was, and once that
// is older than the retention the running check (every CheckInterval,
// with the configuration read again) stops following.
func TestFollowBehindLongerThanRetention(t *testing.T) {
	const retention = 3 * time.Second
	r := newFollowRig(t, 1, materialize.Spec{Name: "cfg"}).onTopic(compactedTopic(t, fmt.Sprint(retention.Milliseconds())))
	r.checkInterval = 100 * time.Millisecond
	r.produce([]localkafka.Record{{Key: []byte("k1"), Value: []byte("a")}})
	rep := r.rebuild()
	r.follow()
	built := rep.Checkpoint.CapturedAt
	deadline := time.Now().Add(60 * time.Second)
	for cp := loadCheckpoint(t, r.db, "cfg"); !cp.CapturedAt.After(built.Add(retention)); cp = loadCheckpoint(t, r.db, "cfg") {
		select {
		case err := <-r.done:
			t.Fatalf("a caught-up follower stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("captured_at %s did not move past %s", cp.CapturedAt, built.Add(retention))
		}
		time.Sleep(20 * time.Millisecond)
	}

	ctx := context.Background()
	txn, err := broker.BeginTxn(ctx, r.topic, fmt.Sprintf("txn-%d", topicSeq.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.End(ctx, false)
	if _, err := txn.Produce(ctx, []localkafka.Record{{Key: []byte("t"), Value: []byte("open")}}); err != nil {
		t.Fatal(err)
	}
	r.produce([]localkafka.Record{{Key: []byte("k2"), Value: []byte("b")}})
	err = r.awaitStop()
	stopped := time.Now()
	staleFollow(t, err, materialize.OpFollow, "older than delete.retention.ms=3000")
	cp := loadCheckpoint(t, r.db, "cfg")
	if age := stopped.Sub(cp.CapturedAt); age <= retention {
		t.Fatalf("stopped with a checkpoint captured %s before, within the retention %s", age, retention)
	}
	if high := marksOf(t, r.topic)[0].High; cp.Partitions[0].End >= high {
		t.Fatalf("checkpoint end %d, high watermark %d: the follower was not behind", cp.Partitions[0].End, high)
	}
}

// recreate deletes topic and creates it again with parts partitions, and
// returns its IDs before and after, asserting they differ.
func recreate(t *testing.T, topic string, parts int32) (before, after [16]byte) {
	t.Helper()
	if broker.Real() {
		before = topicID(t, topic)
		// Kafka deletes asynchronously: the topic is awaited gone, then
		// created again. A follower can see it missing meanwhile (and,
		// see TestFollowRecreatedTopic, the new topic's records before
		// its next refresh); kfake deletes and creates in one instant.
		if err := broker.DeleteTopic(context.Background(), topic); err != nil {
			t.Fatal(err)
		}
		if err := broker.CreateTopic(topic, parts, nil); err != nil {
			t.Fatal(err)
		}
		after = topicID(t, topic)
	} else {
		before = broker.Cluster.TopicInfo(topic).TopicID
		if err := broker.Cluster.DeleteTopic(topic); err != nil {
			t.Fatal(err)
		}
		if err := broker.Cluster.CreateTopic(topic, parts, nil); err != nil {
			t.Fatal(err)
		}
		after = broker.Cluster.TopicInfo(topic).TopicID
	}
	if before == after || after == ([16]byte{}) {
		t.Fatalf("topic ID %x, then %x: not recreated", before, after)
	}
	return before, after
}

// recreateWithGap is recreate on kfake with gap between the delete and
// the create, and between the create and produce's records (nil: none):
// the window a real broker's asynchronous deletion opens, in which a
// follower can see the topic missing, or fetch the new topic's records at
// its old positions before its next refresh. The gap is the injected
// condition (a delay, not a wait for something).
func recreateWithGap(t *testing.T, topic string, gap time.Duration, produce []localkafka.Record) (before, after [16]byte) {
	t.Helper()
	before = broker.Cluster.TopicInfo(topic).TopicID
	if err := broker.Cluster.DeleteTopic(topic); err != nil {
		t.Fatal(err)
	}
	time.Sleep(gap)
	if err := broker.Cluster.CreateTopic(topic, 1, nil); err != nil {
		t.Fatal(err)
	}
	after = broker.Cluster.TopicInfo(topic).TopicID
	if before == after || after == ([16]byte{}) {
		t.Fatalf("topic ID %x, then %x: not recreated", before, after)
	}
	time.Sleep(gap)
	if _, err := broker.Produce(context.Background(), topic, produce); err != nil {
		t.Fatal(err)
	}
	return before, after
}

// TestFollowRefusesRecreatedTopicRecords: a topic followed is deleted and
// created again with more records than before, in one instant and with a
// gap between the delete, the create and the records: the follower either
// refuses naming both topic IDs, or stops on the deleted topic; in every
// case the table's rows are the old topic's records' fold (the oracle),
// never one of the new topic's, though the new topic's records at and past
// the follower's position were fetchable before its next refresh.
func TestFollowRefusesRecreatedTopicRecords(t *testing.T) {
	for _, c := range []struct {
		name string
		gap  time.Duration
		// started: the recreate waits for the follower's first
		// refresh (a running reader); otherwise it may meet the
		// follower's start (its marks, ID and configuration read
		// across the recreate).
		started bool
	}{
		{"instant", 0, true},
		{"with a gap", 20 * time.Millisecond, true},
		{"instant at the start", 0, false},
		{"with a gap at the start", 20 * time.Millisecond, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			rng := testRand(t)
			r := newFollowRig(t, 1, materialize.Spec{Name: "re"})
			r.produce(randomRecords(rng, 1, 30, "a"))
			r.rebuild()
			r.follow()
			r.awaitEnds(r.highs(1))
			// Following: past its start's checks (its first refresh came
			// after them), so the recreate happens under a running reader.
			for deadline := time.Now().Add(60 * time.Second); c.started && !r.status.Snapshot().Refreshed; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the follower did not refresh its live marks")
				}
			}
			oracle := r.latestOracle()
			if got := r.rows(); !cmp.Equal(got, oracle) {
				t.Fatalf("before: (-oracle +table):\n%s", cmp.Diff(oracle, got))
			}
			var was, now [16]byte
			if broker.Real() {
				// Kafka's deletion is asynchronous: the gap is its own.
				was, now = recreate(t, r.topic, 1)
				if _, err := broker.Produce(context.Background(), r.topic, randomRecords(rng, 1, 60, "b")); err != nil {
					t.Fatal(err)
				}
			} else {
				was, now = recreateWithGap(t, r.topic, c.gap, randomRecords(rng, 1, 60, "b"))
			}
			if id := topicID(t, r.topic); id != now || id == was {
				t.Fatalf("topic ID %x after the recreate, want %x (was %x)", id, now, was)
			}
			err := r.awaitStop()
			var se *materialize.StaleCheckpointError
			switch {
			case errors.As(err, &se):
				staleFollow(t, err, materialize.OpFollow,
					fmt.Sprintf("topic %s was recreated: id %s, now %s", r.topic, idString(was), idString(now)))
			case errors.Is(err, replay.ErrTopicNotFound):
			default:
				t.Fatalf("follower stopped with %v: want the recreation named, or the topic deleted", err)
			}
			if got := r.rows(); !cmp.Equal(got, oracle) {
				t.Fatalf("the table took records of the new topic (-old topic's oracle +table):\n%s", cmp.Diff(oracle, got))
			}
		})
	}
}

// idString is an ID as Kafka's tools (and the error messages) write it.
func idString(id [16]byte) string { return base64.RawURLEncoding.EncodeToString(id[:]) }

// TestFollowRecreatedTopic: a followed table whose topic was deleted and
// created again with more records than before, while it was not followed,
// and while it follows: the checkpoint records the topic's ID, and the
// follower refuses (at its start) or stops (at its next metadata refresh)
// naming both IDs; the table never holds a record of the new topic.
func TestFollowRecreatedTopic(t *testing.T) {
	for _, while := range []string{"stopped", "following"} {
		t.Run(while, func(t *testing.T) {
			rng := testRand(t)
			r := newFollowRig(t, 1, materialize.Spec{Name: "re"})
			r.produce(randomRecords(rng, 1, 30, "a"))
			r.rebuild()
			if while == "following" {
				r.follow()
				r.awaitEnds(r.highs(1))
			}
			if cp, id := loadCheckpoint(t, r.db, "re"), topicID(t, r.topic); cp.TopicID != id {
				t.Fatalf("checkpoint topic ID %x, the topic's %x", cp.TopicID, id)
			}
			before := r.rows()
			was, now := recreate(t, r.topic, 1)
			if _, err := broker.Produce(context.Background(), r.topic, randomRecords(rng, 1, 60, "b")); err != nil {
				t.Fatal(err)
			}
			if while == "stopped" {
				r.follow()
			}
			err := r.awaitStop()
			// A follower that looked in the window between the delete and
			// the create found no topic, and stops with that (its table
			// unchanged). Following again then meets the new topic.
			if while == "following" && errors.Is(err, replay.ErrTopicNotFound) {
				if !strings.Contains(err.Error(), r.topic) {
					t.Fatalf("the deleted topic's error does not name it: %v", err)
				}
				if got := r.rows(); !cmp.Equal(got, before) {
					t.Fatalf("the table changed when its topic was deleted: %s", cmp.Diff(before, got))
				}
				t.Logf("the follower met the deleted topic (%v): following again", err)
				r.follow()
				err = r.awaitStop()
			}
			staleFollow(t, err, materialize.OpFollow,
				fmt.Sprintf("topic %s was recreated: id %s, now %s", r.topic, idString(was), idString(now)))
			if got := r.rows(); !cmp.Equal(got, before) {
				t.Fatalf("the table took records of the new topic: %s", cmp.Diff(before, got))
			}
		})
	}
}

// TestUpdateRecreatedTopic: the table's topic is deleted and created again
// (its ID changes, shown first) and grows past the checkpoint, so only the
// topic ID tells: the update is refused (a *StaleCheckpointError, exit 4)
// naming both IDs and the table is unchanged; with RebuildIfNeeded the
// table is the fold of the new topic's records only.
func TestUpdateRecreatedTopic(t *testing.T) {
	rng := testRand(t)
	r := newFollowRig(t, 1, materialize.Spec{Name: "re"})
	r.produce(randomRecords(rng, 1, 30, "a"))
	r.rebuild()
	before := r.rows()
	cpEnd := loadCheckpoint(t, r.db, "re").Partitions[0].End
	was, now := recreate(t, r.topic, 1)
	if cp := loadCheckpoint(t, r.db, "re"); cp.TopicID != was {
		t.Fatalf("checkpoint topic ID %x, the deleted topic's %x", cp.TopicID, was)
	}
	fresh := randomRecords(rng, 1, 60, "b")
	if _, err := broker.Produce(context.Background(), r.topic, fresh); err != nil {
		t.Fatal(err)
	}
	if high := marksOf(t, r.topic)[0].High; high <= cpEnd {
		t.Fatalf("the new topic's high watermark %d is not past the checkpoint %d", high, cpEnd)
	}
	update := func(rebuild bool) (materialize.Report, error) {
		return materialize.Update(context.Background(), materialize.UpdateOptions{
			DB: r.db, Table: "re", Brokers: broker.Addr, Log: r.log, RebuildIfNeeded: rebuild})
	}
	_, err := update(false)
	staleFollow(t, err, materialize.OpUpdate,
		fmt.Sprintf("topic %s was recreated: id %s, now %s", r.topic, idString(was), idString(now)))
	if got := r.rows(); !cmp.Equal(got, before) {
		t.Fatalf("a refused update changed the table: %s", cmp.Diff(before, got))
	}
	rep, err := update(true)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, rec := range fresh {
		switch {
		case len(rec.Key) == 0:
		case rec.Value == nil:
			delete(want, string(rec.Key))
		default:
			want[string(rec.Key)] = string(rec.Value)
		}
	}
	if got := r.rows(); rep.Mode != materialize.ModeRebuilt || !cmp.Equal(got, want) {
		t.Fatalf("mode %q; after the rebuild (-new topic's fold +table):\n%s", rep.Mode, cmp.Diff(want, got))
	}
	if cp := loadCheckpoint(t, r.db, "re"); cp.TopicID != now {
		t.Fatalf("the rebuilt checkpoint's topic ID %x, want the new topic's %x", cp.TopicID, now)
	}
}

// TestTopicIDRecordedAtNextPublish: a checkpoint without a topic ID (an
// older build's update drops it) gets the topic's at its next publish, by
// an update and by a follower's apply.
func TestTopicIDRecordedAtNextPublish(t *testing.T) {
	r := newFollowRig(t, 1, materialize.Spec{Name: "ids"})
	r.produce([]localkafka.Record{{Key: []byte("k1"), Value: []byte("a")}})
	r.rebuild()
	id := topicID(t, r.topic)
	forget := func() {
		t.Helper()
		cp := loadCheckpoint(t, r.db, "ids")
		cp.TopicID = [16]byte{}
		if err := r.db.Bolt().Update(func(tx *bolt.Tx) error { return checkpoint.Save(tx, "ids", cp) }); err != nil {
			t.Fatal(err)
		}
		if got := loadCheckpoint(t, r.db, "ids").TopicID; got != ([16]byte{}) {
			t.Fatalf("topic ID %x still saved", got)
		}
	}
	forget()
	r.produce([]localkafka.Record{{Key: []byte("k2"), Value: []byte("b")}})
	if _, err := materialize.Update(context.Background(), materialize.UpdateOptions{DB: r.db, Table: "ids", Brokers: broker.Addr, Log: r.log}); err != nil {
		t.Fatal(err)
	}
	if got := loadCheckpoint(t, r.db, "ids").TopicID; got != id {
		t.Fatalf("after the update: topic ID %x, want %x", got, id)
	}
	forget()
	r.follow()
	r.produce([]localkafka.Record{{Key: []byte("k3"), Value: []byte("c")}})
	r.awaitEnds(r.highs(1))
	if got := loadCheckpoint(t, r.db, "ids").TopicID; got != id {
		t.Fatalf("after following: topic ID %x, want %x", got, id)
	}
	if got, want := r.rows(), r.latestOracle(); !cmp.Equal(got, want) {
		t.Fatalf("(-oracle +table):\n%s", cmp.Diff(want, got))
	}
}

// TestCatchUpRefusesRemovedRecords: records above a rebuild's end that
// the follower had applied are deleted (DeleteRecords, the retained low
// past the rebuild's end) before the rebuild's catch-up reads them: the
// catch-up refuses (a stale checkpoint matching ErrRecordsRemoved, exit
// 4) instead of starting at the low, and nothing is published.
func TestCatchUpRefusesRemovedRecords(t *testing.T) {
	rng := testRand(t)
	r := newFollowRig(t, 1, materialize.Spec{Name: "cu"})
	r.produce(randomRecords(rng, 1, 50, "a"))
	first := r.rebuild()
	before := r.rows()
	r.produce(randomRecords(rng, 1, 20, "b"))
	opts, err := r.spec.Options(r.db, broker.Addr, nil, r.log)
	if err != nil {
		t.Fatal(err)
	}
	var end, low int64
	opts.CatchUp = func(ctx context.Context) (map[int32]int64, error) {
		end = r.highs(1)[0]
		r.produce(randomRecords(rng, 1, 30, "c"))
		low = end + 10
		if err := broker.DeleteRecords(context.Background(), r.topic, 0, low); err != nil {
			return nil, err
		}
		if got := marksOf(t, r.topic)[0].Low; got != low {
			t.Errorf("log start %d after DeleteRecords to %d", got, low)
		}
		return r.highs(1), nil
	}
	_, err = materialize.Rebuild(context.Background(), opts)
	staleFollow(t, err, materialize.OpCatchUp, fmt.Sprintf("partition 0: checkpoint %d is below the retained low %d", end, low))
	if !errors.Is(err, replay.ErrRecordsRemoved) {
		t.Fatalf("%v: want ErrRecordsRemoved", err)
	}
	m, merr := r.db.Table("cu")
	if merr != nil || m.Generation != first.Meta.Generation {
		t.Fatalf("table %+v (%v): want generation %d still published", m, merr, first.Meta.Generation)
	}
	if got := r.rows(); !cmp.Equal(got, before) {
		t.Fatalf("table changed: %s", cmp.Diff(before, got))
	}
}

// TestCatchUpRefusesRecreatedTopic: the topic is deleted and created again
// (its ID changes, shown first) while a followed table rebuilds, and grows
// past the rebuild's end: the catch-up refuses, naming both IDs, and
// nothing is published.
func TestCatchUpRefusesRecreatedTopic(t *testing.T) {
	rng := testRand(t)
	r := newFollowRig(t, 1, materialize.Spec{Name: "cu"})
	r.produce(randomRecords(rng, 1, 40, "a"))
	first := r.rebuild()
	before := r.rows()
	opts, err := r.spec.Options(r.db, broker.Addr, nil, r.log)
	if err != nil {
		t.Fatal(err)
	}
	var was, now [16]byte
	opts.CatchUp = func(ctx context.Context) (map[int32]int64, error) {
		was, now = recreate(t, r.topic, 1)
		if _, err := broker.Produce(ctx, r.topic, randomRecords(rng, 1, 80, "b")); err != nil {
			return nil, err
		}
		return r.highs(1), nil
	}
	_, err = materialize.Rebuild(context.Background(), opts)
	staleFollow(t, err, materialize.OpCatchUp, fmt.Sprintf("topic %s was recreated: id %s, now %s", r.topic, idString(was), idString(now)))
	if m, merr := r.db.Table("cu"); merr != nil || m.Generation != first.Meta.Generation {
		t.Fatalf("table %+v (%v): want generation %d still published", m, merr, first.Meta.Generation)
	}
	if got := r.rows(); !cmp.Equal(got, before) {
		t.Fatalf("table changed: %s", cmp.Diff(before, got))
	}
}
