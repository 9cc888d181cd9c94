package replay

import (
	"context"
	"sync/atomic"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Records in batches.
//
// confluent-kafka-go's Poll makes one cgo call per message and builds a
// kafka.Message with freshly allocated key, value and headers: at a
// million records a second that is most of a replay's CPU. The replay's
// hot read loop (the bounded reader's and the follower's) reads instead
// from a librdkafka queue of its own (batchQueue, rdkafka.go): each
// assigned partition's fetch queue is forwarded to it before the
// assignment, and it is consumed with rd_kafka_consume_batch_queue. One C
// call counts a batch's bytes, Go allocates one arena of exactly that
// size, and a second C call copies every key, value and header of the
// batch into it and destroys the messages: two cgo crossings and two
// allocations a batch, none a record.
//
// The consumer queue keeps everything else that confluent-kafka-go routes
// through it (rd_kafka_poll_set_consumer): client errors, fatal errors,
// statistics, OAUTHBEARER refreshes. The loop serves it with Poll every
// round without waiting (serveEvents), through the same partReader.handle
// as before, so those events keep their handling; librdkafka's logs go to
// their own queue and the Logs channel as before.
//
// A partition's records, partition EOFs and per-partition errors (an
// offset out of range) all arrive on its fetch queue, in order, so the
// batch path applies them in the order Poll would have delivered them:
// a record through the driver's record, an EOF through its eof, and an
// error as the kafka.Error event Poll would have made of it
// (partReader.clientEvent). The error, EOF, position and stall rules are
// the partReader's, unchanged.
//
// The bytes of a record are slices of its batch's arena, which is never
// written again nor reused: they stay valid as long as anything refers to
// them (the "Record bytes" section of package fold).

// batchRead is what one batch did.
type batchRead struct {
	messages int   // messages taken (0: none came within the wait)
	records  int   // records handed to the driver
	bytes    int64 // their keys' and values' lengths
	moved    bool  // a position moved
	answered bool  // a record or a partition EOF arrived
}

// batchesTaken counts the batches read in this process, for the tests to
// tell the batch path from the per-record one.
var batchesTaken atomic.Int64

// readBatch takes the next batch of q, at most maxMsgs messages and (past
// the first) maxBytes, waiting up to timeoutMs for its first message, and
// applies its messages in order, as handle applies Poll's events.
func (pr *partReader) readBatch(ctx context.Context, q *batchQueue, timeoutMs, maxMsgs int, maxBytes int64) (batchRead, error) {
	var br batchRead
	n, err := q.take(timeoutMs, maxMsgs, maxBytes)
	if err != nil {
		return br, &Error{Op: pr.op, Topic: pr.c.Topic, Partition: -1, Offset: -1, Kind: ErrKafka, Err: err}
	}
	br.messages = n
	if n == 0 {
		return br, nil
	}
	batchesTaken.Add(1)
	if pr.c.CPU != nil {
		if err := pr.c.CPU.Acquire(ctx); err != nil {
			return br, err
		}
		pr.paced = true
		defer pr.unpace()
	}
	for i := 0; i < n; i++ {
		code, p, off := q.message(i)
		moved := false
		switch code {
		case kafka.ErrNoError:
			br.answered = true
			if !pr.wanted(p, off) {
				continue
			}
			r := q.record(i)
			br.records++
			br.bytes += int64(len(r.Key) + len(r.Value))
			moved, err = pr.d.record(r)
		case kafka.ErrPartitionEOF:
			br.answered = true
			moved, err = pr.eof(p, off)
		default:
			err = pr.clientEvent(ctx, q.errorOf(i))
		}
		br.moved = br.moved || moved
		if err != nil {
			return br, err
		}
	}
	return br, nil
}

// unpace gives back the CPU turn readBatch took, if it still holds it: the
// driver calls it before its sink, which may wait for a writer that needs
// a turn itself.
func (pr *partReader) unpace() {
	if pr.paced {
		pr.paced = false
		pr.c.CPU.Release()
	}
}

// consumerEvents bounds the consumer queue's events served in one round.
const consumerEvents = 100

// serveEvents handles what the consumer queue holds, without waiting:
// client errors and the other events confluent-kafka-go's Poll serves.
func (pr *partReader) serveEvents(ctx context.Context) (moved bool, err error) {
	for i := 0; i < consumerEvents; i++ {
		ev := pr.cl.consumer.Poll(0)
		if ev == nil {
			return moved, nil
		}
		m, _, err := pr.handle(ctx, ev)
		moved = moved || m
		if err != nil {
			return moved, err
		}
	}
	return moved, nil
}

// openBatches makes the batch queue of the reader's consumer, or, with
// Config.perRecord or on a confluent-kafka-go whose handle it cannot read,
// none (nil: the reader polls one message at a time, as before).
func (pr *partReader) openBatches() *batchQueue {
	if pr.c.perRecord {
		return nil
	}
	q, err := newBatchQueue(pr.cl.consumer, pr.c.Topic, pr.c.Headers)
	if err != nil {
		pr.c.Log.Warn().Err(err).Str("topic", pr.c.Topic).Msg(pr.logPrefix + "reading one message at a time")
		return nil
	}
	return q
}
