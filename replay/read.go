package replay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kmaterialize/kmaterialize/record"
)

// Sink receives batches of records, in offset order within each partition.
// A batch is not reused by the replay after the call; the sink may keep it
// (who owns record bytes when: the "Record bytes" section of package fold).
// An error from the sink stops the replay and is returned as is.
type Sink func(batch []record.Record) error

// Result is what a completed replay read.
type Result struct {
	Plan    Plan // bounds; End is the position reached (== the end mark)
	Records int64
	Group   string // the throwaway group.id the consumer used
	Elapsed time.Duration
	// closed is closed once the replay's Kafka clients are.
	closed <-chan struct{}
}

// WaitClosed waits until the replay's Kafka clients are closed: at once
// unless Config.CloseBehind let Run return before.
func (r Result) WaitClosed() {
	if r.closed != nil {
		<-r.closed
	}
}

type partState struct {
	bounds  PartitionBounds
	pos     int64
	done    bool
	waiting bool // at the live end (EOF) below its end mark
}

// Run replays the topic as c describes and hands the records to sink. It
// returns when every partition's position has reached its end mark, or
// with an *Error (or ctx's error, or the sink's error).
func Run(ctx context.Context, c Config, sink Sink) (res Result, err error) {
	c = c.withDefaults()
	if c.Readers > 1 {
		c = c.shared()
	}
	started := time.Now()
	cl, err := newClients(c)
	if err != nil {
		return Result{}, err
	}
	owned := []*clients{cl} // and the other readers', closed together
	defer func() { res.closed = closeClients(owned, c.CloseBehind) }()

	plan, err := capture(ctx, cl, c)
	if err != nil {
		return Result{Plan: plan}, err
	}
	if err := resolveEnds(ctx, cl, c, &plan); err != nil {
		return Result{Plan: plan}, err
	}
	if c.Check != nil {
		if err := c.Check(plan); err != nil {
			return Result{Plan: plan}, err
		}
	}
	if err := resolveStarts(ctx, cl, c, &plan); err != nil {
		return Result{Plan: plan}, err
	}
	for _, w := range plan.Warnings {
		c.Log.Warn().Str("topic", c.Topic).Msg(w)
	}
	r := newReader(c, cl, plan, sink, started)
	if c.Readers > 1 && len(plan.Partitions) > 1 {
		res, err = runReaders(ctx, c, cl, &owned, plan, sink, started)
	} else {
		res, err = r.run(ctx)
	}
	if err == nil {
		if w := r.addedPartitions(ctx); w != "" {
			c.Log.Warn().Str("topic", c.Topic).Msg(w)
			res.Plan.Warnings = append(res.Plan.Warnings, w)
		}
	}
	res.Group = cl.group
	res.Elapsed = time.Since(started)
	return res, err
}

// partStates are a reader's partitions by number, looked up at every
// record: a slice, since Kafka numbers a topic's partitions from 0.
type partStates []*partState

func (ps *partStates) put(p int32, st *partState) {
	for int(p) >= len(*ps) {
		*ps = append(*ps, nil)
	}
	(*ps)[p] = st
}

// get is partition p's state, nil when the reader does not read p.
func (ps partStates) get(p int32) *partState {
	if p < 0 || int(p) >= len(ps) {
		return nil
	}
	return ps[p]
}

// newReader is the reader of plan's partitions on cl's consumer.
func newReader(c Config, cl *clients, plan Plan, sink Sink, started time.Time) *reader {
	r := &reader{c: c, cl: cl, plan: plan, sink: sink, started: started}
	r.pr = &partReader{c: c, cl: cl, d: r, op: "read", lowsTimeout: c.StallTimeout, checkEvery: time.Second, messageDeleted: true}
	return r
}

type reader struct {
	c       Config
	cl      *clients
	plan    Plan
	sink    Sink
	started time.Time

	parts   partStates
	order   []*partState
	pending int
	records int64
	batch   []record.Record
	bytes   int // keys and values in batch (Config.BatchBytes)
	// pr reads the partitions for the replay: their records, EOFs and
	// client errors (partreader.go); the replay is its driver.
	pr *partReader
	// bq is the queue the partitions are read from in batches (batch.go);
	// nil: one message a Poll.
	bq *batchQueue
	// lastAnswer is when the brokers last delivered anything (a record or
	// a partition EOF); zero until the first.
	lastAnswer time.Time
}

