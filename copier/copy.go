package copier

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/replay"
)

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
	batch      int64
	pos        map[int32]int64 // next offset to copy, per assigned source partition
	committed  map[int32]int64 // the group's committed offsets we know of, per assigned partition
	txnFirst   map[int32]int64 // first offset produced in the open transaction, per partition
	assigned   map[int32]bool

	sum      Summary
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
	r := &copyRun{c: c, log: c.Log, pos: map[int32]int64{}, committed: map[int32]int64{},
		txnFirst: map[int32]int64{}, assigned: map[int32]bool{}}
	r.sum = Summary{From: c.From, To: c.To, Group: c.Group, Committed: !c.Abort}
	var wg sync.WaitGroup
	defer wg.Wait() // log forwarders end when the clients close
	err := r.open(ctx, &wg)
	if err == nil {
		err = r.loop(ctx)
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
	return r.sum, err
}

func (r *copyRun) open(ctx context.Context, wg *sync.WaitGroup) error {
	c := r.c
	pcfg, err := replay.ClientConfig(c.Brokers, c.Props)
	if err != nil {
		return err
	}
	for k, v := range map[string]any{
		"transactional.id":   c.TransactionalID,
		"enable.idempotence": true,
		// Errors surface from CommitTransaction (it flushes); per-message
		// delivery reports would only be a channel to drain.
		"go.delivery.reports": false,
		"linger.ms":           5,
	} {
		_ = pcfg.SetKey(k, v)
	}
	if c.Repartition {
		_ = pcfg.SetKey("partitioner", "murmur2_random")
	}
	r.p, err = kafka.NewProducer(pcfg)
	if err != nil {
		return fmt.Errorf("create producer: %w", err)
	}
	wg.Add(2)
	go replay.ForwardLogs(r.p.Logs(), r.log, wg)
	go func() { // errors not tied to a call: log them; calls report their own
		defer wg.Done()
		for ev := range r.p.Events() {
			if e, ok := ev.(kafka.Error); ok {
				r.log.Warn().Err(e).Msg("producer error")
			}
		}
	}()
	r.adm, err = kafka.NewAdminClientFromProducer(r.p)
	if err != nil {
		return fmt.Errorf("create admin client: %w", err)
	}
	if r.src, err = replay.Marks(ctx, r.adm, c.From, c.StallTimeout); err != nil {
		return err
	}
	if r.dst, err = replay.Marks(ctx, r.adm, c.To, c.StallTimeout); err != nil {
		return err
	}
	if !c.Repartition && len(r.dst.Partitions) < len(r.src.Partitions) {
		return fmt.Errorf("%w: %s has %d partitions, %s has %d; each record keeps its partition number, so create the destination with at least %d partitions or use --repartition",
			ErrBadDestination, c.To, len(r.dst.Partitions), c.From, len(r.src.Partitions), len(r.src.Partitions))
	}
	if !c.Follow {
		r.ends = map[int32]int64{}
		for _, p := range r.src.Partitions {
			r.ends[p.Partition] = p.High
		}
	}
	ictx, cancel := context.WithTimeout(ctx, c.StallTimeout)
	defer cancel()
	if err := r.p.InitTransactions(ictx); err != nil {
		return r.classifyFatal("init transactions", err)
	}

	ccfg, err := replay.ClientConfig(c.Brokers, c.Props)
	if err != nil {
		return err
	}
	for k, v := range map[string]any{
		"group.id":                 c.Group,
		"group.instance.id":        InstanceID(c.TransactionalID),
		"enable.auto.commit":       false,
		"enable.auto.offset.store": false,
		"auto.offset.reset":        "earliest",
		"isolation.level":          "read_committed",
		"enable.partition.eof":     true,
		"allow.auto.create.topics": false,
	} {
		_ = ccfg.SetKey(k, v)
	}
	r.cons, err = kafka.NewConsumer(ccfg)
	if err != nil {
		return fmt.Errorf("create consumer: %w", err)
	}
	r.consLogs.Add(1)
	go replay.ForwardLogs(r.cons.Logs(), r.log, &r.consLogs)
	if err := r.cons.SubscribeTopics([]string{c.From}, r.rebalance); err != nil {
		return fmt.Errorf("subscribe to %s: %w", c.From, err)
	}
	r.log.Info().Str("from", c.From).Str("to", c.To).Str("group", c.Group).Str("transactional_id", c.TransactionalID).
		Interface("end_offsets", r.ends).Bool("abort", c.Abort).Msg("copy started")
	return nil
}

