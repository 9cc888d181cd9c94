package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/partition"
)

// keyedRecord is a record a franz-go producer placed with its default
// (murmur2) partitioner, as the broker stored it.
type keyedRecord struct {
	key, value string
	tombstone  bool
	p          int32
	o          int64
}

// produceKeyed writes n records, record i of key and value gen(i) (a nil
// value: a tombstone), with franz-go's default partitioner
// (UniformBytesPartitioner: murmur2 of the key, as the Java producer),
// and returns them with where the broker put them.
func produceKeyed(t *testing.T, topic string, n int, gen func(i int) (string, []byte)) []keyedRecord {
	t.Helper()
	cl, err := broker.Client(kgo.RecordPartitioner(kgo.UniformBytesPartitioner(64<<10, true, true, nil)), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		k, v := gen(i)
		recs[i] = &kgo.Record{Key: []byte(k), Value: v}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out := make([]keyedRecord, n)
	for i, r := range recs {
		out[i] = keyedRecord{key: string(r.Key), value: string(r.Value), tombstone: r.Value == nil, p: r.Partition, o: r.Offset}
	}
	return out
}

// produceKeyedWith writes as produceKeyed does, with the producer whose
// partitioner is placer: franz-go's (murmur2, the Java producer's) or
// librdkafka's consistent_random (consistent) or fnv1a_random (fnv1a),
// through confluent-kafka-go, idempotent so that a key's records keep
// their order; the delivery reports say where each went.
func produceKeyedWith(t *testing.T, topic string, placer partition.Partitioner, n int, gen func(i int) (string, []byte)) []keyedRecord {
	t.Helper()
	if placer == partition.Murmur2 {
		return produceKeyed(t, topic, n, gen)
	}
	pr, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": broker.Addr, "partitioner": string(placer) + "_random",
		"linger.ms": 5, "enable.idempotence": true})
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	out := make([]keyedRecord, n)
	reports := make(chan kafka.Event, n)
	for i := range out {
		k, v := gen(i)
		out[i] = keyedRecord{key: k, value: string(v), tombstone: v == nil}
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Key: []byte(k), Value: v, Opaque: i}
		if err := pr.Produce(m, reports); err != nil {
			t.Fatalf("produce record %d: %v", i, err)
		}
	}
	deadline := time.After(60 * time.Second)
	for left := n; left > 0; left-- {
		select {
		case ev := <-reports:
			m, ok := ev.(*kafka.Message)
			if !ok || m.TopicPartition.Error != nil {
				t.Fatalf("delivery report: %v", ev)
			}
			i := m.Opaque.(int)
			out[i].p, out[i].o = m.TopicPartition.Partition, int64(m.TopicPartition.Offset)
		case <-deadline:
			t.Fatalf("%d of %d deliveries not reported", left, n)
		}
	}
	return out
}

// keyedOracle folds recs plainly: per partition in offset order, the last
// value of a key wins, a tombstone deletes it.
func keyedOracle(recs []keyedRecord) map[string]string {
	rs := slices.Clone(recs)
	sort.SliceStable(rs, func(i, j int) bool {
		if rs[i].p != rs[j].p {
			return rs[i].p < rs[j].p
		}
		return rs[i].o < rs[j].o
	})
	out := map[string]string{}
	for _, r := range rs {
		if r.tombstone {
			delete(out, r.key)
		} else {
			out[r.key] = r.value
		}
	}
	return out
}

// TestClusterShardsKill9: a topic of 4 partitions written by a murmur2
// producer, two shards (partitions 0-1 and 2-3, each daemon its own
// database) and a replica of the first, on 127.0.0.2, .3 and .4: every key
// is served with the oracle's value, a scan across shards is the oracle's
// table, a producer reads its writes through the cluster, the replica
// that serves is killed with SIGKILL and reads fail over; with the only
// daemon of 2-3 killed, its keys are unserved and tables --cluster shows
// the hole. Without a partitioner the same holds, the shards answering a
// key they lack 404 partial and the cluster asking each.
//
// The topic is written by the producers of each partitioner (franz-go's
// murmur2, librdkafka's consistent_random and fnv1a_random), the shards
// configured with it; the shards without a partitioner read a murmur2
// producer's topic.
func TestClusterShardsKill9(t *testing.T) {
	for _, p := range partition.All {
		t.Run(string(p), func(t *testing.T) { testClusterShards(t, p, p) })
	}
	t.Run("no-partitioner", func(t *testing.T) { testClusterShards(t, "", partition.Murmur2) })
}

