package main

// rebuild under broker faults, end to end: the exit code, the message, and
// the published table (the oracle's, or the previous one untouched). Each
// test proves its fault fired: a Fault's Hits, or a fetch parked by the
// broker in the middle of a partition while the fault was injected.

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

var faultSeq atomic.Int64

// faultTopic creates a topic on b named after the test, unique per run.
func faultTopic(t *testing.T, b *localkafka.Broker, partitions int32) string {
	t.Helper()
	topic := fmt.Sprintf("%s-%d-%d", strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()), faultSeq.Add(1), time.Now().UnixNano()%1_000_000)
	if err := b.CreateTopic(topic, partitions, nil); err != nil {
		t.Fatal(err)
	}
	return topic
}

// produceEachTo writes n generated records to b, one produce request each
// (see localkafka.ProduceEach), and returns them as produced.
func produceEachTo(t *testing.T, b *localkafka.Broker, topic string, parts []int32, n int) []rec {
	t.Helper()
	recs := genRecords(newRand(t), parts, n)
	offs, err := b.ProduceEach(context.Background(), topic, recs)
	if err != nil {
		t.Fatal(err)
	}
	return withOffsets(recs, offs, true)
}

// faultRebuildArgs rebuild topic from b into db with small fetches (so the
// read takes many fetches and a fault lands in its middle).
func faultRebuildArgs(b *localkafka.Broker, topic, db, stall string) []string {
	args := []string{"rebuild", "--brokers", b.Addr, "--topic", topic, "--db", db, "--stall-timeout", stall}
	keys := make([]string, 0, len(localkafka.SmallFetches))
	for k := range localkafka.SmallFetches {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-X", k+"="+localkafka.SmallFetches[k])
	}
	return args
}

// rebuildParked runs the rebuild in the background, waits until b has
// parked a fetch of topic above offset from, runs inject, releases the
// fetch and returns the rebuild's result.
func rebuildParked(t *testing.T, b *localkafka.Broker, topic string, from int64, args []string, inject func()) result {
	t.Helper()
	p := b.ParkFetch(topic, from)
	done := make(chan result, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		done <- kmz(t, args...)
	}()
	// On a failure below, the rebuild still ends before the test does
	// (it logs through t): release its fetch and wait for it.
	t.Cleanup(func() {
		p.Release()
		<-finished
	})
	select {
	case <-p.Seen:
	case r := <-done:
		t.Fatalf("the rebuild ended (exit %d) before a fetch in the middle of the read was parked", r.code)
	case <-time.After(30 * time.Second):
		t.Fatal("no fetch in the middle of the read was seen")
	}
	inject()
	p.Release()
	select {
	case r := <-done:
		return r
	case <-time.After(60 * time.Second):
		t.Fatal("the rebuild did not return")
		return result{}
	}
}

// TestRebuildMetadataLeaderNotAvailable: one LEADER_NOT_AVAILABLE on the
// topic's metadata is retried: exit 0 and the exact table.
func TestRebuildMetadataLeaderNotAvailable(t *testing.T) {
	localkafka.KfakeOnly(t)
	topic := faultTopic(t, broker, 3)
	recs := produce(t, topic, genRecords(newRand(t), []int32{0, 1, 2}, 50))
	h := broker.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: topic, Err: kerr.LeaderNotAvailable, Count: 1})
	defer h.Remove()
	db := dbPath(t)
	mustCLI(t, 0, rebuildArgs(topic, db)...)
	if n := h.Hits(); n != 1 {
		t.Fatalf("metadata fault fired %d times, want 1", n)
	}
	want, _, _ := oracle(recs, nil)
	checkTable(t, want, scanTable(t, db, topic))
}

