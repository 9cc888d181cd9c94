package localkafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// The fixtures below speak the Kafka protocol (kadm) on both brokers, so a
// test reads the same answers from kfake and from Apache Kafka.

// adminTimeout bounds one fixture's admin work, including the waits for
// Kafka's asynchronous topic creation.
const adminTimeout = 60 * time.Second

func (b *Broker) admin() (*kadm.Client, func(), error) {
	cl, err := b.Client()
	if err != nil {
		return nil, nil, err
	}
	return kadm.NewClient(cl), cl.Close, nil
}

// CreateTopic creates a topic with n partitions (one replica) and waits
// until metadata shows every partition with a leader: Kafka creates topics
// and elects their leaders after CreateTopics returns.
func (b *Broker) CreateTopic(topic string, partitions int32, configs map[string]string) error {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	adm, done, err := b.admin()
	if err != nil {
		return err
	}
	defer done()
	cfg := map[string]*string{}
	for k, v := range configs {
		cfg[k] = &v
	}
	res, err := adm.CreateTopic(ctx, partitions, 1, cfg, topic)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return b.awaitLeaders(ctx, adm, topic, partitions)
}

// awaitLeaders polls metadata until topic has n partitions, each with a
// leader.
func (b *Broker) awaitLeaders(ctx context.Context, adm *kadm.Client, topic string, n int32) error {
	var last string
	for {
		md, err := adm.Metadata(ctx, topic)
		if err == nil {
			td, ok := md.Topics[topic]
			switch {
			case !ok:
				last = "not in metadata"
			case td.Err != nil:
				last = td.Err.Error()
			case int32(len(td.Partitions)) != n:
				last = fmt.Sprintf("%d partitions of %d", len(td.Partitions), n)
			default:
				last = ""
				for _, p := range td.Partitions {
					if p.Err != nil || p.Leader < 0 {
						last = fmt.Sprintf("partition %d: leader %d, error %v", p.Partition, p.Leader, p.Err)
					}
				}
				if last == "" {
					return nil
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s: no leader for every partition (%s): %w", topic, last, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TB is what the topic fixtures need of a test.
type TB interface {
	Helper()
	Cleanup(func())
	Fatal(args ...any)
	Errorf(format string, args ...any)
}

// TestTopic creates topic (see CreateTopic) and, on a real Kafka, deletes
// it when the test ends: Kafka keeps topics across runs, while a kfake's go
// with it (and a test may have stopped its own kfake by then). Failing to
// create it fails the test.
func (b *Broker) TestTopic(t TB, topic string, partitions int32, configs map[string]string) {
	t.Helper()
	if err := b.CreateTopic(topic, partitions, configs); err != nil {
		t.Fatal(err)
	}
	if !b.Real() {
		return
	}
	t.Cleanup(func() {
		if err := b.DeleteTopic(context.Background(), topic); err != nil {
			t.Errorf("clean up: %v", err)
		}
	})
}

// DeleteTopic deletes topic and waits until metadata no longer lists it
// (Kafka deletes asynchronously; a topic created again under the name
// before that fails with TOPIC_ALREADY_EXISTS). A topic that is already
// gone is no error.
func (b *Broker) DeleteTopic(ctx context.Context, topic string) error {
	adm, done, err := b.admin()
	if err != nil {
		return err
	}
	defer done()
	res, err := adm.DeleteTopic(ctx, topic)
	if err == nil {
		err = res.Err
	}
	if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("delete topic %s: %w", topic, err)
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	for {
		_, exists, err := b.TopicID(ctx, topic)
		if err == nil && !exists {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("delete topic %s: still listed (last error %v): %w", topic, err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// DeleteRecords deletes partition's records below offset (DeleteRecords:
// the retained low becomes offset).
func (b *Broker) DeleteRecords(ctx context.Context, topic string, partition int32, offset int64) error {
	adm, done, err := b.admin()
	if err != nil {
		return err
	}
	defer done()
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: topic, Partition: partition, At: offset, LeaderEpoch: -1})
	res, err := adm.DeleteRecords(ctx, os)
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		return fmt.Errorf("delete records of %s/%d below %d: %w", topic, partition, offset, err)
	}
	return nil
}

// Marks are one partition's offsets as the broker answers ListOffsets and
// Metadata.
type Marks struct {
	Low    int64 // earliest retained offset
	High   int64 // high watermark (latest, read_uncommitted)
	LSO    int64 // last stable offset (latest, read_committed)
	Leader int32 // leader's node id
}

// Marks returns every partition's marks of topic.
func (b *Broker) Marks(ctx context.Context, topic string) (map[int32]Marks, error) {
	adm, done, err := b.admin()
	if err != nil {
		return nil, err
	}
	defer done()
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		return nil, fmt.Errorf("metadata of %s: %v", topic, td.Err)
	}
	out := map[int32]Marks{}
	for _, p := range td.Partitions {
		out[p.Partition] = Marks{Leader: p.Leader}
	}
	for _, q := range []struct {
		list func(context.Context, ...string) (kadm.ListedOffsets, error)
		set  func(*Marks, int64)
	}{
		{adm.ListStartOffsets, func(m *Marks, o int64) { m.Low = o }},
		{adm.ListEndOffsets, func(m *Marks, o int64) { m.High = o }},
		{adm.ListCommittedOffsets, func(m *Marks, o int64) { m.LSO = o }},
	} {
		lo, err := q.list(ctx, topic)
		if err == nil {
			err = lo.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("list offsets of %s: %w", topic, err)
		}
		lo.Each(func(o kadm.ListedOffset) {
			m := out[o.Partition]
			q.set(&m, o.Offset)
			out[o.Partition] = m
		})
	}
	return out, nil
}

// TopicID returns topic's ID as metadata reports it; exists is false when
// the broker does not know the topic.
func (b *Broker) TopicID(ctx context.Context, topic string) (id [16]byte, exists bool, err error) {
	adm, done, err := b.admin()
	if err != nil {
		return id, false, err
	}
	defer done()
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return id, false, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	td, ok := md.Topics[topic]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return id, false, nil
	}
	if td.Err != nil {
		return id, false, fmt.Errorf("metadata of %s: %w", topic, td.Err)
	}
	return td.ID, true, nil
}
