package copier

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/replay"
)

// The copy's files, one concept each:
//
//	copy.go       Run and the loop: poll, copy a record, end a batch
//	partition.go  one assigned partition's state and its transitions
//	txn.go        the transaction state machine: begin, commit, abort
//	rebalance.go  assignment and revocation
//	end.go        when a bounded copy is done, and stalls
//	client.go     the clients' configuration, init and bounded close

// copyRun is the state of one copy. Its methods run on the goroutine that
// called Run, except the rebalance callback, which librdkafka invokes from
// inside Poll on that same goroutine.
type copyRun struct {
	c    Config
	p    *kafka.Producer
	cons *kafka.Consumer
	adm  *kafka.AdminClient
	log  zerolog.Logger

	src, dst replay.Plan
	ends     map[int32]int64 // source end offsets captured at start (nil with Follow)

	inTxn      bool
	txnStarted time.Time
	batch      int64                // records produced in the open transaction
	parts      map[int32]*partition // the assigned source partitions

	sum      Summary
	started  time.Time
	progress time.Time // last time records were copied or offsets committed
	failed   error     // set by the rebalance callback

	consLogs      sync.WaitGroup // the consumer's log forwarder
	consumerFatal bool           // the consumer raised a fatal error (fenced)
	closing       bool           // set before Close: the rebalance callback stands down
	joined        bool           // the group gave this copier its first assignment
}

// Run copies c.From to c.To exactly once and returns the summary; on error
// the summary says what was committed before it.
func Run(ctx context.Context, c Config) (Summary, error) {
	c = c.withDefaults()
	started := time.Now()
	r := &copyRun{c: c, log: c.Log, parts: map[int32]*partition{}, started: started}
	r.sum = Summary{From: c.From, To: c.To, Group: c.Group}
	var wg sync.WaitGroup
	defer wg.Wait() // log forwarders end when the clients close
	err := r.open(ctx, &wg)
	if err == nil {
		err = r.loop(ctx)
		if r.c.Progress != nil {
			r.c.Progress(r.snapshot())
		}
	}
	if errors.Is(err, ErrFenced) || errors.Is(err, ErrFatal) {
		// A newer copier with our group.instance.id may fence the
		// consumer at any moment now: close it as a fenced one.
		r.consumerFatal = true
	}
	if cerr := r.close(); cerr != nil && err == nil {
		err = cerr
	}
	r.sum.ElapsedMs = time.Since(started).Milliseconds()
	// With Abort, Transactions counts the aborted ones.
	r.sum.Committed = !c.Abort && r.sum.Transactions > 0
	return r.sum, err
}

func (r *copyRun) loop(ctx context.Context) error {
	r.progress = time.Now()
	lastCheck := time.Time{}
	lastLog := time.Now()
	for {
		if r.failed != nil {
			return r.failed
		}
		if ctx.Err() != nil {
			return r.stopOnSignal()
		}
		if r.c.MaxRecords > 0 && r.sum.Records+r.batch >= r.c.MaxRecords {
			if err := r.endTxn(ctx); err != nil {
				return err
			}
			if r.sum.Records >= r.c.MaxRecords {
				return nil
			}
			continue // the batch was aborted and rewound: redo it
		}
		ev := r.cons.Poll(50)
		switch e := ev.(type) {
		case *kafka.Message:
			if e.TopicPartition.Error != nil {
				if err := r.consumerError(e.TopicPartition.Error); err != nil {
					return err
				}
				break
			}
			if err := r.copyRecord(ctx, e); err != nil {
				return err
			}
		case kafka.PartitionEOF:
			// The position passes control records and aborted batches
			// without a record: commit it so the group reaches the end,
			// once a re-read has confirmed it (partitionEOF).
			if p := r.parts[e.Partition]; p != nil {
				if err := r.partitionEOF(p, int64(e.Offset)); err != nil {
					return err
				}
			}
		case kafka.Error:
			if err := r.consumerError(e); err != nil {
				return err
			}
		}
		if r.inTxn && (r.batch >= int64(r.c.BatchRecords) || time.Since(r.txnStarted) >= r.c.BatchInterval || r.caughtUp()) {
			if err := r.endTxn(ctx); err != nil {
				return err
			}
		}
		if !r.inTxn && !r.c.Abort && r.positionsAhead() {
			// Offsets only (markers at the end of a partition).
			if err := r.beginTxn(); err != nil {
				return err
			}
			if err := r.endTxn(ctx); err != nil {
				return err
			}
		}
		if time.Since(lastLog) >= r.c.ProgressInterval {
			lastLog = time.Now()
			r.reportProgress()
		}
		if r.c.Follow || r.inTxn || time.Since(lastCheck) < 200*time.Millisecond {
			continue
		}
		lastCheck = time.Now()
		// Finish only once joined: closing in the middle of the group
		// join would deliver the assignment into Close (see close).
		done, err := r.reachedEnd(ctx)
		if err != nil || (done && (r.joined || time.Since(r.progress) > r.c.StallTimeout)) {
			return err
		}
	}
}