// TestRebuildBrokerStoppedMidRead: the broker stops while a rebuild is in
// the middle of a partition: exit 5 "Kafka unavailable" naming the broker,
// no advice about transactions, and the table published before is
// unchanged.
func TestRebuildBrokerStoppedMidRead(t *testing.T) {
	localkafka.KfakeOnly(t)
	b, err := localkafka.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	topic := faultTopic(t, b, 2)
	first := produceEachTo(t, b, topic, []int32{0, 1}, 30)
	db := dbPath(t)
	mustCLI(t, 0, faultRebuildArgs(b, topic, db, "20s")...)
	want, read, _ := oracle(first, nil)
	checkTable(t, want, scanTable(t, db, topic))
	produceEachTo(t, b, topic, []int32{0, 1}, 40)

	r := rebuildParked(t, b, topic, 20, faultRebuildArgs(b, topic, db, "1500ms"), b.Close)
	if r.code != exitUnavailable {
		t.Fatalf("exit %d, want %d", r.code, exitUnavailable)
	}
	for _, s := range []string{"Kafka unavailable", "no broker of " + b.Addr + " answered for", "nothing published"} {
		if !strings.Contains(r.stderr, s) {
			t.Fatalf("stderr lacks %q:\n%s", s, r.stderr)
		}
	}
	msg := errorLine(t, r.stderr)
	for _, s := range []string{"-1001", "open transaction", "--end stable"} {
		if strings.Contains(msg, s) {
			t.Fatalf("the error mentions %q: %s", s, msg)
		}
	}
	checkTable(t, want, scanTable(t, db, topic))
	if tb := tablesJSON(t, db)[topic]; tb.Generation != 1 || tb.Records != read {
		t.Fatalf("tables: generation %d, %d records; want the first rebuild's generation 1 with %d", tb.Generation, tb.Records, read)
	}
}

// TestRebuildTopicDeletedMidRead: the topic is deleted while a rebuild is
// in the middle of a partition: exit 5 "topic deleted", the previous table
// unchanged.
func TestRebuildTopicDeletedMidRead(t *testing.T) {
	localkafka.KfakeOnly(t)
	topic := faultTopic(t, broker, 2)
	first := produceEachTo(t, broker, topic, []int32{0, 1}, 30)
	db := dbPath(t)
	mustCLI(t, 0, faultRebuildArgs(broker, topic, db, "20s")...)
	want, _, _ := oracle(first, nil)
	checkTable(t, want, scanTable(t, db, topic))
	produceEachTo(t, broker, topic, []int32{0, 1}, 40)

	r := rebuildParked(t, broker, topic, 20, faultRebuildArgs(broker, topic, db, "1500ms"), func() {
		if err := broker.Cluster.DeleteTopic(topic); err != nil {
			t.Error(err)
		}
	})
	if r.code != exitUnavailable {
		t.Fatalf("exit %d, want %d", r.code, exitUnavailable)
	}
	if !strings.Contains(r.stderr, "topic deleted") || strings.Contains(r.stderr, "stall-timeout") {
		t.Fatalf("stderr does not say the topic was deleted (or gives a stall hint):\n%s", r.stderr)
	}
	checkTable(t, want, scanTable(t, db, topic))
	if tb := tablesJSON(t, db)[topic]; tb.Generation != 1 {
		t.Fatalf("tables: generation %d, want the first rebuild's 1", tb.Generation)
	}
}