func testClusterShards(t *testing.T, partitioner, placer partition.Partitioner) {
	rng := newRand(t)
	topic := newTopic(t, 4)
	// 120 keys, about one record in eight a tombstone.
	recs := produceKeyedWith(t, topic, placer, 600, func(i int) (string, []byte) {
		k := fmt.Sprintf("acct-%03d", rng.Intn(120))
		if rng.Intn(8) == 0 {
			return k, nil
		}
		return k, []byte(fmt.Sprintf("balance-%d-%d", i, rng.Intn(1_000_000)))
	})
	want := keyedOracle(recs)
	for _, r := range recs {
		if p, _ := placer.Partition([]byte(r.key), 4); p != r.p {
			t.Fatalf("the producer put %q on partition %d, %s says %d", r.key, r.p, placer, p)
		}
	}

	a, b := "    partitions: 0-1\n", "    partitions: 2-3\n"
	if partitioner != "" {
		a += "    partitioner: " + string(partitioner) + "\n"
		b += "    partitioner: " + string(partitioner) + "\n"
	}
	ds := []*clusterDaemon{
		startClusterDaemon(t, "shard-a", topic, "127.0.0.2", a),
		startClusterDaemon(t, "shard-a-replica", topic, "127.0.0.3", a),
		startClusterDaemon(t, "shard-b", topic, "127.0.0.4", b),
	}
	file := writeClusterFile(t, ds)

	clusterGetAll(t, file, want)
	checkTable(t, want, clusterScan(t, file))
	var st client.ClusterStatus
	r := mustCLI(t, 0, "tables", "--cluster", file, "--format", "json")
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatal(err)
	}
	if tb := st.Tables; len(tb) != 1 || !tb[0].FullyServed || tb[0].PartitionsOfTopic != 4 || tb[0].Partitioner != string(partitioner) ||
		len(tb[0].Partitions[0].Ready) != 2 || len(tb[0].Partitions[3].Ready) != 1 {
		t.Fatalf("tables --cluster: %s\nwant 4 partitions, 0-1 on two daemons, 2-3 on one, fully served", r.stdout)
	}

	daemons, err := client.LoadClusterFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.NewCluster(daemons, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	by := checkClusterReads(t, cl, want)
	if len(by) != 3 {
		t.Fatalf("reads answered by %v: want both shards, and both replicas of 0-1", by)
	}

	// Read your writes across shards: each record, wherever the producer
	// put it, is read back once its partition reached its offset.
	fresh := produceKeyedWith(t, topic, placer, 8, func(i int) (string, []byte) {
		return fmt.Sprintf("fresh-%d", i), []byte(fmt.Sprintf("written-%d-%d", i, rng.Intn(1000)))
	})
	recs = append(recs, fresh...)
	for _, f := range fresh {
		got, err := cl.Get(context.Background(), "balances", []byte(f.key), client.GetOptions{
			MinPositions: client.MinPositionsFromDelivery(client.Delivery{Partition: f.p, Offset: f.o}), Wait: 20 * time.Second})
		if err != nil {
			t.Fatalf("read of my write %s (partition %d offset %d): %v", f.key, f.p, f.o, err)
		}
		if string(got.Value.Value) != f.value || got.Positions[f.p] < f.o+1 {
			t.Fatalf("read of my write %s from %s at %v: %q, want %q at position %d", f.key, got.Daemon, got.Positions, got.Value.Value, f.value, f.o+1)
		}
	}
	want = keyedOracle(recs)

	// Kill -9 the replica of 0-1 that answers: its keys fail over.
	var k01 string
	for k := range want {
		if p, _ := placer.Partition([]byte(k), 4); p < 2 {
			k01 = k
		}
	}
	v, err := cl.Get(context.Background(), "balances", []byte(k01), client.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	victim := ds[slices.IndexFunc(ds, func(d *clusterDaemon) bool { return d.name == v.Daemon })]
	if err := victim.p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if code := victim.p.wait(t, 30*time.Second); code != -1 {
		t.Fatalf("killed %s: exit %d, want -1", victim.name, code)
	}
	t.Logf("killed %s with SIGKILL", victim.name)
	if by := checkClusterReads(t, cl, want); by[victim.name] != 0 || len(by) != 2 {
		t.Fatalf("after killing %s, reads answered by %v", victim.name, by)
	}
	clusterGetAll(t, file, want)
	checkTable(t, want, clusterScan(t, file))

	// Kill -9 the only daemon of 2-3: those keys are unserved (not "not
	// found"), the others still read, and the hole shows.
	shardB := ds[2]
	if err := shardB.p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	shardB.p.wait(t, 30*time.Second)
	for k, val := range want {
		p, _ := placer.Partition([]byte(k), 4)
		got, err := cl.Get(context.Background(), "balances", []byte(k), client.GetOptions{})
		switch {
		case p >= 2 && !errors.Is(err, client.ErrUnserved):
			t.Fatalf("Get %q (partition %d, its shard killed): %v, want ErrUnserved", k, p, err)
		case p < 2 && (err != nil || string(got.Value.Value) != val):
			t.Fatalf("Get %q: %q, %v; want %q", k, got.Value.Value, err, val)
		}
	}
	r = mustCLI(t, 0, "tables", "--cluster", file)
	if !strings.Contains(r.stdout, "holes:") || !strings.Contains(r.stdout, "2-3") || !strings.Contains(r.stdout, "NOT fully served") {
		t.Fatalf("tables --cluster with shard-b killed:\n%s\nwant holes 2-3", r.stdout)
	}
	mustCLI(t, exitError, "scan", "--cluster", file, "--table", "balances")

	// The topic grows: the shard left refuses key reads (409
	// repartitioned), and the cluster returns that answer as it is,
	// never asking elsewhere nor calling the key absent.
	adm, err := broker.Client()
	if err != nil {
		t.Fatal(err)
	}
	res, err := kadm.NewClient(adm).CreatePartitions(context.Background(), 2, topic)
	adm.Close()
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the shard refusing key reads once the topic grew", func() bool {
		_, err := cl.Get(context.Background(), "balances", []byte(k01), client.GetOptions{})
		if err != nil && !client.IsCode(err, api.CodeRepartitioned) {
			t.Fatalf("Get %q while the topic grows: %v, want its value or 409 repartitioned", k01, err)
		}
		return err != nil
	})
	r = mustCLI(t, exitConflict, "get", "--cluster", file, "--table", "balances", k01)
	if !strings.Contains(r.stderr, "repartitioned") || !strings.Contains(r.stderr, "rebuild") {
		t.Fatalf("get --cluster of a repartitioned shard: %s", r.stderr)
	}
	if r := mustCLI(t, 0, "tables", "--cluster", file); !strings.Contains(r.stdout, "repartitioned") {
		t.Fatalf("tables --cluster does not show the repartitioned shard:\n%s", r.stdout)
	}
}
