package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// TestDescribe compares describe's output with what the broker itself
// reports (kfake's PartitionInfo), after DeleteRecords and with an open
// transaction holding one partition's LSO below its high watermark.
func TestDescribe(t *testing.T) {
	ctx := context.Background()
	topic := newTopic(t, 3)
	if _, err := broker.Produce(ctx, topic, []localkafka.Record{
		{Partition: 0, Key: []byte("a"), Value: []byte("1")}, {Partition: 0, Key: []byte("b"), Value: []byte("2")},
		{Partition: 1, Key: []byte("c"), Value: []byte("3")},
	}); err != nil {
		t.Fatal(err)
	}
	if err := broker.DeleteRecords(context.Background(), topic, 0, 1); err != nil {
		t.Fatal(err)
	}
	tx, err := broker.BeginTxn(ctx, topic, topic+"-open")
	if err != nil {
		t.Fatal(err)
	}
	defer tx.End(ctx, false)
	if _, err := tx.Produce(ctx, []localkafka.Record{{Partition: 1, Key: []byte("d"), Value: []byte("open")}}); err != nil {
		t.Fatal(err)
	}
	type row struct {
		Partition int32 `json:"partition"`
		Low       int64 `json:"low"`
		High      int64 `json:"high"`
		LSO       int64 `json:"lso"`
		Leader    int32 `json:"leader"`
	}
	var want []row
	marks := marksOf(t, topic)
	for p := int32(0); p < int32(len(marks)); p++ {
		m := marks[p]
		want = append(want, row{p, m.Low, m.High, m.LSO, m.Leader})
	}
	r := mustCLI(t, 0, "describe", "--brokers", broker.Addr, "--topic", topic, "--format", "json")
	var got struct {
		Topic      string `json:"topic"`
		Partitions []row  `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("describe --format json: %v\n%s", err, r.stdout)
	}
	if diff := cmp.Diff(want, got.Partitions); diff != "" {
		t.Fatalf("describe (-broker +describe):\n%s", diff)
	}
	if got.Partitions[1].LSO >= got.Partitions[1].High {
		t.Fatalf("partition 1 should show the open transaction: %+v", got.Partitions[1])
	}
	mustCLI(t, 0, "describe", "--brokers", broker.Addr, "--topic", topic)
	mustCLI(t, 5, "describe", "--brokers", broker.Addr, "--topic", "no-such-topic-describe")
}

// TestDescribeGroup: describe --group shows, per partition, the offsets the
// test committed for the group (through franz-go's admin client) and the
// lag behind the high watermark kfake reports (PartitionInfos), "null" for
// a partition without a commit; without --topic, every topic the group
// committed on; jsonl is the same rows; a group with no commit exits 6
// with a hint. It is read-only: the group's committed offsets (read back
// with franz-go) are unchanged and the group has no member afterwards.
func TestDescribeGroup(t *testing.T) {
	ctx := context.Background()
	topic, other := newTopic(t, 3), newTopic(t, 1)
	var recs []localkafka.Record
	for i := 0; i < 30; i++ {
		recs = append(recs, localkafka.Record{Partition: int32(i % 3), Key: []byte{byte('a' + i%5)}, Value: []byte("v")})
	}
	if _, err := broker.Produce(ctx, topic, recs); err != nil {
		t.Fatal(err)
	}
	if _, err := broker.Produce(ctx, other, []localkafka.Record{{Key: []byte("x"), Value: []byte("1")}, {Key: []byte("y"), Value: []byte("2")}}); err != nil {
		t.Fatal(err)
	}
	group := runName(t) + "-group"
	commits := map[int32]int64{0: 3, 1: 10}
	if err := broker.CommitGroupOffsets(ctx, group, topic, commits); err != nil {
		t.Fatal(err)
	}
	if err := broker.CommitGroupOffsets(ctx, group, other, map[int32]int64{0: 1}); err != nil {
		t.Fatal(err)
	}
	before, err := broker.GroupOffsets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Committed *int64 `json:"committed"`
		High      int64  `json:"high"`
		Lag       *int64 `json:"lag"`
	}
	expect := func(topic string, commits map[int32]int64) []row {
		var out []row
		marks := marksOf(t, topic)
		for p := int32(0); p < int32(len(marks)); p++ {
			r := row{Topic: topic, Partition: p, High: marks[p].High}
			if c, ok := commits[p]; ok {
				lag := marks[p].High - c
				r.Committed, r.Lag = &c, &lag
			}
			out = append(out, r)
		}
		return out
	}
	want := expect(topic, commits)
	var got struct {
		Group      string `json:"group"`
		Partitions []row  `json:"partitions"`
	}
	r := mustCLI(t, 0, "describe", "--brokers", broker.Addr, "--group", group, "--topic", topic, "--format", "json")
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("describe --group --format json: %v\n%s", err, r.stdout)
	}
	if diff := cmp.Diff(want, got.Partitions); diff != "" || got.Group != group {
		t.Fatalf("describe --group %s (-broker +describe):\n%s", got.Group, diff)
	}
	if want[2].Committed != nil || *want[1].Lag != 0 || *want[0].Lag == 0 {
		t.Fatalf("the scenario needs a partition without a commit, one with lag 0 and one behind: %+v", want)
	}
	// Every topic the group committed on, sorted by topic.
	all := append(expect(topic, commits), expect(other, map[int32]int64{0: 1})...)
	if topic > other {
		all = append(expect(other, map[int32]int64{0: 1}), expect(topic, commits)...)
	}
	r = mustCLI(t, 0, "describe", "--brokers", broker.Addr, "--group", group, "--format", "jsonl")
	var lines []row
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var x row
		if err := json.Unmarshal([]byte(l), &x); err != nil {
			t.Fatalf("jsonl line %q: %v", l, err)
		}
		lines = append(lines, x)
	}
	if diff := cmp.Diff(all, lines); diff != "" {
		t.Fatalf("describe --group without --topic (-broker +describe):\n%s", diff)
	}
	r = mustCLI(t, 0, "describe", "--brokers", broker.Addr, "--group", group, "--topic", topic)
	if !strings.Contains(r.stdout, "total lag: "+strconv.FormatInt(*want[0].Lag, 10)+"\n") {
		t.Fatalf("text output lacks the total lag %d:\n%s", *want[0].Lag, r.stdout)
	}
	r = mustCLI(t, exitNotFound, "describe", "--brokers", broker.Addr, "--group", group+"-none")
	if !strings.Contains(r.stderr, "\nTry: ") {
		t.Fatalf("describe of a group without commits: no hint\n%s", r.stderr)
	}
	mustCLI(t, exitUsage, "describe", "--brokers", broker.Addr)

	// Read-only: offsets unchanged, nobody joined.
	after, err := broker.GroupOffsets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before[group], after[group]); diff != "" {
		t.Fatalf("describe changed the group's offsets (-before +after):\n%s", diff)
	}
	cl, err := broker.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	dg, err := kadm.NewClient(cl).DescribeGroups(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := dg[group]; !ok || len(g.Members) != 0 || g.State != "Empty" {
		t.Fatalf("the group after describe: %+v, want state Empty and no member", g)
	}
}

// TestDescribeGroupTopicMissing: describe --group G --topic T where T does
// not exist is exit 5 naming T as missing, not exit 6 "no committed
// offsets" (GroupLag asks T's offsets before it says the group has none on
// it: Kafka's OffsetFetch also leaves out a topic the principal may not
// Describe, see TestACLsPerCommand/describe-group).
func TestDescribeGroupTopicMissing(t *testing.T) {
	group := runName(t)
	topic := newTopic(t, 1)
	if err := broker.CommitGroupOffsets(t.Context(), group, topic, map[int32]int64{0: 0}); err != nil {
		t.Fatal(err)
	}
	missing := runName(t) + "-missing"
	r := mustCLI(t, exitUnavailable, "describe", "--brokers", broker.Addr, "--group", group, "--topic", missing, "--stall-timeout", "5s")
	if !strings.Contains(r.stderr, `topic "`+missing+`" does not exist`) {
		t.Fatalf("describe --group with a missing --topic: stderr does not name %q as missing:\n%s", missing, r.stderr)
	}
	mustCLI(t, exitOK, "describe", "--brokers", broker.Addr, "--group", group, "--topic", topic)
}
