package materialize

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/replay"
)

// ErrStaleCheckpoint is returned (as a *StaleCheckpointError) by Update,
// KeepCurrent and a followed table's rebuild (its catch-up) when the table's
// checkpoint cannot be continued correctly: the topic was deleted and
// created again (its topic ID changed), records it has not read were
// deleted (a checkpoint below a partition's retained low), the partition
// is gone or shorter than the checkpoint (the topic was recreated), or the
// topic is compacted and the checkpoint older than its delete.retention.ms
// (tombstones it has not read may be gone), of unknown age, or the topic's
// configuration cannot be read. Nothing is read or published;
// UpdateOptions.RebuildIfNeeded (the daemon's rebuild_if_needed) rebuilds
// instead.
var ErrStaleCheckpoint = errors.New("the checkpoint cannot be continued")

// What continued a checkpoint (StaleCheckpointError.Op).
const (
	OpUpdate  = "update"   // an incremental update (the default)
	OpFollow  = "follow"   // a follower, at its start or while it runs
	OpCatchUp = "catch-up" // a followed table's rebuild reading on to the follower's positions
)

// StaleCheckpointError says why a checkpoint cannot be continued. It
// matches ErrStaleCheckpoint, and for a checkpoint below the retained low
// also replay.ErrRecordsRemoved and replay.ErrCheckpointBelowLow.
type StaleCheckpointError struct {
	Op        string // OpUpdate ("" too), OpFollow or OpCatchUp
	Table     string
	Topic     string
	Partition int32 // -1 when it is not about one partition
	// Checkpoint and Low are the partition's checkpoint and retained low,
	// for a checkpoint below the low; -1 otherwise.
	Checkpoint int64
	Low        int64
	Reason     string
	// Err is the error that made the check impossible, when one did: the
	// topic configuration's DescribeConfigs error (a refusal when the
	// principal lacks the ACL, which the CLI maps to exit 5, not 4).
	Err error
}

// Error returns e.g. `update of table "balances" from topic "b": partition
// 1: checkpoint 120 is below the retained low 300 (records were deleted
// before an update read them); the table is unchanged; a full rebuild is
// needed (--rebuild-if-needed runs one)`.
func (e *StaleCheckpointError) Error() string {
	var b strings.Builder
	op := e.Op
	if op == "" {
		op = OpUpdate
	}
	fmt.Fprintf(&b, "%s of table %q from topic %q: ", op, e.Table, e.Topic)
	if e.Partition >= 0 {
		fmt.Fprintf(&b, "partition %d: ", e.Partition)
	}
	b.WriteString(e.Reason)
	switch op {
	case OpFollow:
		b.WriteString("; following stopped and the table stays as last applied; a full rebuild is needed (rebuild_if_needed: true in the daemon's config runs one)")
	case OpCatchUp:
		b.WriteString("; the rebuild published nothing and the table stays as last applied; rebuild it again")
	default:
		b.WriteString("; the table is unchanged; a full rebuild is needed (--rebuild-if-needed runs one)")
	}
	return b.String()
}

// Is reports whether target is ErrStaleCheckpoint, or, for a checkpoint
// below the retained low, replay.ErrRecordsRemoved or
// replay.ErrCheckpointBelowLow.
func (e *StaleCheckpointError) Is(target error) bool {
	if target == ErrStaleCheckpoint {
		return true
	}
	return e.Low >= 0 && (target == replay.ErrRecordsRemoved || target == replay.ErrCheckpointBelowLow)
}

// Unwrap returns the error that made the check impossible, or nil.
func (e *StaleCheckpointError) Unwrap() error { return e.Err }

// stale is a *StaleCheckpointError of op on table's topic.
func stale(op, table, topic string, p int32, reason string, args ...any) *StaleCheckpointError {
	return &StaleCheckpointError{Op: op, Table: table, Topic: topic, Partition: p, Checkpoint: -1, Low: -1, Reason: fmt.Sprintf(reason, args...)}
}

// checkContinues is the continuation check of an update, a follower and a
// rebuild's catch-up (their replay.Config.Check): it refuses, for op, a
// plan the checkpoint cp does not continue, at time now. Its parts are
// checkTopicID, checkRepartition, checkPositions and checkRetention, in that order (a
// recreated topic is named as such, not as a position past its end).
func checkContinues(op, table string, cp checkpoint.Checkpoint, plan replay.Plan, now time.Time) error {
	if err := checkTopicID(op, table, cp, plan.Topic, plan.TopicID); err != nil {
		return err
	}
	if err := checkRepartition(op, table, cp, plan); err != nil {
		return err
	}
	if err := checkPositions(op, table, cp, plan); err != nil {
		return err
	}
	return checkRetention(op, table, plan.Topic, cp.CapturedAt, plan.TopicConfig, now)
}

