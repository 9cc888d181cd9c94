package copier

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kmaterialize/kmaterialize/internal/failpoint"
)

// The transaction state machine. A copier is either between transactions
// (inTxn false) or in one; every way out of a transaction is one of:
//
//	commit   endTxn: send the positions, commit; the partitions' committed
//	         offsets move to their positions.
//	abort    abort: after an abortable error or a revocation; every assigned
//	         partition is rewound to its committed offset before anything
//	         else is read, so the aborted records are read again.
//	fail     a fatal error (fencing among them): the copy stops; nothing of
//	         the open transaction is visible, and the group did not move.
//
// A commit whose outcome is unknown (it timed out) is retried as a commit,
// never aborted.

func (r *copyRun) beginTxn() error {
	if err := r.p.BeginTransaction(); err != nil {
		return r.classifyFatal("begin transaction", err)
	}
	r.inTxn = true
	r.txnStarted = time.Now()
	r.batch = 0
	return nil
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
		// The batch goes to the broker before it is aborted: librdkafka
		// purges at an abort whatever it has not sent yet, and --abort is
		// there to take the all-or-nothing path on the cluster, records
		// in the destination's log and then aborted, not discarded in
		// the client. (Without this flush most batches never left it.)
		if err := r.flush(); err != nil {
			return err
		}
		if err := r.abortCall(ctx); err != nil {
			return r.classifyFatal("abort transaction", err)
		}
		r.sum.Records += r.batch
		r.sum.Transactions++
		r.inTxn, r.batch = false, 0
		for _, p := range r.parts {
			p.endTxn()
		}
		r.progress = time.Now()
		return nil
	}
	if r.batch > 0 {
		// A crash here leaves an open transaction: aborted by the next
		// copier with this transactional id, its records copied again.
		failpoint.Hit(failpoint.CopyProduced)
	}
	var offsets []kafka.TopicPartition
	for _, p := range r.parts {
		if p.ahead() {
			offsets = append(offsets, kafka.TopicPartition{Topic: &r.c.From, Partition: p.id, Offset: kafka.Offset(p.pos)})
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
	// A crash here aborts the pending offsets with the records.
	failpoint.Hit(failpoint.CopyCommitBefore)
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
	// A crash here leaves the transaction committed, group included.
	failpoint.Hit(failpoint.CopyCommitAfter)
	for _, tp := range offsets {
		r.parts[tp.Partition].committedTo(int64(tp.Offset))
	}
	for _, p := range r.parts {
		p.endTxn()
	}
	r.sum.Records += r.batch
	if r.batch > 0 || len(offsets) > 0 {
		r.sum.Transactions++
	}
	r.inTxn, r.batch = false, 0
	r.progress = time.Now()
	return nil
}

// flush waits until the producer has sent everything handed to it (each
// record is acknowledged by the broker or has failed), for at most
// StallTimeout.
func (r *copyRun) flush() error {
	deadline := time.Now().Add(r.c.StallTimeout)
	for {
		left := r.p.Flush(100)
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("send the transaction's records to %s before aborting it: %d still not acknowledged after %s",
				r.c.To, left, r.c.StallTimeout)
		}
	}
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
		if !retriable(err) || time.Now().After(deadline) {
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

// retriable reports whether a transactional call that failed with err may
// simply be called again.
func retriable(err error) bool {
	var ke kafka.Error
	return errors.As(err, &ke) && ke.IsRetriable() && !ke.IsFatal() && !ke.TxnRequiresAbort()
}

// abortCall aborts the open transaction. Unlike the other calls it is not
// bounded by CallTimeout: the context carries no deadline, which
// confluent-kafka-go passes to librdkafka as -1, "the remaining transaction
// timeout", the bound rdkafka.h recommends. A shorter bound would only give
// up while the abort goes on in the background, and retrying it would start
// a second wait for the same abort. A retriable failure (the coordinator
// still unreachable when the transaction timed out) is retried until
// StallTimeout has passed.
func (r *copyRun) abortCall(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	deadline := time.Now().Add(r.c.StallTimeout)
	for {
		err := r.p.AbortTransaction(ctx)
		if err == nil || !retriable(err) || time.Now().After(deadline) {
			return err
		}
		r.sum.Retries++
		r.log.Warn().Err(err).Str("op", "abort transaction").Msg("retriable error, retrying")
		time.Sleep(100 * time.Millisecond)
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
	if aerr := r.abort(ctx, op+" failed"); aerr != nil {
		return aerr
	}
	r.sum.Aborts++
	return nil
}

// abort aborts the open transaction and rewinds every assigned partition to
// its committed offset (or, with none, to where this copier began reading
// it). Every partition, not only those with records in the transaction:
// the record whose produce failed was already taken from the consumer, and
// its partition may have nothing else in the transaction.
func (r *copyRun) abort(ctx context.Context, why string) error {
	if err := r.abortCall(ctx); err != nil {
		return r.classifyFatal("abort transaction ("+why+")", err)
	}
	r.inTxn, r.batch = false, 0
	for _, p := range r.parts {
		to, ok := p.rewind()
		if !ok {
			continue
		}
		if err := r.cons.Seek(kafka.TopicPartition{Topic: &r.c.From, Partition: p.id, Offset: kafka.Offset(to)}, 0); err != nil {
			return fmt.Errorf("rewind %s/%d to %d after an abort (%s): %w", r.c.From, p.id, to, why, err)
		}
	}
	return nil
}

func (r *copyRun) classifyFatal(op string, err error) error {
	var ke kafka.Error
	if errors.As(err, &ke) {
		switch code := ke.Code(); {
		case code == kafka.ErrFenced, code == kafka.ErrProducerFenced, code == kafka.ErrInvalidProducerEpoch, code == kafka.ErrFencedInstanceID:
			return fmt.Errorf("%s: %w (transactional id %q): %w", op, ErrFenced, r.c.TransactionalID, err)
		case authorizationRefused(code):
			return fmt.Errorf("%s: %w (transactional id %q, group %q): %w", op, ErrUnauthorized, r.c.TransactionalID, r.c.Group, err)
		}
		if ke.IsFatal() {
			return fmt.Errorf("%s: %w: %w", op, ErrFatal, err)
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// consumerError decides whether an error event of the consumer ends the
// copy. A refusal by the broker's authorizer is not transient: librdkafka
// reports GROUP_AUTHORIZATION_FAILED (no Read on --group: the join and the
// coordinator lookup are refused) and TOPIC_AUTHORIZATION_FAILED as
// ordinary errors and keeps retrying, and a copy without the ACL would
// retry past --stall-timeout instead of failing (exit 5) naming it.
func (r *copyRun) consumerError(err error) error {
	var ke kafka.Error
	if errors.As(err, &ke) && (ke.IsFatal() || ke.Code() == kafka.ErrFencedInstanceID || authorizationRefused(ke.Code())) {
		r.consumerFatal = true
		return r.classifyFatal("consume", err)
	}
	r.log.Warn().Err(err).Msg("consumer error (retrying)")
	return nil
}

// authorizationRefused reports whether code is the broker refusing the
// copier's principal (an ACL missing, or SASL credentials refused).
func authorizationRefused(code kafka.ErrorCode) bool {
	switch code {
	case kafka.ErrTransactionalIDAuthorizationFailed, kafka.ErrTopicAuthorizationFailed,
		kafka.ErrGroupAuthorizationFailed, kafka.ErrClusterAuthorizationFailed, kafka.ErrSaslAuthenticationFailed:
		return true
	}
	return false
}