func (r *reader) run(ctx context.Context) (Result, error) {
	r.parts = partStates{}
	var assign []kafka.TopicPartition
	topic := r.c.Topic
	for _, pb := range r.plan.Partitions {
		st := &partState{bounds: pb, pos: pb.Start}
		r.parts.put(pb.Partition, st)
		r.order = append(r.order, st)
		// An empty range is complete before reading.
		if pb.Start >= pb.End {
			st.done = true
			continue
		}
		r.pending++
		assign = append(assign, kafka.TopicPartition{Topic: &topic, Partition: pb.Partition, Offset: kafka.Offset(pb.Start)})
	}
	if len(assign) > 0 {
		if r.bq = r.pr.openBatches(); r.bq != nil {
			defer r.bq.close()
			parts := make([]int32, len(assign))
			for i, tp := range assign {
				parts[i] = tp.Partition
			}
			if err := r.bq.forward(parts); err != nil {
				return r.result(), wrapErr("assign", topic, -1, -1, err)
			}
		}
		if err := r.cl.consumer.Assign(assign); err != nil {
			return r.result(), wrapErr("assign", topic, -1, -1, err)
		}
	}
	r.batch = make([]record.Record, 0, r.c.BatchRecords)
	lastProgress := time.Now()
	lastReport := time.Now()
	for r.pending > 0 {
		if err := ctx.Err(); err != nil {
			return r.result(), fmt.Errorf("replay %s interrupted: %w", topic, err)
		}
		progressed, err := r.poll(ctx)
		if err != nil {
			return r.result(), err
		}
		now := time.Now()
		if progressed {
			lastProgress = now
		}
		if r.c.Progress != nil && now.Sub(lastReport) >= r.c.ProgressInterval {
			lastReport = now
			r.c.Progress(r.snapshot())
		}
		if r.pending > 0 && now.Sub(lastProgress) > r.c.StallTimeout {
			// Hand over what was read so far? No: a stalled replay
			// publishes nothing, so the batch is dropped with it.
			return r.result(), r.stallError(ctx)
		}
	}
	if err := r.flush(); err != nil {
		return r.result(), err
	}
	if r.c.Progress != nil {
		r.c.Progress(r.snapshot())
	}
	return r.result(), nil
}

// poll reads one round: a batch of the batch queue and the consumer
// queue's events, or (without a batch queue) what one Poll returns,
// draining what is already queued without blocking. It reports whether any
// partition's position moved.
func (r *reader) poll(ctx context.Context) (bool, error) {
	if r.bq != nil {
		progressed, err := r.pr.serveEvents(ctx)
		if err != nil || r.pending == 0 {
			return progressed, err
		}
		br, err := r.pr.readBatch(ctx, r.bq, 100, r.c.BatchRecords, math.MaxInt64)
		if br.answered {
			r.lastAnswer = time.Now()
		}
		return progressed || br.moved, err
	}
	progressed, answered := false, false
	timeout := 100
	for i := 0; i < r.c.BatchRecords && r.pending > 0; i++ {
		ev := r.cl.consumer.Poll(timeout)
		timeout = 0
		if ev == nil {
			break
		}
		switch ev.(type) {
		case *kafka.Message, kafka.PartitionEOF:
			answered = true
		}
		moved, _, err := r.pr.handle(ctx, ev)
		if err != nil {
			return progressed, err
		}
		progressed = progressed || moved
	}
	if answered {
		r.lastAnswer = time.Now()
	}
	return progressed, nil
}

// position is the partReader's driver's: a finished partition is no
// longer read.
func (r *reader) position(p int32) (int64, bool) {
	st := r.parts.get(p)
	if st == nil || st.done {
		return 0, false
	}
	return st.pos, true
}

// record takes a record below the end mark into the batch; the first at
// or past the end mark finishes its partition instead.
func (r *reader) record(rec record.Record) (bool, error) {
	st := r.parts.get(rec.Partition)
	if rec.Offset >= st.bounds.End {
		// The first record past the end mark: the position has
		// crossed it, whatever markers or gaps lay between.
		st.pos = st.bounds.End
		return true, r.finish(st)
	}
	r.batch = append(r.batch, rec)
	r.bytes += len(rec.Key) + len(rec.Value)
	r.records++
	st.pos = rec.Offset + 1
	st.waiting = false
	if st.pos >= st.bounds.End {
		if err := r.finish(st); err != nil {
			return true, err
		}
	}
	if len(r.batch) >= r.c.BatchRecords || (r.c.BatchBytes > 0 && r.bytes >= r.c.BatchBytes) {
		return true, r.flush()
	}
	return true, nil
}

