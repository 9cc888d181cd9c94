package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

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
	if err := broker.Cluster.DeleteRecords(topic, 0, 1); err != nil {
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
	for _, pi := range broker.Cluster.PartitionInfos(topic) {
		want = append(want, row{pi.Partition, pi.LogStartOffset, pi.HighWatermark, pi.LastStableOffset, pi.Leader})
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