// Bounds on the consumer's Close. confluent-kafka-go v2.11.1 has two known
// ways to block in Close forever: after a fatal error (a fenced static
// member: it drops rd_kafka_consumer_close_queue's error, fixed upstream in
// PR #1588, not released here), and when a rebalance reaches the consumer
// after its close started (the rebalance calls wait for a group handler
// that is terminating; confluent-kafka-go #1016, librdkafka #4041). A copy's
// results are already committed in its transactions when Close runs, so
// close waits this long and then leaves the consumer to the process's exit
// (the CLI exits right after), logging why.
const (
	consumerCloseGrace      = 10 * time.Second
	fatalConsumerCloseGrace = 3 * time.Second
)

func (r *copyRun) close() error {
	var errs []error
	if r.cons != nil {
		r.closing = true
		// Static membership: no LeaveGroup is sent, so a restart with the
		// same transactional id takes the partitions back at once.
		grace := consumerCloseGrace
		if r.consumerFatal {
			grace = fatalConsumerCloseGrace
		}
		closed := make(chan error, 1)
		go func() {
			err := r.cons.Close()
			r.consLogs.Wait()
			closed <- err
		}()
		select {
		case err := <-closed:
			if err != nil {
				errs = append(errs, fmt.Errorf("close consumer: %w", err))
			}
		case <-time.After(grace):
			r.log.Warn().Bool("fatal", r.consumerFatal).Dur("waited", grace).
				Msg("the consumer does not close (a known confluent-kafka-go bug); its work is committed, leaving it to the process exit")
		}
	}
	if r.adm != nil {
		r.adm.Close()
	}
	if r.p != nil {
		r.p.Close()
	}
	return errors.Join(errs...)
}

// rebalance runs inside Poll. On a revocation the open transaction is
// aborted: its records were never committed, and the partitions' next owner
// starts from the group's committed offsets.
func (r *copyRun) rebalance(cons *kafka.Consumer, ev kafka.Event) error {
	// The callback assigns and unassigns itself (eager protocol). Left to
	// confluent-kafka-go v2.11.1, it would first ask for the rebalance
	// protocol, a call that can block forever when the revocation comes
	// from inside Close (confluent-kafka-go #1016, librdkafka #4041).
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		if err := cons.Assign(e.Partitions); err != nil {
			r.failed = fmt.Errorf("assign %v: %w", partitionsOf(e.Partitions), err)
			return nil
		}
		if r.closing {
			return nil
		}
		parts := make([]kafka.TopicPartition, len(e.Partitions))
		copy(parts, e.Partitions)
		committed, err := cons.Committed(parts, int(r.c.StallTimeout/time.Millisecond))
		if err != nil {
			r.log.Warn().Err(err).Msg("could not read committed offsets of the new assignment")
		}
		for _, tp := range committed {
			if tp.Offset >= 0 {
				r.committed[tp.Partition] = int64(tp.Offset)
			}
		}
		for _, tp := range e.Partitions {
			r.assigned[tp.Partition] = true
		}
		r.joined = true
		r.log.Info().Interface("partitions", partitionsOf(e.Partitions)).Msg("partitions assigned")
	case kafka.RevokedPartitions:
		if !r.closing {
			if r.inTxn {
				if err := r.abortOpen(context.Background(), "partitions revoked"); err != nil {
					r.failed = err
				}
			}
			for _, tp := range e.Partitions {
				delete(r.assigned, tp.Partition)
				delete(r.pos, tp.Partition)
				delete(r.committed, tp.Partition)
				delete(r.txnFirst, tp.Partition)
			}
			r.log.Info().Interface("partitions", partitionsOf(e.Partitions)).Msg("partitions revoked")
		}
		if err := cons.Unassign(); err != nil && !r.closing {
			r.failed = fmt.Errorf("unassign %v: %w", partitionsOf(e.Partitions), err)
		}
	}
	return nil
}

func partitionsOf(tps []kafka.TopicPartition) []int32 {
	out := make([]int32, len(tps))
	for i, tp := range tps {
		out[i] = tp.Partition
	}
	return out
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
			// without a record: commit it so the group reaches the end.
			if r.assigned[e.Partition] && int64(e.Offset) > r.pos[e.Partition] {
				r.pos[e.Partition] = int64(e.Offset)
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
			r.log.Info().Int64("records", r.sum.Records).Int64("transactions", r.sum.Transactions).
				Interface("positions", r.pos).Msg("progress")
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
	p := m.TopicPartition.Partition
	off := int64(m.TopicPartition.Offset)
	if !r.assigned[p] {
		return nil // fetched before a revocation
	}
	if !r.inTxn {
		if err := r.beginTxn(); err != nil {
			return err
		}
	}
	out := &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: &r.c.To, Partition: p},
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
	if _, ok := r.txnFirst[p]; !ok {
		r.txnFirst[p] = off
	}
	r.pos[p] = off + 1
	r.batch++
	return nil
}

func (r *copyRun) beginTxn() error {
	if err := r.p.BeginTransaction(); err != nil {
		return r.classifyFatal("begin transaction", err)
	}
	r.inTxn = true
	r.txnStarted = time.Now()
	r.batch = 0
	return nil
}