// eof moves the position past markers to off; a partition at its end mark
// is finished, one below it waits for an open transaction.
func (r *reader) eof(p int32, off int64) (bool, error) {
	st := r.parts.get(p)
	moved := off > st.pos
	if moved {
		// Control records and aborted transactions advance the
		// position without delivering a record.
		st.pos = off
	}
	if st.pos >= st.bounds.End {
		st.pos = st.bounds.End
		return true, r.finish(st)
	}
	// At the live end below the end mark: an open transaction holds
	// the last stable offset (read_committed cannot pass it).
	if !st.waiting {
		r.c.Log.Info().Str("topic", r.c.Topic).Int32("partition", st.bounds.Partition).
			Int64("lso", st.pos).Int64("high", st.bounds.End).
			Msg("waiting for an open transaction to commit or abort")
	}
	st.waiting = true
	return moved, nil
}

func (r *reader) lowsPlan() Plan { return r.plan }

func (r *reader) reading() []int32 {
	var ps []int32
	for _, st := range r.order {
		if !st.done {
			ps = append(ps, st.bounds.Partition)
		}
	}
	return ps
}

func (r *reader) removed(p int32, pos, low int64, err error) *Error {
	st := r.parts.get(p)
	return &Error{Op: "read", Topic: r.c.Topic, Partition: p, Offset: pos,
		Kind: ErrRecordsRemoved, Err: err,
		Detail: fmt.Sprintf("records removed under the replay: position %d but the retained low is now %d (start %d, high mark %d); nothing was published, rerun the rebuild",
			pos, low, st.bounds.Start, st.bounds.End)}
}

func (r *reader) outOfRange(p int32, err error) *Error {
	return &Error{Op: "read", Topic: r.c.Topic, Partition: p, Offset: -1, Kind: ErrRecordsRemoved, Err: err,
		Detail: "fetch offset out of range (records removed under the replay); nothing was published"}
}

// finish marks a partition complete and stops fetching it.
func (r *reader) finish(st *partState) error {
	st.done = true
	st.waiting = false
	r.pending--
	topic := r.c.Topic
	tp := []kafka.TopicPartition{{Topic: &topic, Partition: st.bounds.Partition}}
	if err := r.cl.consumer.Pause(tp); err != nil {
		return wrapErr("pause", topic, st.bounds.Partition, st.pos, err)
	}
	return nil
}

func (r *reader) flush() error {
	if len(r.batch) == 0 {
		return nil
	}
	// The rest of the batch read runs without a CPU turn: the sink may
	// wait for the writer, which takes turns too.
	r.pr.unpace()
	b := r.batch
	r.batch = make([]record.Record, 0, r.c.BatchRecords)
	r.bytes = 0
	return r.sink(b)
}

// stallError names each unfinished partition's position and end mark, and
// what holds the replay back: the topic deleted, the brokers unreachable
// (the last stable offsets cannot even be asked), or an open transaction
// holding a partition's last stable offset below its end mark.
func (r *reader) stallError(ctx context.Context) error {
	lsos, lerr := LSOs(ctx, r.cl.admin, r.plan, r.c.StallTimeout)
	// A deleted topic fails ListOffsets as unknown, or with no leader to
	// ask; metadata says which. Not asked when ListOffsets found no broker
	// at all: metadata would wait for the same dead brokers.
	if lerr != nil && !errors.Is(lerr, ErrUnavailable) && r.pr.topicGone(ctx) {
		return r.deleted(lerr)
	}
	if lerr != nil {
		// Without LSOs nothing can be said about transactions; a
		// negative or missing LSO is never taken for a real one.
		since := r.started
		if !r.lastAnswer.IsZero() {
			since = r.lastAnswer
		}
		return &Error{Op: "read", Topic: r.c.Topic, Partition: -1, Offset: -1, Kind: ErrUnavailable, Err: lerr,
			Detail: fmt.Sprintf("Kafka unavailable: no broker of %s answered for %s (nor the last stable offset query after the stall); positions: %s",
				brokersOf(r.c), time.Since(since).Round(100*time.Millisecond), strings.Join(r.positions(nil), "; "))}
	}
	var txnPart *partState
	parts := r.positions(func(st *partState) string {
		lso, ok := lsos[st.bounds.Partition]
		if !ok || lso < 0 || lso >= st.bounds.End || st.pos < lso {
			return ""
		}
		if txnPart == nil {
			txnPart = st
		}
		return fmt.Sprintf(" (an open transaction holds the last stable offset at %d; records %d..%d are uncommitted)",
			lso, lso, st.bounds.End-1)
	})
	detail := fmt.Sprintf("no progress for %s: %s", r.c.StallTimeout, strings.Join(parts, "; "))
	e := &Error{Op: "read", Topic: r.c.Topic, Partition: -1, Offset: -1, Kind: ErrStalled, Detail: detail, Err: r.pr.lastErr}
	if txnPart != nil {
		e.Partition = txnPart.bounds.Partition
		e.Offset = txnPart.pos
		e.Detail += "; wait for the transaction to finish, or rebuild with --end stable to stop at the last stable offset"
		e.Reason = ErrOpenTransaction
		return e
	}
	if r.pr.lastErr != nil && classify(r.pr.lastErr) == ErrUnavailable {
		e.Kind = ErrUnavailable
		e.Detail = fmt.Sprintf("Kafka unavailable during the read (brokers %s), %s", brokersOf(r.c), detail)
	}
	return e
}

