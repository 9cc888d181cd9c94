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

// ErrStaleCheckpoint is returned (as a *StaleCheckpointError) by Update
// when the table's checkpoint cannot be continued correctly: records it has
// not read were deleted (a checkpoint below a partition's retained low),
// the partition is gone or shorter than the checkpoint (the topic was
// recreated), or the topic is compacted and the checkpoint older than its
// delete.retention.ms (tombstones it has not read may be gone), of unknown
// age, or the topic's configuration cannot be read. Nothing is read or
// published; UpdateOptions.RebuildIfNeeded rebuilds instead.
var ErrStaleCheckpoint = errors.New("the checkpoint cannot be continued")

// StaleCheckpointError says why a checkpoint cannot be continued. It
// matches ErrStaleCheckpoint.
type StaleCheckpointError struct {
	Table     string
	Topic     string
	Partition int32 // -1 when it is not about one partition
	// Checkpoint and Low are the partition's checkpoint and retained low,
	// for a checkpoint below the low; -1 otherwise.
	Checkpoint int64
	Low        int64
	Reason     string
}

// Error returns e.g. `update of table "balances": partition 1: checkpoint
// 120 is below the retained low 300 (records were deleted before the
// update read them); the table is unchanged; a full rebuild is needed
// (--rebuild-if-needed runs one)`.
func (e *StaleCheckpointError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "update of table %q from topic %q: ", e.Table, e.Topic)
	if e.Partition >= 0 {
		fmt.Fprintf(&b, "partition %d: ", e.Partition)
	}
	b.WriteString(e.Reason)
	b.WriteString("; the table is unchanged; a full rebuild is needed (--rebuild-if-needed runs one)")
	return b.String()
}

// Is reports whether target is ErrStaleCheckpoint.
func (e *StaleCheckpointError) Is(target error) bool { return target == ErrStaleCheckpoint }

// checkContinues is an update's replay.Config.Check: it refuses a plan the
// checkpoint cp does not continue, at time now.
func checkContinues(table string, cp checkpoint.Checkpoint, plan replay.Plan, now time.Time) error {
	stale := func(p int32, reason string, args ...any) *StaleCheckpointError {
		return &StaleCheckpointError{Table: table, Topic: plan.Topic, Partition: p, Checkpoint: -1, Low: -1, Reason: fmt.Sprintf(reason, args...)}
	}
	bounds := map[int32]replay.PartitionBounds{}
	for _, pb := range plan.Partitions {
		bounds[pb.Partition] = pb
	}
	for _, p := range cp.Partitions {
		pb, ok := bounds[p.Partition]
		switch {
		case !ok:
			return stale(p.Partition, "the partition no longer exists (the topic has %d partitions): the topic was recreated", len(plan.Partitions))
		case p.End < pb.Low:
			e := stale(p.Partition, "checkpoint %d is below the retained low %d (records were deleted before an update read them)", p.End, pb.Low)
			e.Checkpoint, e.Low = p.End, pb.Low
			return e
		case p.End > pb.High:
			return stale(p.Partition, "checkpoint %d is past the high watermark %d (the topic was recreated or truncated)", p.End, pb.High)
		}
	}
	tc := plan.TopicConfig
	if tc == nil {
		return nil
	}
	if tc.Err != nil {
		return stale(-1, "the topic's configuration cannot be read, so whether compaction removed tombstones since the checkpoint cannot be told (DescribeConfigs: %v; the principal needs the DescribeConfigs ACL on the topic)", tc.Err)
	}
	policy, ok := tc.Values[configCleanupPolicy]
	if !ok {
		return stale(-1, "DescribeConfigs did not answer %s, so whether the topic is compacted cannot be told", configCleanupPolicy)
	}
	if !compacted(policy) {
		return nil
	}
	v, ok := tc.Values[configDeleteRetention]
	ms, err := strconv.ParseInt(v, 10, 64)
	if !ok || err != nil || ms < 0 {
		return stale(-1, "the topic is compacted and its %s (%q) cannot be read", configDeleteRetention, v)
	}
	retention := time.Duration(ms) * time.Millisecond
	if cp.CapturedAt.IsZero() {
		return stale(-1, "the topic is compacted (%s=%d) and the checkpoint's age is unknown (an imported table): tombstones written since may be gone", configDeleteRetention, ms)
	}
	if age := now.Sub(cp.CapturedAt); age > retention {
		return stale(-1, "the topic is compacted and the checkpoint, captured %s ago at %s, is older than %s=%d (%s): tombstones written since may be gone",
			age.Round(time.Millisecond), cp.CapturedAt.UTC().Format(time.RFC3339), configDeleteRetention, ms, retention)
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
