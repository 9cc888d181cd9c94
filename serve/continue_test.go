package serve

// Daemon tests of the continuation check of a followed table: a compacted
// topic whose delete.retention.ms passed while the daemon was down (the
// tombstone written meanwhile compacted away), and a topic deleted and
// created again under the same name, while the daemon was stopped and
// while it follows. Without rebuild_if_needed the table is failed, named
// by /readyz, with exit code 4 in last_error and the old rows served;
// with it the daemon rebuilds and follows the new generation, which
// equals the oracle. The table is never served as following with a row
// the topic no longer holds.

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
)

// staleExitCode is testExitCode with the CLI's code for a stale checkpoint.
func staleExitCode(err error) int {
	if errors.Is(err, materialize.ErrStaleCheckpoint) {
		return 4
	}
	return testExitCode(err)
}

// awaitCompactedAway compacts until partition 0 of topic holds no record
// at off (kfake removes a tombstone once delete.retention.ms passed since
// its timestamp, and never compacts the last batch), read by an
// independent client. It is kfake-only (compaction on demand): Kafka's log
// cleaner needs the segment roll and delete-horizon procedure of its own
// test.
func awaitCompactedAway(t *testing.T, topic string, off int64) {
	t.Helper()
	localkafka.KfakeOnly(t)
	waitFor(t, fmt.Sprintf("compaction to remove offset %d", off), 60*time.Second, func() bool {
		broker.Cluster.Compact()
		high := broker.Cluster.PartitionInfo(topic, 0).HighWatermark
		recs, err := broker.ReadCommitted(context.Background(), topic, map[int32]int64{0: high})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs[0] {
			if r.Offset == off {
				return false
			}
		}
		return true
	})
}

// assertFailedStale checks a followed table stopped on a stale checkpoint:
// state failed, exit code 4 and each of want in last_error, /readyz 503
// naming it, and rows still old.
func assertFailedStale(t *testing.T, d *daemon, table string, old oracle, want ...string) {
	t.Helper()
	waitFor(t, "state failed", 60*time.Second, func() bool { return d.c.table(t, table).State == StateFailed })
	tj := d.c.table(t, table)
	if tj.LastError == nil || tj.LastError.ExitCode != 4 || tj.Follow == nil || tj.Follow.Running {
		t.Fatalf("last_error %+v, follow %+v: want the stale checkpoint, exit code 4, not running", tj.LastError, tj.Follow)
	}
	for _, s := range want {
		if !strings.Contains(tj.LastError.Error, s) {
			t.Fatalf("last_error %q lacks %q", tj.LastError.Error, s)
		}
	}
	if rows, _, _ := d.c.scan(t, table, 1000); fmt.Sprint(rows) != fmt.Sprint(old) {
		t.Fatalf("the old table is not served as it was: %v, oracle %v", rows, old)
	}
	r := d.c.get(t, "/readyz")
	if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), `"name":"`+table+`"`) ||
		!strings.Contains(string(r.body), "following stopped") || !strings.Contains(string(r.body), want[0]) {
		t.Fatalf("/readyz: %d %s", r.status, r.body)
	}
}

// TestFollowCompactedAfterDowntime: a followed table of a compacted topic
// (delete.retention.ms 5s) whose daemon was down longer than that: the
// tombstone of k1 written meanwhile was compacted away (shown first).
// Following from the checkpoint would keep k1 forever; instead the table
// is failed naming the retention, or, with rebuild_if_needed, rebuilt
// without k1 and followed.
func TestFollowCompactedAfterDowntime(t *testing.T) {
	localkafka.KfakeOnly(t) // awaitCompactedAway
	for _, rebuildIfNeeded := range []bool{false, true} {
		t.Run(fmt.Sprintf("rebuild_if_needed=%v", rebuildIfNeeded), func(t *testing.T) {
			topic := unique(t, "topic")
			broker.TestTopic(t, topic, 1, map[string]string{"cleanup.policy": "compact", "delete.retention.ms": "5000"})
			first := []localkafka.Record{{Key: []byte("k1"), Value: []byte("a")}, {Key: []byte("k2"), Value: []byte("b")}}
			produce(t, topic, first)
			cfg := baseConfig(t, followedTable("cfg", topic, FollowSettings{}))
			cfg.ExitCode = staleExitCode
			d := start(t, cfg)
			waitFor(t, "state following", 60*time.Second, func() bool { return d.c.table(t, "cfg").State == StateFollowing })
			d.stop(t)

			// Each in its own batch: compaction keeps the last batch.
			offs, err := broker.Produce(context.Background(), topic, []localkafka.Record{{Key: []byte("k1")}})
			if err != nil {
				t.Fatal(err)
			}
			later := []localkafka.Record{{Key: []byte("k3"), Value: []byte("c")}, {Key: []byte("k4"), Value: []byte("d")}}
			produce(t, topic, later[:1])
			produce(t, topic, later[1:])
			awaitCompactedAway(t, topic, offs[0])

			cfg2 := cfg
			cfg2.Socket = cfg.Socket + "2"
			cfg2.Tables = []Table{followedTable("cfg", topic, FollowSettings{RebuildIfNeeded: rebuildIfNeeded})}
			d2 := start(t, cfg2)
			old := latestOracle(oracle{}, first)
			if !rebuildIfNeeded {
				assertFailedStale(t, d2, "cfg", old, "delete.retention.ms=5000", "compacted")
				return
			}
			hw := highs(t, topic, 1)
			waitFor(t, "rebuilt and following", 60*time.Second, func() bool {
				tj := d2.c.table(t, "cfg")
				return tj.State == StateFollowing && caughtUp(tj, hw)
			})
			want := latestOracle(latestOracle(old, []localkafka.Record{{Key: []byte("k1")}}), later)
			if rows, _, _ := d2.c.scan(t, "cfg", 1000); fmt.Sprint(rows) != fmt.Sprint(want) {
				t.Fatalf("rows %v\noracle %v", rows, want)
			}
		})
	}
}

