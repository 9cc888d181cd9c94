package replay

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// PartitionBounds are one partition's marks, captured once at the start of a
// replay, and the replay's resolved range [Start, End) over it.
type PartitionBounds struct {
	Partition int32
	Leader    int32
	Low       int64 // retained low (earliest offset)
	High      int64 // high watermark (read_uncommitted latest offset)
	LSO       int64 // last stable offset (read_committed latest offset)
	Start     int64 // first offset to read
	End       int64 // end mark: High or LSO, per EndMark
}

// Plan is a topic's partition set with the bounds of one replay.
type Plan struct {
	Topic      string
	End        EndMark
	Partitions []PartitionBounds // sorted by partition
	Warnings   []string          // e.g. a start offset below the retained low
}

// capture discovers the partitions and captures their marks, without
// resolving starts.
func capture(ctx context.Context, cl *clients, c Config) (Plan, error) {
	plan, err := Marks(ctx, cl.admin, c.Topic, c.StallTimeout)
	plan.End = c.End
	var re *Error
	if errors.As(err, &re) && errors.Is(err, ErrUnavailable) {
		re.Detail += fmt.Sprintf(" after %s, brokers %s", c.StallTimeout, c.Brokers)
	}
	if err != nil {
		return plan, err
	}
	for i := range plan.Partitions {
		pb := &plan.Partitions[i]
		pb.Start = pb.Low
		pb.End = pb.High
		if c.End == EndStable {
			pb.End = pb.LSO
		}
	}
	return plan, nil
}

// Marks discovers topic's partitions from metadata (never creating it) and
// captures each one's leader, retained low, high watermark (read_uncommitted
// ListOffsets) and last stable offset (read_committed ListOffsets), each
// request bounded by timeout. Start and End are left at zero. The copier
// uses it too, so both agree on what "the end" of a topic is.
func Marks(ctx context.Context, admin *kafka.AdminClient, topic string, timeout time.Duration) (Plan, error) {
	plan := Plan{Topic: topic}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := admin.DescribeTopics(tctx, kafka.NewTopicCollectionOfTopicNames([]string{topic}),
		kafka.SetAdminRequestTimeout(timeout))
	if err != nil {
		return plan, wrapErr("metadata", topic, -1, -1, err)
	}
	if len(res.TopicDescriptions) != 1 {
		return plan, &Error{Op: "metadata", Topic: topic, Partition: -1, Offset: -1, Kind: ErrKafka,
			Detail: fmt.Sprintf("metadata answered %d topics for one asked", len(res.TopicDescriptions))}
	}
	td := res.TopicDescriptions[0]
	if td.Error.Code() != kafka.ErrNoError {
		return plan, wrapErr("metadata", topic, -1, -1, td.Error)
	}
	for _, p := range td.Partitions {
		leader := int32(-1)
		if p.Leader != nil {
			leader = int32(p.Leader.ID)
		}
		plan.Partitions = append(plan.Partitions, PartitionBounds{Partition: int32(p.Partition), Leader: leader})
	}
	sort.Slice(plan.Partitions, func(i, j int) bool { return plan.Partitions[i].Partition < plan.Partitions[j].Partition })
	if len(plan.Partitions) == 0 {
		return plan, &Error{Op: "metadata", Topic: topic, Partition: -1, Offset: -1, Kind: ErrTopicNotFound,
			Detail: fmt.Sprintf("topic %q has no partitions", topic)}
	}
	lows, err := listOffsets(ctx, admin, topic, timeout, plan, kafka.EarliestOffsetSpec, kafka.IsolationLevelReadUncommitted)
	if err != nil {
		return plan, err
	}
	// The high watermark as a read_uncommitted ListOffsets reports it; on a
	// read_committed handle librdkafka's QueryWatermarkOffsets would
	// answer the LSO instead.
	highs, err := listOffsets(ctx, admin, topic, timeout, plan, kafka.LatestOffsetSpec, kafka.IsolationLevelReadUncommitted)
	if err != nil {
		return plan, err
	}
	lsos, err := listOffsets(ctx, admin, topic, timeout, plan, kafka.LatestOffsetSpec, kafka.IsolationLevelReadCommitted)
	if err != nil {
		return plan, err
	}
	for i := range plan.Partitions {
		pb := &plan.Partitions[i]
		pb.Low, pb.High, pb.LSO = lows[pb.Partition], highs[pb.Partition], lsos[pb.Partition]
	}
	return plan, nil
}

// LSOs asks for each partition's current last stable offset.
func LSOs(ctx context.Context, admin *kafka.AdminClient, plan Plan, timeout time.Duration) (map[int32]int64, error) {
	return listOffsets(ctx, admin, plan.Topic, timeout, plan, kafka.LatestOffsetSpec, kafka.IsolationLevelReadCommitted)
}

