package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Retrying the capture requests (metadata, ListOffsets) within the stall
// budget. A partition leader moving, a broker restarting or a leader
// election answers LEADER_NOT_AVAILABLE or NOT_LEADER_OR_FOLLOWER for a
// moment; failing the whole rebuild on the first such answer would turn a
// routine broker roll into a failed cron job. Only an error that persists for
// the whole budget is ErrUnavailable.

const (
	retryBackoffMin = 100 * time.Millisecond
	retryBackoffMax = time.Second
)

// retriable reports whether err may succeed on another attempt: the client
// timed out or lost its connection, or the broker answered with a transient
// (leadership, availability) code. Authorization failures, fatal errors and
// an unknown topic are not retriable: the first is the operator's to fix,
// the last is decided by the caller, which knows whether metadata said the
// topic exists.
func retriable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true // our own per-attempt bound: "no answer in time"
	}
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return false
	}
	if ke.IsFatal() {
		return false
	}
	switch ke.Code() {
	case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic, kafka.ErrUnknownTopicID:
		return false
	case kafka.ErrTopicAuthorizationFailed, kafka.ErrClusterAuthorizationFailed,
		kafka.ErrGroupAuthorizationFailed, kafka.ErrSaslAuthenticationFailed,
		kafka.ErrAuthentication, kafka.ErrSsl:
		return false
	case kafka.ErrLeaderNotAvailable, kafka.ErrNotLeaderForPartition, kafka.ErrReplicaNotAvailable,
		kafka.ErrOffsetNotAvailable, kafka.ErrUnknownLeaderEpoch, kafka.ErrFencedLeaderEpoch,
		kafka.ErrKafkaStorageError, kafka.ErrNetworkException, kafka.ErrBrokerNotAvailable,
		kafka.ErrRequestTimedOut, kafka.ErrNotController, kafka.ErrPreferredLeaderNotAvailable,
		kafka.ErrTransport, kafka.ErrAllBrokersDown, kafka.ErrTimedOut, kafka.ErrTimedOutQueue,
		kafka.ErrResolve, kafka.ErrWaitCoord:
		return true
	}
	return ke.IsRetriable() || ke.IsTimeout()
}

// errNoLeader is the cause recorded when metadata names a partition without
// a leader (Kafka reports it as leader -1, with or without an error code).
var errNoLeader = kafka.NewError(kafka.ErrLeaderNotAvailable, "partition has no leader", false)

// retry runs attempt until it returns nil, an error retriable does not
// accept, or budget has passed since the first attempt, sleeping a doubling
// backoff (100ms to 1s, and never past the budget) between attempts. Each
// attempt gets the remaining budget (at least retryBackoffMin) as its own
// timeout. A budget exhausted by retriable errors is an *Error of kind
// ErrUnavailable that says, truthfully, how long and how many attempts
// failed; other errors are returned as attempt returned them.
func retry(ctx context.Context, op, topic string, budget time.Duration, attempt func(ctx context.Context, timeout time.Duration) error) error {
	start := time.Now()
	backoff := retryBackoffMin
	for n := 1; ; n++ {
		remaining := max(budget-time.Since(start), retryBackoffMin)
		actx, cancel := context.WithTimeout(ctx, remaining)
		err := attempt(actx, remaining)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s %s interrupted: %w", op, topic, ctx.Err())
		}
		cause := err
		var re *Error
		if errors.As(err, &re) && re.Err != nil {
			cause = re.Err
		}
		if !retriable(cause) {
			return err
		}
		elapsed := time.Since(start)
		if elapsed >= budget {
			partition, offset := int32(-1), int64(-1)
			if re != nil {
				partition, offset = re.Partition, re.Offset
			}
			return &Error{Op: op, Topic: topic, Partition: partition, Offset: offset, Kind: ErrUnavailable, Err: cause,
				Detail: fmt.Sprintf("Kafka unavailable: failed for %s over %s",
					elapsed.Round(time.Millisecond), plural(n, "attempt"))}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s %s interrupted: %w", op, topic, ctx.Err())
		case <-time.After(min(backoff, budget-elapsed)):
		}
		backoff = min(2*backoff, retryBackoffMax)
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