// TestFollowRecreatedTopicDaemon: the followed table's topic is deleted
// and created again (its topic ID changes, shown first) with more records
// than before, while the daemon is stopped or while it follows: the table
// is failed naming both IDs with the old rows served, or, with
// rebuild_if_needed, rebuilt as exactly the new topic's fold and followed.
func TestFollowRecreatedTopicDaemon(t *testing.T) {
	for _, while := range []string{"stopped", "following"} {
		for _, rebuildIfNeeded := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/rebuild_if_needed=%v", while, rebuildIfNeeded), func(t *testing.T) {
				topic := newTopic(t)
				first := records(1, 30, 10)
				produce(t, topic, first)
				cfg := baseConfig(t, followedTable("re", topic, FollowSettings{RebuildIfNeeded: rebuildIfNeeded}))
				cfg.ExitCode = staleExitCode
				d := start(t, cfg)
				waitFor(t, "following to the end", 60*time.Second, func() bool {
					tj := d.c.table(t, "re")
					return tj.State == StateFollowing && caughtUp(tj, highs(t, topic, 1))
				})
				if while == "stopped" {
					d.stop(t)
				}
				was, now := recreate(t, topic, 1)
				fresh := records(2, 70, 15)
				produce(t, topic, fresh)
				if while == "stopped" {
					cfg2 := cfg
					cfg2.Socket = cfg.Socket + "2"
					d = start(t, cfg2)
				}
				id := func(b [16]byte) string { return base64.RawURLEncoding.EncodeToString(b[:]) }
				if !rebuildIfNeeded {
					want := fmt.Sprintf("topic %s was recreated: id %s, now %s", topic, id(was), id(now))
					if while == "following" {
						// A running follower meets the new log either at a
						// refresh (the topic ID changed) or, when a fetch
						// error restarts it first, at its start check while
						// the new topic is still shorter than the checkpoint
						// (checkpoint past the high watermark). Both refuse
						// with exit 4 and say the topic was recreated; the
						// ID rule alone is asserted in the stopped case.
						want = "recreated"
					}
					assertFailedStale(t, d, "re", latestOracle(oracle{}, first), want)
					return
				}
				hw := highs(t, topic, 1)
				waitFor(t, "rebuilt and following the new topic", 60*time.Second, func() bool {
					tj := d.c.table(t, "re")
					return tj.State == StateFollowing && caughtUp(tj, hw)
				})
				want := latestOracle(oracle{}, fresh)
				if rows, _, _ := d.c.scan(t, "re", 1000); fmt.Sprint(rows) != fmt.Sprint(want) {
					t.Fatalf("rows %v\noracle (the new topic) %v", rows, want)
				}
			})
		}
	}
}

// lockedBuffer is a log sink the test reads while the daemon writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestFollowRebuildIfNeededNoLoop: with DescribeConfigs denied on the
// topic (the fault fires at every follower start), following is refused at
// its start; rebuild_if_needed rebuilds once, the new generation's
// follower is refused at its start too, and the daemon leaves the table
// failed instead of rebuilding in a loop: two successful rebuilds (the
// first build and one rebuild), two follower starts refused.
func TestFollowRebuildIfNeededNoLoop(t *testing.T) {
	localkafka.KfakeOnly(t) // DescribeConfigs denied by a kfake Fault
	topic := newTopic(t)
	produce(t, topic, records(1, 20, 5))
	h := broker.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.DescribeConfigs}, Resource: topic, Err: kerr.TopicAuthorizationFailed, Count: -1})
	defer h.Remove()
	var logs lockedBuffer
	cfg := baseConfig(t, followedTable("den", topic, FollowSettings{RebuildIfNeeded: true}))
	cfg.ExitCode = staleExitCode
	cfg.Log = zerolog.New(io.MultiWriter(zerolog.NewTestWriter(t), &logs)).Level(zerolog.WarnLevel)
	d := start(t, cfg)
	waitFor(t, "the daemon to give up rebuilding", 60*time.Second, func() bool {
		return strings.Contains(logs.String(), "not rebuilding in a loop")
	})
	if n := h.Hits(); n != 2 {
		t.Fatalf("the DescribeConfigs fault fired %d times, want 2 (two follower starts)", n)
	}
	if m := d.c.get(t, "/metrics"); !strings.Contains(string(m.body), `kmaterialize_rebuilds_total{outcome="success",table="den"} 2`) {
		t.Fatalf("want 2 successful rebuilds:\n%s", m.body)
	}
	assertFailedStale(t, d, "den", latestOracle(oracle{}, records(1, 20, 5)), "DescribeConfigs")
}