// listOffsets asks ListOffsets for every partition of the plan.
func listOffsets(ctx context.Context, admin *kafka.AdminClient, topic string, timeout time.Duration, plan Plan, spec kafka.OffsetSpec, iso kafka.IsolationLevel) (map[int32]int64, error) {
	req := make(map[kafka.TopicPartition]kafka.OffsetSpec, len(plan.Partitions))
	for _, p := range plan.Partitions {
		req[kafka.TopicPartition{Topic: &topic, Partition: p.Partition}] = spec
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := admin.ListOffsets(tctx, req, kafka.SetAdminIsolationLevel(iso),
		kafka.SetAdminRequestTimeout(timeout))
	if err != nil {
		return nil, wrapErr("list-offsets", topic, -1, -1, err)
	}
	out := make(map[int32]int64, len(res.ResultInfos))
	for tp, info := range res.ResultInfos {
		if info.Error.Code() != kafka.ErrNoError {
			return nil, wrapErr("list-offsets", topic, tp.Partition, -1, info.Error)
		}
		out[tp.Partition] = int64(info.Offset)
	}
	for _, p := range plan.Partitions {
		if _, ok := out[p.Partition]; !ok {
			return nil, &Error{Op: "list-offsets", Topic: topic, Partition: p.Partition, Offset: -1, Kind: ErrKafka,
				Detail: "ListOffsets answered nothing for this partition"}
		}
	}
	return out, nil
}

// resolveStarts applies c.Start to a captured plan.
func resolveStarts(ctx context.Context, cl *clients, c Config, plan *Plan) error {
	byPart := map[int32]*PartitionBounds{}
	for i := range plan.Partitions {
		byPart[plan.Partitions[i].Partition] = &plan.Partitions[i]
	}
	switch {
	case len(c.Start.Offsets) > 0 && !c.Start.Timestamp.IsZero():
		return &Error{Op: "start", Topic: c.Topic, Partition: -1, Offset: -1, Kind: ErrBadStart,
			Detail: "start offsets and a start timestamp are exclusive"}
	case len(c.Start.Offsets) > 0:
		parts := make([]int32, 0, len(c.Start.Offsets))
		for p := range c.Start.Offsets {
			parts = append(parts, p)
		}
		sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
		for _, p := range parts {
			off := c.Start.Offsets[p]
			pb, ok := byPart[p]
			if !ok {
				return &Error{Op: "start", Topic: c.Topic, Partition: p, Offset: off, Kind: ErrBadStart,
					Detail: fmt.Sprintf("partition %d does not exist (the topic has partitions 0..%d)", p, len(plan.Partitions)-1)}
			}
			switch {
			case off > pb.High:
				return &Error{Op: "start", Topic: c.Topic, Partition: p, Offset: off, Kind: ErrBadStart,
					Detail: fmt.Sprintf("start offset %d is above the high mark %d of partition %d", off, pb.High, p)}
			case off < pb.Low:
				plan.Warnings = append(plan.Warnings, fmt.Sprintf(
					"partition %d: start offset %d is below the retained low %d; starting at %d", p, off, pb.Low, pb.Low))
				pb.Start = pb.Low
			default:
				pb.Start = off
			}
		}
	case !c.Start.Timestamp.IsZero():
		ms := c.Start.Timestamp.UnixMilli()
		offs, err := listOffsets(ctx, cl.admin, c.Topic, c.StallTimeout, *plan, kafka.NewOffsetSpecForTimestamp(ms), kafka.IsolationLevelReadUncommitted)
		if err != nil {
			return err
		}
		for i := range plan.Partitions {
			pb := &plan.Partitions[i]
			off := offs[pb.Partition]
			switch {
			case off < 0 || off > pb.High:
				// No record at or after the timestamp (or one that arrived
				// after the high mark was captured): nothing to read.
				pb.Start = pb.High
			case off < pb.Low:
				pb.Start = pb.Low
			default:
				pb.Start = off
			}
		}
	}
	// With --end stable a start between LSO and high reads nothing.
	for i := range plan.Partitions {
		pb := &plan.Partitions[i]
		if pb.Start > pb.End {
			pb.End = pb.Start
		}
	}
	return nil
}

// Inspect captures a topic's partitions and marks without reading records:
// the read-only view behind `describe`.
func Inspect(ctx context.Context, c Config) (Plan, error) {
	c = c.withDefaults()
	cl, err := newClients(c)
	if err != nil {
		return Plan{}, err
	}
	defer cl.Close()
	return capture(ctx, cl, c)
}