// positions describes each unfinished partition, sorted, with note's text
// appended when note is set.
func (r *reader) positions(note func(*partState) string) []string {
	var parts []string
	for _, st := range r.order {
		if st.done {
			continue
		}
		s := fmt.Sprintf("partition %d at %d of high mark %d", st.bounds.Partition, st.pos, st.bounds.End)
		if note != nil {
			s += note(st)
		}
		parts = append(parts, s)
	}
	sort.Strings(parts)
	return parts
}

// deleted is the error of the topic deleted during the replay.
func (r *reader) deleted(cause error) *Error {
	return &Error{Op: "read", Topic: r.c.Topic, Partition: -1, Offset: -1, Kind: ErrTopicNotFound, Reason: ErrTopicDeleted, Err: cause,
		Detail: fmt.Sprintf("topic deleted: %q was deleted while the replay read it (%s)",
			r.c.Topic, strings.Join(r.positions(nil), "; "))}
}

// addedPartitions reports, as a warning, partitions that metadata lists now
// but the replay did not capture at its start: the replay covers the
// captured set only (its end marks were taken once). "" when there are none
// or metadata cannot say, and for Config.Partitions.
func (r *reader) addedPartitions(ctx context.Context) string {
	if r.c.Partitions != nil {
		return "" // a shard reads its partitions, never the topic's new ones
	}
	now, err := describe(ctx, r.cl.admin, r.c.Topic, min(r.c.StallTimeout, 5*time.Second))
	if len(now) == 0 {
		r.c.Log.Debug().Err(err).Str("topic", r.c.Topic).Msg("could not check for partitions added during the replay")
		return ""
	}
	captured := make(map[int32]bool, len(r.plan.Partitions))
	var have []int32
	for _, pb := range r.plan.Partitions {
		captured[pb.Partition] = true
		have = append(have, pb.Partition)
	}
	var added []int32
	for _, pb := range now {
		if !captured[pb.Partition] {
			added = append(added, pb.Partition)
		}
	}
	if len(added) == 0 {
		return ""
	}
	return fmt.Sprintf("partitions %s were added to topic %s during the replay; it covers only the partitions %s captured at its start: rebuild again to include the new ones",
		PartitionSet(added), r.c.Topic, PartitionSet(have))
}

func (r *reader) snapshot() Progress {
	p := Progress{Topic: r.c.Topic, Records: r.records, Elapsed: time.Since(r.started)}
	for _, st := range r.order {
		state := StateReading
		switch {
		case st.done:
			state = StateDone
		case st.waiting:
			state = StateWaiting
		}
		p.Partitions = append(p.Partitions, PartitionProgress{
			Partition: st.bounds.Partition, Start: st.bounds.Start, Position: st.pos, End: st.bounds.End, State: state,
		})
	}
	return p
}

func (r *reader) result() Result {
	plan := r.plan
	plan.Partitions = make([]PartitionBounds, len(r.plan.Partitions))
	copy(plan.Partitions, r.plan.Partitions)
	return Result{Plan: plan, Records: r.records}
}

// Positions reports the end position each partition reached, by partition.
func (res Result) Positions() map[int32]int64 {
	out := map[int32]int64{}
	for _, p := range res.Plan.Partitions {
		out[p.Partition] = p.End
	}
	return out
}