func (r *copyRun) copyRecord(ctx context.Context, m *kafka.Message) error {
	off := int64(m.TopicPartition.Offset)
	p := r.parts[m.TopicPartition.Partition]
	if p == nil {
		return nil // fetched before a revocation
	}
	r.noteJump(p, off)
	if !r.inTxn {
		if err := r.beginTxn(); err != nil {
			return err
		}
	}
	// Taken before the produce: if it fails, the abort rewinds this
	// partition even when it has nothing else in the transaction.
	if eof := p.take(off); eof >= 0 {
		// The re-read that verifies an EOF delivered a record below it:
		// the first EOF had passed a record that never reached us.
		r.sum.EOFRereads++
		r.log.Warn().Str("topic", r.c.From).Int32("partition", p.id).Int64("offset", off).Int64("eof_offset", eof).
			Msgf("the consumer reported the end of %s/%d at offset %d before delivering the record at offset %d; the re-read delivered it, copying it",
				r.c.From, p.id, eof, off)
	}
	out := &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &r.c.To, Partition: p.id},
		Key:            m.Key,
		Value:          m.Value,
		Headers:        m.Headers,
		Timestamp:      m.Timestamp,
	}
	if r.c.Repartition {
		out.TopicPartition.Partition = kafka.PartitionAny
	}
	for {
		err := r.p.Produce(out, nil)
		if err == nil {
			break
		}
		var ke kafka.Error
		if errors.As(err, &ke) && ke.Code() == kafka.ErrQueueFull {
			r.p.Flush(100)
			continue
		}
		return r.txnFailure(ctx, "produce", err)
	}
	r.batch++
	return nil
}

// partitionEOF handles the consumer's end-of-partition event at off (see
// partition.reachedEOF): an EOF that passed offsets without a record sends
// the consumer back to re-read them before the position may move there.
// librdkafka purges what it fetched of the partition at a seek, so the
// re-read starts at from and its EOF is a fresh one.
func (r *copyRun) partitionEOF(p *partition, off int64) error {
	from, verify := p.reachedEOF(off)
	if !verify {
		return nil
	}
	to := kafka.Offset(from)
	if from < 0 {
		to = kafka.OffsetBeginning // where auto.offset.reset=earliest began
	}
	r.log.Debug().Str("topic", r.c.From).Int32("partition", p.id).Int64("from", from).Int64("eof_offset", off).
		Msg("partition EOF past offsets without a record: re-reading them before committing past them")
	if err := r.cons.Seek(kafka.TopicPartition{Topic: &r.c.From, Partition: p.id, Offset: to}, 0); err != nil {
		return fmt.Errorf("re-read %s/%d from %s to verify a partition EOF at %d: %w", r.c.From, p.id, to, off, err)
	}
	return nil
}

// noteJump logs records that retention deleted before they were copied. A
// record further on than expected is normal (transaction markers, aborted
// batches and compaction leave gaps), so a gap is only reported when the
// partition's log start offset, as the consumer last saw it in a fetch
// response (no request is made), passed the expected offset: the consumer
// hit OFFSET_OUT_OF_RANGE and auto.offset.reset=earliest moved it on.
func (r *copyRun) noteJump(p *partition, off int64) {
	want := p.expected()
	if want < 0 || off <= want {
		return
	}
	low, _, err := r.cons.GetWatermarkOffsets(r.c.From, p.id)
	if err != nil || low <= want {
		return
	}
	r.sum.SkippedByRetention += min(low, off) - want
	r.log.Warn().Str("topic", r.c.From).Int32("partition", p.id).Int64("expected_offset", want).
		Int64("log_start_offset", low).Int64("offset", off).
		Msgf("records %d..%d of %s/%d were deleted by retention before they were copied; copying from offset %d",
			want, min(low, off)-1, r.c.From, p.id, off)
}
