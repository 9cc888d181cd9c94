package localkafka

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ParkedFetch is a Fetch request the broker holds, unanswered, so that a test
// can act (stop the broker, delete the topic, add partitions) while a reader
// is provably in the middle of a partition.
type ParkedFetch struct {
	// Seen is closed when the broker has received the fetch and parked it.
	Seen    chan struct{}
	release chan struct{}
	once    sync.Once
}

// Release lets the parked fetch go: the broker answers it normally (or, if
// the broker was closed meanwhile, not at all). It is idempotent, and must be
// called before the test ends (t.Cleanup(p.Release)): the parking goroutine
// waits for it.
func (p *ParkedFetch) Release() { p.once.Do(func() { close(p.release) }) }

// ParkFetch parks the first Fetch of topic that asks for a partition at an
// offset above from (so records before it were read) until Release. Other
// requests, and later fetches, are served as usual.
func (b *Broker) ParkFetch(topic string, from int64) *ParkedFetch {
	p := &ParkedFetch{Seen: make(chan struct{}), release: make(chan struct{})}
	var done atomic.Bool
	c := b.Cluster
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if done.Load() || !b.MidFetch(topic, req, from) {
			return nil, nil, false
		}
		done.Store(true)
		close(p.Seen)
		c.SleepControl(func() { <-p.release })
		c.DropControl()
		return nil, nil, false
	})
	return p
}

// MidFetch reports whether req is a Fetch of topic (named, or by topic id)
// that asks for a partition at an offset above from.
func (b *Broker) MidFetch(topic string, req kmsg.Request, from int64) bool {
	f, ok := req.(*kmsg.FetchRequest)
	if !ok {
		return false
	}
	var id [16]byte
	if ti := b.Cluster.TopicInfo(topic); ti != nil {
		id = ti.TopicID
	}
	for _, ft := range f.Topics {
		if ft.Topic != topic && (ft.TopicID == [16]byte{} || ft.TopicID != id) {
			continue
		}
		for _, p := range ft.Partitions {
			if p.FetchOffset > from {
				return true
			}
		}
	}
	return false
}

// ProduceEach writes recs with one produce request per record, so that each
// record is a batch of its own and a reader with small fetches needs many
// fetches to read them. It returns the offsets they got.
func (b *Broker) ProduceEach(ctx context.Context, topic string, recs []Record) ([]int64, error) {
	cl, err := b.Client(kgo.DefaultProduceTopic(topic))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	offs := make([]int64, len(recs))
	for i, r := range recs {
		kr := &kgo.Record{Topic: topic, Partition: r.Partition, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
		if err := cl.ProduceSync(ctx, kr).FirstErr(); err != nil {
			return nil, fmt.Errorf("produce to %s: %w", topic, err)
		}
		offs[i] = kr.Offset
	}
	return offs, nil
}

// SmallFetches are librdkafka properties that keep each fetch to about one
// batch, so that reading a few hundred records takes as many fetches and a
// fault can land in the middle of the read. reconnect.backoff.max.ms is kept
// short so a reconnect to a restarted broker is not delayed by backoff.
var SmallFetches = map[string]string{
	"fetch.max.bytes":            "1024",
	"message.max.bytes":          "1000",
	"max.partition.fetch.bytes":  "1",
	"queued.min.messages":        "1",
	"queued.max.messages.kbytes": "1",
	"fetch.wait.max.ms":          "10",
	"reconnect.backoff.max.ms":   "200",
}
