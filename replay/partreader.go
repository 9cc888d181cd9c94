package replay

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kmaterialize/kmaterialize/record"
)

// partReader turns what the consumer's Poll returns into a partition's
// records and EOFs, handed to its driver, and the client's errors into
// *Error. It is the one reader of partitions: the bounded replay (reader,
// read.go) and the follower (follow.go) drive it, each with its own stop
// rule and its own use of records and EOFs. It is owned by the driver's
// read loop and not safe for concurrent use.
//
// The error rules it holds, for both:
//   - an offset out of range (auto.offset.reset=error) is ErrRecordsRemoved,
//     naming the partition whose retained low passed its position;
//   - a fatal client error ends the read (ErrKafka);
//   - GROUP_AUTHORIZATION_FAILED of the reader's own throwaway group is
//     logged once per client and is never the read's error (groupRefusal);
//   - a refused Fetch (TOPIC_AUTHORIZATION_FAILED, failed authentication)
//     fails at once: waiting does not make it pass;
//   - an unknown topic asks metadata whether the topic was deleted;
//   - anything else is transient: the client retries, and the driver's
//     stop rule (the stall timeout, or none) bounds how long.
type partReader struct {
	c  Config
	cl *clients
	d  partDriver
	// op is the *Error's Op: "read" or "follow".
	op string
	// logPrefix starts the reader's own log messages.
	logPrefix string
	// lowsTimeout bounds the ListOffsets that finds the partition whose
	// records were removed.
	lowsTimeout time.Duration
	// checkEvery is how often at most a client's unknown-topic error asks
	// metadata whether the topic was deleted (0: every time).
	checkEvery time.Duration
	// messageDeleted: a per-message unknown-topic error asks metadata too
	// (the bounded replay's rule; the follower's per-message errors are
	// wrapped as they are).
	messageDeleted bool

	// groupRefused is set once the refusal of the reader's own group's
	// coordinator lookup has been logged (groupRefusal); N readers share
	// one, so a replay says it once.
	groupRefused *atomic.Bool
	// lastErr is the last transient client error, for the driver's stall
	// error to name.
	lastErr error
	// topicChecked is when metadata was last asked whether the topic
	// still exists, after the client reported it unknown.
	topicChecked time.Time
	// paced: the reader holds a turn of Config.CPU (readBatch).
	paced bool
}

// partDriver is what a partReader's driver (the bounded replay or the
// follower) owns: the partitions' positions and what a record or an EOF
// does to them, and the wording of its errors.
type partDriver interface {
	// position is partition p's next offset to read, and whether p is
	// still read (a record or EOF of a partition not read is dropped: the
	// client prefetched it).
	position(p int32) (pos int64, reading bool)
	// record takes a record at or past its partition's position.
	record(rec record.Record) (moved bool, err error)
	// eof takes a partition EOF at off: a read_committed fetch at off
	// answered with off as the last stable offset.
	eof(p int32, off int64) (moved bool, err error)
	// lowsPlan names the partitions whose retained lows are asked when an
	// offset is out of range.
	lowsPlan() Plan
	// reading lists the partitions still read, the first an out of range
	// error can name first.
	reading() []int32
	// removed is the error of partition p's records removed: its position
	// pos is below the retained low now low.
	removed(p int32, pos, low int64, err error) *Error
	// outOfRange is the error of an offset out of range that no
	// partition's retained low explains (partition -1: unknown).
	outOfRange(p int32, err error) *Error
	// deleted is the error of the topic deleted under the reader.
	deleted(cause error) *Error
}

// handle applies one event of Poll: a record (handed to the driver, and
// returned), a partition EOF, or an error. moved reports that a position
// moved.
func (pr *partReader) handle(ctx context.Context, ev kafka.Event) (moved bool, rec *record.Record, err error) {
	switch e := ev.(type) {
	case *kafka.Message:
		if e.TopicPartition.Error != nil {
			return false, nil, pr.clientError(ctx, e.TopicPartition.Partition, e.TopicPartition.Error)
		}
		if !pr.wanted(e.TopicPartition.Partition, int64(e.TopicPartition.Offset)) {
			return false, nil, nil
		}
		r := pr.record(e)
		moved, err := pr.d.record(r)
		return moved, &r, err
	case kafka.PartitionEOF:
		moved, err := pr.eof(e.Partition, int64(e.Offset))
		return moved, nil, err
	case kafka.Error:
		return false, nil, pr.clientEvent(ctx, e)
	}
	return false, nil, nil
}