// caughtUp reports whether a bounded copy has read every assigned partition
// to its end offset: the open transaction need not wait for more.
func (r *copyRun) caughtUp() bool {
	if r.ends == nil || len(r.assigned) == 0 {
		return false
	}
	for p := range r.assigned {
		if r.pos[p] < r.ends[p] {
			return false
		}
	}
	return true
}

// positionsAhead reports whether a partition's position passed the group's
// committed offset without records (control records at its end).
func (r *copyRun) positionsAhead() bool {
	for p, pos := range r.pos {
		if c, ok := r.committed[p]; !ok || pos > c {
			return true
		}
	}
	return false
}

// endTxn commits (or, with Abort, aborts) the open transaction, retrying
// and redoing as its errors require.
func (r *copyRun) endTxn(ctx context.Context) error {
	if !r.inTxn {
		return nil
	}
	// The transactional calls run to completion even after a signal: an
	// interrupted commit has an unknown outcome.
	ctx = context.WithoutCancel(ctx)
	if r.c.Abort {
		if err := r.retry(ctx, "abort transaction", r.p.AbortTransaction); err != nil {
			return r.classifyFatal("abort transaction", err)
		}
		r.sum.Records += r.batch
		r.sum.Transactions++
		r.inTxn, r.batch = false, 0
		r.txnFirst = map[int32]int64{}
		r.progress = time.Now()
		return nil
	}
	var offsets []kafka.TopicPartition
	for p, pos := range r.pos {
		if c, ok := r.committed[p]; !ok || pos > c {
			offsets = append(offsets, kafka.TopicPartition{Topic: &r.c.From, Partition: p, Offset: kafka.Offset(pos)})
		}
	}
	sort.Slice(offsets, func(i, j int) bool { return offsets[i].Partition < offsets[j].Partition })
	if len(offsets) > 0 {
		meta, err := r.cons.GetConsumerGroupMetadata()
		if err != nil {
			return fmt.Errorf("consumer group metadata: %w", err)
		}
		if err := r.retry(ctx, "send offsets to transaction", func(actx context.Context) error {
			return r.p.SendOffsetsToTransaction(actx, offsets, meta)
		}); err != nil {
			return r.txnFailure(ctx, "send offsets to transaction", err)
		}
	}
	// A commit that fails retriably (a timeout among them) has an unknown
	// outcome: retry it as a commit, never abort it.
	if err := r.retry(ctx, "commit transaction", r.p.CommitTransaction); err != nil {
		var ke kafka.Error
		if errors.As(err, &ke) && ke.IsRetriable() && !ke.TxnRequiresAbort() && !ke.IsFatal() {
			// Still unknown after StallTimeout: stop without aborting.
			// The next copier with this transactional id resolves the
			// transaction at init, consistently with the group offsets.
			return fmt.Errorf("commit transaction: outcome still unknown after %s of retries; not aborting it: rerun with the same --transactional-id to resolve it: %w",
				r.c.StallTimeout, err)
		}
		return r.txnFailure(ctx, "commit transaction", err)
	}
	for _, tp := range offsets {
		r.committed[tp.Partition] = int64(tp.Offset)
	}
	r.sum.Records += r.batch
	if r.batch > 0 || len(offsets) > 0 {
		r.sum.Transactions++
	}
	r.inTxn, r.batch = false, 0
	r.txnFirst = map[int32]int64{}
	r.progress = time.Now()
	return nil
}