// checkTopicID refuses a topic whose ID is not the checkpoint's: the topic
// was deleted and created again, and cp's positions are of the old log. An
// unknown (zero) ID on either side is no mismatch.
func checkTopicID(op, table string, cp checkpoint.Checkpoint, topic string, id replay.TopicID) error {
	was := replay.TopicID(cp.TopicID)
	if !was.Differs(id) {
		return nil
	}
	return stale(op, table, topic, -1, "topic %s was recreated: id %s, now %s (the checkpoint's positions are of the deleted topic's log)", topic, was, id)
}

// checkPositions refuses a checkpoint below a partition's retained low,
// past its high watermark, or of a partition the topic no longer has.
func checkPositions(op, table string, cp checkpoint.Checkpoint, plan replay.Plan) error {
	bounds := map[int32]replay.PartitionBounds{}
	for _, pb := range plan.Partitions {
		bounds[pb.Partition] = pb
	}
	for _, p := range cp.Partitions {
		pb, ok := bounds[p.Partition]
		switch {
		case !ok:
			return stale(op, table, plan.Topic, p.Partition, "the partition no longer exists (the topic has %d partitions): the topic was recreated", len(plan.Partitions))
		case p.End < pb.Low:
			e := stale(op, table, plan.Topic, p.Partition, "checkpoint %d is below the retained low %d (records %d..%d were deleted before the %s read them)",
				p.End, pb.Low, p.End, pb.Low-1, opNoun(op))
			e.Checkpoint, e.Low = p.End, pb.Low
			return e
		case p.End > pb.High:
			return stale(op, table, plan.Topic, p.Partition, "checkpoint %d is past the high watermark %d (the topic was recreated or truncated)", p.End, pb.High)
		}
	}
	return nil
}

// opNoun names what reads on from a checkpoint, for messages.
func opNoun(op string) string {
	switch op {
	case OpFollow:
		return "follower"
	case OpCatchUp:
		return "rebuild's catch-up"
	}
	return "update"
}

// checkRetention refuses, on a compacted topic (per tc, DescribeConfigs'
// answer), a checkpoint captured longer than delete.retention.ms before now,
// or of unknown age, and a configuration that cannot be read; nil tc (not
// asked) passes.
func checkRetention(op, table, topic string, capturedAt time.Time, tc *replay.TopicConfig, now time.Time) error {
	if tc == nil {
		return nil
	}
	if tc.Err != nil {
		e := stale(op, table, topic, -1, "the topic's configuration cannot be read, so whether compaction removed tombstones since the checkpoint cannot be told (DescribeConfigs: %v; the principal needs the DescribeConfigs ACL on the topic)", tc.Err)
		e.Err = tc.Err
		return e
	}
	policy, ok := tc.Values[configCleanupPolicy]
	if !ok {
		return stale(op, table, topic, -1, "DescribeConfigs did not answer %s, so whether the topic is compacted cannot be told", configCleanupPolicy)
	}
	if !compacted(policy) {
		return nil
	}
	v, ok := tc.Values[configDeleteRetention]
	ms, err := strconv.ParseInt(v, 10, 64)
	if !ok || err != nil || ms < 0 {
		return stale(op, table, topic, -1, "the topic is compacted and its %s (%q) cannot be read", configDeleteRetention, v)
	}
	retention := time.Duration(ms) * time.Millisecond
	if capturedAt.IsZero() {
		return stale(op, table, topic, -1, "the topic is compacted (%s=%d) and the checkpoint's age is unknown (an imported table): tombstones written since may be gone", configDeleteRetention, ms)
	}
	if age := now.Sub(capturedAt); age > retention {
		return stale(op, table, topic, -1, "the topic is compacted and the checkpoint, captured %s ago at %s, is older than %s=%d (%s): tombstones written since may be gone",
			age.Round(time.Millisecond), capturedAt.UTC().Format(time.RFC3339), configDeleteRetention, ms, retention)
	}
	return nil
}

// compacted reports whether a cleanup.policy ("compact", "delete",
// "compact,delete") includes compaction.
func compacted(policy string) bool {
	for _, p := range strings.Split(policy, ",") {
		if strings.TrimSpace(p) == "compact" {
			return true
		}
	}
	return false
}

// compactedRetention returns the delete.retention.ms of a compacted topic as
// the plan's topic configuration says it, 0 when the topic is not
// compacted or the configuration is unknown (checkContinues refuses those).
func compactedRetention(plan replay.Plan) time.Duration {
	tc := plan.TopicConfig
	if tc == nil || tc.Err != nil || !compacted(tc.Values[configCleanupPolicy]) {
		return 0
	}
	ms, err := strconv.ParseInt(tc.Values[configDeleteRetention], 10, 64)
	if err != nil || ms < 0 {
		return 0
	}
	// 0 ms is as old as can be: any age is past it.
	return max(time.Duration(ms)*time.Millisecond, time.Nanosecond)
}