// wanted reports whether a record of partition p at off is to be read: not
// one prefetched past the end of a finished partition, nor one already
// seen (never expected with assign).
func (pr *partReader) wanted(p int32, off int64) bool {
	pos, reading := pr.d.position(p)
	return reading && off >= pos
}

// eof applies a partition EOF at off, unless p is no longer read.
func (pr *partReader) eof(p int32, off int64) (bool, error) {
	if _, reading := pr.d.position(p); !reading {
		return false, nil
	}
	return pr.d.eof(p, off)
}

// record builds the Record of a message, its headers copied when asked
// for (Config.Headers).
func (pr *partReader) record(e *kafka.Message) record.Record {
	r := record.Record{
		Partition: e.TopicPartition.Partition,
		Offset:    int64(e.TopicPartition.Offset),
		Timestamp: e.Timestamp,
		Key:       e.Key,
		Value:     e.Value,
	}
	if pr.c.Headers && len(e.Headers) > 0 {
		r.Headers = make([]record.Header, len(e.Headers))
		for i, h := range e.Headers {
			r.Headers[i] = record.Header{Key: h.Key, Value: h.Value}
		}
	}
	return r
}

// clientEvent applies a client error event: nil when the read goes on.
func (pr *partReader) clientEvent(ctx context.Context, e kafka.Error) error {
	if e.Code() == kafka.ErrAutoOffsetReset || e.Code() == kafka.ErrOffsetOutOfRange {
		return pr.clientError(ctx, -1, e)
	}
	if e.IsFatal() {
		return &Error{Op: pr.op, Topic: pr.c.Topic, Partition: -1, Offset: -1, Kind: ErrKafka, Err: e}
	}
	if e.Code() == kafka.ErrGroupAuthorizationFailed {
		// The reader's own group (groupRefusal): not the read's error.
		if pr.groupRefused == nil {
			pr.groupRefused = new(atomic.Bool)
		}
		groupRefusal(pr.groupRefused, pr.c.Log, pr.c.Topic, pr.cl.group, e)
		return nil
	}
	if refusedFetch(e) {
		// A refused Fetch (no Read on the topic) or failed
		// authentication does not pass by waiting.
		return pr.clientError(ctx, -1, e)
	}
	if classify(e) == ErrTopicNotFound && time.Since(pr.topicChecked) >= pr.checkEvery {
		// The client no longer finds the topic: deleted, or a broker
		// whose metadata lags. Ask metadata rather than wait.
		pr.topicChecked = time.Now()
		if pr.topicGone(ctx) {
			return pr.d.deleted(e)
		}
	}
	// Transient (broker down, transport): librdkafka retries.
	pr.lastErr = e
	pr.c.Log.Debug().Err(e).Str("topic", pr.c.Topic).Msg(pr.logPrefix + "kafka client error (retrying)")
	return nil
}

// clientError turns a per-partition client error into an *Error. An offset
// out of range (auto.offset.reset=error) means records the reader still had
// to read were removed: find the partition whose retained low passed its
// position, so the message names it.
func (pr *partReader) clientError(ctx context.Context, partition int32, err error) error {
	var ke kafka.Error
	if errors.As(err, &ke) && (ke.Code() == kafka.ErrAutoOffsetReset || ke.Code() == kafka.ErrOffsetOutOfRange) {
		lows, lerr := listOffsets(ctx, pr.cl.admin, pr.c.Topic, pr.lowsTimeout, pr.d.lowsPlan(), kafka.EarliestOffsetSpec, kafka.IsolationLevelReadUncommitted)
		for _, p := range pr.d.reading() {
			if partition >= 0 && p != partition {
				continue
			}
			pos, _ := pr.d.position(p)
			if lerr == nil && lows[p] > pos {
				return pr.d.removed(p, pos, lows[p], err)
			}
		}
		return pr.d.outOfRange(partition, err)
	}
	if pr.messageDeleted && classify(err) == ErrTopicNotFound && pr.topicGone(ctx) {
		return pr.d.deleted(err)
	}
	return wrapErr(pr.op, pr.c.Topic, partition, -1, err)
}

// topicGone asks metadata, once, whether the topic still exists; false when
// metadata cannot answer (that is the stall's or the caller's to report).
func (pr *partReader) topicGone(ctx context.Context) bool {
	_, err := describe(ctx, pr.cl.admin, pr.c.Topic, min(pr.c.StallTimeout, 5*time.Second))
	return err != nil && errors.Is(err, ErrTopicNotFound)
}