// retry calls fn, each attempt bounded by CallTimeout, until it succeeds,
// fails with an error that is not retriable, or StallTimeout has passed; it
// then returns the last error.
func (r *copyRun) retry(ctx context.Context, op string, fn func(context.Context) error) error {
	deadline := time.Now().Add(r.c.StallTimeout)
	for {
		actx, cancel := context.WithTimeout(ctx, min(r.c.CallTimeout, time.Until(deadline)))
		err := fn(actx)
		cancel()
		if err == nil {
			return nil
		}
		var ke kafka.Error
		if !errors.As(err, &ke) || !ke.IsRetriable() || ke.IsFatal() || ke.TxnRequiresAbort() || time.Now().After(deadline) {
			return err
		}
		r.sum.Retries++
		r.log.Warn().Err(err).Str("op", op).Msg("retriable error, retrying")
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// txnFailure handles a failed transactional step: fatal errors stop the
// copy; anything else aborts the transaction and rewinds the consumer to the
// last committed positions, so the batch is redone.
func (r *copyRun) txnFailure(ctx context.Context, op string, err error) error {
	var ke kafka.Error
	if errors.As(err, &ke) && ke.IsFatal() {
		return r.classifyFatal(op, err)
	}
	if time.Since(r.progress) > r.c.StallTimeout {
		return fmt.Errorf("%s: %w (no progress for %s)", op, err, r.c.StallTimeout)
	}
	r.log.Warn().Err(err).Str("op", op).Bool("txn_requires_abort", errors.As(err, &ke) && ke.TxnRequiresAbort()).
		Msg("aborting the transaction and redoing it from the last committed positions")
	if aerr := r.abortOpen(ctx, op+" failed"); aerr != nil {
		return aerr
	}
	r.sum.Aborts++
	return nil
}

// abortOpen aborts the open transaction and rewinds every partition it
// touched to the group's committed offset (or where the transaction began
// reading it).
func (r *copyRun) abortOpen(ctx context.Context, why string) error {
	if err := r.retry(context.WithoutCancel(ctx), "abort transaction", r.p.AbortTransaction); err != nil {
		return r.classifyFatal("abort transaction ("+why+")", err)
	}
	r.inTxn, r.batch = false, 0
	for p, first := range r.txnFirst {
		to := first
		if c, ok := r.committed[p]; ok {
			to = c
		}
		if !r.assigned[p] {
			continue
		}
		if err := r.cons.Seek(kafka.TopicPartition{Topic: &r.c.From, Partition: p, Offset: kafka.Offset(to)}, 0); err != nil {
			return fmt.Errorf("rewind %s/%d to %d after an abort: %w", r.c.From, p, to, err)
		}
		r.pos[p] = to
	}
	r.txnFirst = map[int32]int64{}
	return nil
}

func (r *copyRun) classifyFatal(op string, err error) error {
	var ke kafka.Error
	if errors.As(err, &ke) {
		switch ke.Code() {
		case kafka.ErrFenced, kafka.ErrProducerFenced, kafka.ErrInvalidProducerEpoch, kafka.ErrFencedInstanceID:
			return fmt.Errorf("%s: %w (transactional id %q): %w", op, ErrFenced, r.c.TransactionalID, err)
		}
		if ke.IsFatal() {
			return fmt.Errorf("%s: %w: %w", op, ErrFatal, err)
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

func (r *copyRun) consumerError(err error) error {
	var ke kafka.Error
	if errors.As(err, &ke) && (ke.IsFatal() || ke.Code() == kafka.ErrFencedInstanceID) {
		r.consumerFatal = true
		return r.classifyFatal("consume", err)
	}
	r.log.Warn().Err(err).Msg("consumer error (retrying)")
	return nil
}

// reachedEnd reports whether the group's committed offsets (or, with
// Abort, this copier's positions) reached the end offsets captured at start
// on every source partition, whoever owns them. It fails the copy after
// StallTimeout without progress.
func (r *copyRun) reachedEnd(ctx context.Context) (bool, error) {
	if r.ends == nil {
		return false, nil
	}
	have := map[int32]int64{}
	if r.c.Abort {
		have = r.pos
	} else {
		var tps []kafka.TopicPartition
		for p := range r.ends {
			tps = append(tps, kafka.TopicPartition{Topic: &r.c.From, Partition: p})
		}
		got, err := r.cons.Committed(tps, 5000)
		if err != nil {
			r.log.Debug().Err(err).Msg("read committed offsets")
			return false, nil
		}
		for _, tp := range got {
			if tp.Offset >= 0 {
				have[tp.Partition] = int64(tp.Offset)
			}
		}
	}
	var behind []int32
	for _, pb := range r.src.Partitions {
		end := r.ends[pb.Partition]
		h, ok := have[pb.Partition]
		if (ok && h >= end) || (!ok && end <= pb.Low) {
			continue
		}
		behind = append(behind, pb.Partition)
	}
	if len(behind) == 0 {
		return true, nil
	}
	if time.Since(r.progress) <= r.c.StallTimeout {
		return false, nil
	}
	lsos, _ := replay.LSOs(ctx, r.adm, r.src, r.c.StallTimeout)
	var parts []string
	for _, p := range behind {
		s := fmt.Sprintf("partition %d committed %s of end %d", p, offsetText(have, p), r.ends[p])
		if lso, ok := lsos[p]; ok && lso < r.ends[p] {
			s += fmt.Sprintf(" (an open transaction holds the last stable offset at %d)", lso)
		}
		parts = append(parts, s)
	}
	return false, fmt.Errorf("%w: no progress for %s: %s", ErrStalled, r.c.StallTimeout, strings.Join(parts, "; "))
}

func offsetText(m map[int32]int64, p int32) string {
	if v, ok := m[p]; ok {
		return fmt.Sprint(v)
	}
	return "none"
}

// stopOnSignal finishes the open transaction (commit, or abort with Abort)
// after a signal.
func (r *copyRun) stopOnSignal() error {
	if err := r.endTxn(context.Background()); err != nil {
		return err
	}
	if r.c.Follow {
		return nil
	}
	return ErrInterrupted
}
