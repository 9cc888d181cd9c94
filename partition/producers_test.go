package partition

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The partition each real producer chose, read from its delivery report,
// against Partition: librdkafka (through confluent-kafka-go) under each of
// its hashing partitioner settings, and franz-go's Java-compatible
// partitioners. The broker only stores what the producers chose; nothing
// here depends on which broker it is.

const (
	producedPartitions = 7
	producedKeys       = 10000
)

// producedKeySet is n distinct keys: text keys like an application's, binary
// keys of every length up to 64 (from a seeded generator: the seed is
// logged so a failure replays), keys with the high bytes that sign
// extension would break, and the empty key.
func producedKeySet(t *testing.T, n int) [][]byte {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("key seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	seen := map[string]bool{}
	var keys [][]byte
	add := func(k []byte) {
		if !seen[string(k)] && len(keys) < n {
			seen[string(k)] = true
			keys = append(keys, k)
		}
	}
	add([]byte{})
	for _, k := range []string{"\x80", "\xff", "\xff\xff\xff\xff", "\x80\x00\x00\x00\x80", "kafka", "acct-1"} {
		add([]byte(k))
	}
	for i := 0; len(keys) < n/2; i++ {
		add([]byte(fmt.Sprintf("acct-%d", i)))
	}
	for len(keys) < n {
		k := make([]byte, rng.IntN(65))
		for i := range k {
			k[i] = byte(rng.UintN(256))
		}
		add(k)
	}
	return keys
}

var topicSeq atomic.Int64

// producedTopic creates a topic of its own for this run of the test.
func producedTopic(t *testing.T) string {
	t.Helper()
	name := regexp.MustCompile(`[^a-zA-Z0-9._-]+`).ReplaceAllString(t.Name(), "-")
	topic := fmt.Sprintf("%s-%d-%d", name, time.Now().UnixNano(), topicSeq.Add(1))
	broker.TestTopic(t, topic, producedPartitions, nil)
	return topic
}

// checkChosen compares the partition each key was delivered to with
// Partition's. A null key and, under Consistent, an empty key have no
// partition of their own: the "_random" settings spread them. The plain
// settings (librdkafka's rd_kafka_topic.c skips the sticky partitioner for
// them) hash a null key as the empty key: murmur2 and fnv1a put it where
// Partition puts the empty key, consistent puts both on partition 0 (the
// CRC-32 of nothing).
func checkChosen(t *testing.T, p Partitioner, setting string, keys [][]byte, chosen []int32) {
	t.Helper()
	plain := setting == string(p)
	bad := 0
	for i, key := range keys {
		if key == nil && plain && p != Consistent {
			key = []byte{}
		}
		want, err := p.Partition(key, producedPartitions)
		if errors.Is(err, ErrNoPartition) && len(key) == 0 {
			if plain && chosen[i] != 0 {
				t.Errorf("%s: a null or empty key (%v) went to partition %d, want 0 (the CRC-32 of nothing)", setting, key == nil, chosen[i])
			}
			continue
		}
		if err != nil {
			t.Fatalf("Partition(%x): %v", key, err)
		}
		if chosen[i] != want {
			bad++
			if bad <= 10 {
				t.Errorf("%s: key %x went to partition %d, Partition says %d", setting, key, chosen[i], want)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d keys placed differently", setting, bad, len(keys))
	}
}

func TestPartitionMatchesLibrdkafka(t *testing.T) {
	keys := producedKeySet(t, producedKeys)
	for i := 0; i < 100; i++ {
		keys = append(keys, nil) // null keys: see checkChosen
	}
	for _, c := range []struct {
		setting string
		p       Partitioner
	}{
		{"murmur2_random", Murmur2},
		{"murmur2", Murmur2},
		{"consistent_random", Consistent},
		{"consistent", Consistent},
		{"fnv1a_random", FNV1a},
		{"fnv1a", FNV1a},
	} {
		t.Run(c.setting, func(t *testing.T) {
			topic := producedTopic(t)
			chosen := produceLibrdkafka(t, topic, c.setting, keys)
			checkChosen(t, c.p, c.setting, keys, chosen)
		})
	}
}

// produceLibrdkafka writes one record per key with confluent-kafka-go's
// producer set to partitioner setting, the partition left to it, and
// returns the partition each delivery report names.
func produceLibrdkafka(t *testing.T, topic, setting string, keys [][]byte) []int32 {
	t.Helper()
	pr, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers": broker.Addr,
		"partitioner":       setting,
		"linger.ms":         5,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	reports := make(chan kafka.Event, len(keys))
	for i, key := range keys {
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
			Key: key, Value: []byte("v"), Opaque: i}
		if err := pr.Produce(m, reports); err != nil {
			t.Fatalf("produce key %d: %v", i, err)
		}
	}
	chosen := make([]int32, len(keys))
	deadline := time.After(120 * time.Second)
	for left := len(keys); left > 0; left-- {
		select {
		case ev := <-reports:
			m, ok := ev.(*kafka.Message)
			if !ok {
				t.Fatalf("delivery report: %v", ev)
			}
			if m.TopicPartition.Error != nil {
				t.Fatalf("delivery of key %v: %v", m.Opaque, m.TopicPartition.Error)
			}
			chosen[m.Opaque.(int)] = m.TopicPartition.Partition
		case <-deadline:
			t.Fatalf("%d of %d deliveries not reported", left, len(keys))
		}
	}
	return chosen
}

func TestPartitionMatchesFranzGo(t *testing.T) {
	keys := producedKeySet(t, producedKeys)
	for _, c := range []struct {
		name string
		opt  []kgo.Opt
	}{
		{"StickyKeyPartitioner", []kgo.Opt{kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil))}},
		// franz-go's default (kgo's cfg: UniformBytesPartitioner(64KiB,
		// true, true, nil)), named here because the fixtures' client is
		// manual: with keys=true it hashes keys as the Java producer does.
		{"UniformBytesPartitioner", []kgo.Opt{kgo.RecordPartitioner(kgo.UniformBytesPartitioner(64<<10, true, true, nil))}},
	} {
		t.Run(c.name, func(t *testing.T) {
			topic := producedTopic(t)
			// After the fixtures' ManualPartitioner, which c.opt replaces.
			cl, err := broker.Client(append(c.opt, kgo.DefaultProduceTopic(topic))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			recs := make([]*kgo.Record, len(keys))
			for i, key := range keys {
				recs[i] = &kgo.Record{Key: key, Value: []byte("v")}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			chosen := make([]int32, len(keys))
			for i, r := range recs {
				chosen[i] = r.Partition
			}
			checkChosen(t, Murmur2, "franz-go "+c.name, keys, chosen)
		})
	}
}