// TestRebuildPartitionsAdded: partitions added while a rebuild reads are
// left out: the table is the captured partitions' fold, a warning names the
// new partitions, and `tables` shows the partitions the table covers.
func TestRebuildPartitionsAdded(t *testing.T) {
	localkafka.KfakeOnly(t)
	topic := faultTopic(t, broker, 2)
	recs := produceEachTo(t, broker, topic, []int32{0, 1}, 40)
	db := dbPath(t)
	r := rebuildParked(t, broker, topic, 10, faultRebuildArgs(broker, topic, db, "20s"), func() {
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
		// Records the rebuild must not read.
		produce(t, topic, []localkafka.Record{
			{Partition: 2, Key: []byte("p2-new"), Value: []byte("x")},
			{Partition: 3, Key: []byte("p3-new"), Value: []byte("y")},
		})
	})
	if r.code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", r.code, r.stderr)
	}
	if n := len(broker.Cluster.PartitionInfos(topic)); n != 4 {
		t.Fatalf("the topic has %d partitions, want 4", n)
	}
	want, _, _ := oracle(recs, nil)
	checkTable(t, want, scanTable(t, db, topic))
	warned := false
	for _, l := range logLines(r.stderr) {
		if l["level"] == "warn" && strings.Contains(fmt.Sprint(l["message"]), "partitions 2-3 were added") {
			warned = true
		}
	}
	if !warned {
		t.Fatalf("no warning names the added partitions 2-3:\n%s", r.stderr)
	}
	tb := tablesJSON(t, db)[topic]
	if len(tb.Partitions) != 2 || tb.Partitions[0].Partition != 0 || tb.Partitions[1].Partition != 1 {
		t.Fatalf("tables: partitions %+v, want 0 and 1", tb.Partitions)
	}
	if tb.PartitionSet != "0-1" {
		t.Fatalf("tables: partition_set %q, want 0-1", tb.PartitionSet)
	}
	text := mustCLI(t, 0, "tables", "--db", db).stdout
	if !regexp.MustCompile(`(?m)^\s+partitions:\s+0-1 \(2\)$`).MatchString(text) {
		t.Fatalf("tables text does not show the partition set 0-1 (2):\n%s", text)
	}
}

// errorLine is the "kmaterialize: ..." error line and its "Try:" hint.
func errorLine(t *testing.T, stderr string) string {
	t.Helper()
	i := strings.Index(stderr, "\nkmaterialize: ")
	if i < 0 {
		t.Fatalf("no error line in stderr:\n%s", stderr)
	}
	return stderr[i+1:]
}

// TestRebuildBrokerRestartedMidRead: the broker restarts with its log
// (DataDir), on the same port, while a rebuild is in the middle of a
// partition. The rebuild either publishes exactly the oracle's table or
// exits 5 keeping the previous one; never anything else.
func TestRebuildBrokerRestartedMidRead(t *testing.T) {
	localkafka.KfakeOnly(t)
	dir := t.TempDir()
	b, err := localkafka.Start(kfake.DataDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	topic := faultTopic(t, b, 2)
	first := produceEachTo(t, b, topic, []int32{0, 1}, 30)
	db := dbPath(t)
	mustCLI(t, 0, faultRebuildArgs(b, topic, db, "20s")...)
	all := append(first, produceEachTo(t, b, topic, []int32{0, 1}, 40)...)
	port := b.Addr[strings.LastIndexByte(b.Addr, ':')+1:]

	r := rebuildParked(t, b, topic, 20, faultRebuildArgs(b, topic, db, "10s"), func() {
		b.Close()
		var p int
		if _, err := fmt.Sscan(port, &p); err != nil {
			t.Fatal(err)
		}
		if b, err = localkafka.Start(kfake.DataDir(dir), kfake.Ports(p)); err != nil {
			t.Fatal(err)
		}
	})
	switch r.code {
	case 0:
		want, read, _ := oracle(all, nil)
		checkTable(t, want, scanTable(t, db, topic))
		if tb := tablesJSON(t, db)[topic]; tb.Generation != 2 || tb.Records != read {
			t.Fatalf("tables: generation %d, %d records; want generation 2 with %d", tb.Generation, tb.Records, read)
		}
		t.Log("the rebuild completed across the restart")
	case exitUnavailable:
		want, _, _ := oracle(first, nil)
		checkTable(t, want, scanTable(t, db, topic))
		t.Log("the rebuild failed as unavailable; the previous table is kept")
	default:
		t.Fatalf("exit %d, want 0 or %d", r.code, exitUnavailable)
	}
}
