package replay

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kmaterialize/kmaterialize/partition"
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
	End       int64 // end mark: High or LSO, per EndMark, lowered to Config.Until's bound
	// Bounded is true when Config.Until set End below the end mark.
	Bounded bool
}

// Plan is a topic's partition set with the bounds of one replay.
type Plan struct {
	Topic      string
	End        EndMark
	Partitions []PartitionBounds // sorted by partition
	Warnings   []string          // e.g. a start offset below the retained low
	// CapturedAt is when the capture of the marks began: every record
	// below an end mark was written before it.
	CapturedAt time.Time
	// TopicConfig is DescribeConfigs' answer for Config.TopicConfigs; nil
	// when none were asked for.
	TopicConfig *TopicConfig
	// TopicID is the topic's ID (KIP-516) as metadata reported it; zero
	// when the broker reports none.
	TopicID TopicID
	// PartitionsOfTopic is how many partitions the topic had at the
	// capture, Config.Partitions or not.
	PartitionsOfTopic int32
}

// TopicID is a topic's ID (KIP-516): a UUID that changes when a topic is
// deleted and created again under the same name. The zero ID is unknown (a
// broker or protocol without topic IDs) and matches any.
type TopicID [16]byte

// IsZero reports whether the ID is unknown.
func (id TopicID) IsZero() bool { return id == TopicID{} }

// String is the ID as Kafka's tools show it: URL-safe base64 without
// padding (kafka-topics.sh --describe), "unknown" for the zero ID.
func (id TopicID) String() string {
	if id.IsZero() {
		return "unknown"
	}
	return base64.RawURLEncoding.EncodeToString(id[:])
}

// Differs reports whether id and other are both known and not the same
// topic.
func (id TopicID) Differs(other TopicID) bool {
	return !id.IsZero() && !other.IsZero() && id != other
}

// topicIDOf converts the client's UUID, most significant bits first.
func topicIDOf(u kafka.UUID) TopicID {
	var id TopicID
	binary.BigEndian.PutUint64(id[:8], uint64(u.GetMostSignificantBits()))
	binary.BigEndian.PutUint64(id[8:], uint64(u.GetLeastSignificantBits()))
	return id
}

// capture discovers the partitions and captures their marks, without
// resolving starts.
func capture(ctx context.Context, cl *clients, c Config) (Plan, error) {
	captured := time.Now()
	// The first request: a wrong broker address fails it fast.
	wctx, stop := cl.watch.Bind(ctx)
	plan, err := Marks(wctx, cl.admin, c.Topic, c.StallTimeout)
	err = cl.watch.Err(wctx, "metadata", c.Topic, err)
	stop()
	if err == nil {
		cl.watch.Reached()
	}
	plan.End = c.End
	plan.CapturedAt = captured
	var re *Error
	if errors.As(err, &re) && errors.Is(err, ErrUnavailable) {
		re.Detail += fmt.Sprintf(", brokers %s", brokersOf(c))
	}
	if err != nil {
		return plan, err
	}
	plan.PartitionsOfTopic = int32(len(plan.Partitions))
	if c.Partitions != nil {
		if plan.Partitions, err = keepPartitions(c, plan.Partitions); err != nil {
			return plan, err
		}
	}
	for i := range plan.Partitions {
		pb := &plan.Partitions[i]
		pb.Start = pb.Low
		pb.End = pb.High
		if c.End == EndStable {
			pb.End = pb.LSO
		}
	}
	if len(c.TopicConfigs) > 0 {
		plan.TopicConfig = describeTopicConfig(ctx, cl.admin, c.Topic, c.TopicConfigs, c.StallTimeout)
	}
	return plan, nil
}

// keepPartitions returns the bounds of c.Partitions among parts, or an
// ErrPartitionsMissing naming those the topic lacks.
func keepPartitions(c Config, parts []PartitionBounds) ([]PartitionBounds, error) {
	has := make(map[int32]PartitionBounds, len(parts))
	all := make([]int32, 0, len(parts))
	for _, pb := range parts {
		has[pb.Partition] = pb
		all = append(all, pb.Partition)
	}
	var kept []PartitionBounds
	var missing []int32
	for _, p := range c.Partitions {
		pb, ok := has[p]
		if !ok {
			missing = append(missing, p)
			continue
		}
		kept = append(kept, pb)
	}
	if len(missing) > 0 {
		return nil, &Error{Op: "metadata", Topic: c.Topic, Partition: missing[0], Offset: -1, Kind: ErrPartitionsMissing,
			Detail: fmt.Sprintf("the table's partitions %s are not in the topic, which has %d (%s)",
				PartitionSet(missing), len(parts), PartitionSet(all))}
	}
	return kept, nil
}

// Marks discovers topic's partitions from metadata (never creating it) and
// captures each one's leader, retained low, high watermark (read_uncommitted
// ListOffsets) and last stable offset (read_committed ListOffsets). Each of
// these requests is retried on transient errors (see retriable) until it
// has failed for timeout; a missing topic fails at once. Start and End are
// left at zero. The copier uses it too, so both agree on what "the end" of
// a topic is.
func Marks(ctx context.Context, admin *kafka.AdminClient, topic string, timeout time.Duration) (Plan, error) {
	plan := Plan{Topic: topic}
	err := retry(ctx, "metadata", topic, timeout, func(ctx context.Context, t time.Duration) error {
		parts, id, err := describeTopic(ctx, admin, topic, t)
		plan.Partitions, plan.TopicID = parts, id
		return err
	})
	if err != nil {
		return plan, err
	}
	lows, err := listOffsetsRetry(ctx, admin, topic, timeout, plan, kafka.EarliestOffsetSpec, kafka.IsolationLevelReadUncommitted)
	if err != nil {
		return plan, err
	}
	// The high watermark as a read_uncommitted ListOffsets reports it; on a
	// read_committed handle librdkafka's QueryWatermarkOffsets would
	// answer the LSO instead.
	highs, err := listOffsetsRetry(ctx, admin, topic, timeout, plan, kafka.LatestOffsetSpec, kafka.IsolationLevelReadUncommitted)
	if err != nil {
		return plan, err
	}
	lsos, err := listOffsetsRetry(ctx, admin, topic, timeout, plan, kafka.LatestOffsetSpec, kafka.IsolationLevelReadCommitted)
	if err != nil {
		return plan, err
	}
	for i := range plan.Partitions {
		pb := &plan.Partitions[i]
		pb.Low, pb.High, pb.LSO = lows[pb.Partition], highs[pb.Partition], lsos[pb.Partition]
	}
	return plan, nil
}

// describe asks metadata for topic's partitions and their leaders, once. A
// partition without a leader is a retriable error, returned with the
// partitions.
//
// A topic that metadata says does not exist is ErrTopicNotFound, not
// retried: a misspelt topic must fail promptly, and Kafka's metadata answers
// UNKNOWN_TOPIC_OR_PARTITION for an existing topic only in the moment after
// its creation, on a broker whose metadata cache has not caught up, which a
// rebuild of an established topic does not meet. A topic that exists with a
// partition whose leader is missing (an election, a broker restarting) is a
// retriable LEADER_NOT_AVAILABLE.
func describe(ctx context.Context, admin *kafka.AdminClient, topic string, timeout time.Duration) ([]PartitionBounds, error) {
	parts, _, err := describeTopic(ctx, admin, topic, timeout)
	return parts, err
}

// describeTopic is describe that also returns the topic's ID (zero when the
// broker reports none).
func describeTopic(ctx context.Context, admin *kafka.AdminClient, topic string, timeout time.Duration) ([]PartitionBounds, TopicID, error) {
	var id TopicID
	res, err := admin.DescribeTopics(ctx, kafka.NewTopicCollectionOfTopicNames([]string{topic}),
		kafka.SetAdminRequestTimeout(timeout))
	if err != nil {
		return nil, id, wrapErr("metadata", topic, -1, -1, err)
	}
	if len(res.TopicDescriptions) != 1 {
		return nil, id, &Error{Op: "metadata", Topic: topic, Partition: -1, Offset: -1, Kind: ErrKafka,
			Detail: fmt.Sprintf("metadata answered %d topics for one asked", len(res.TopicDescriptions))}
	}
	td := res.TopicDescriptions[0]
	if td.Error.Code() != kafka.ErrNoError {
		return nil, id, wrapErr("metadata", topic, -1, -1, td.Error)
	}
	id = topicIDOf(td.TopicID)
	var parts []PartitionBounds
	for _, p := range td.Partitions {
		leader := int32(-1)
		if p.Leader != nil {
			leader = int32(p.Leader.ID)
		}
		parts = append(parts, PartitionBounds{Partition: int32(p.Partition), Leader: leader})
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].Partition < parts[j].Partition })
	if len(parts) == 0 {
		return nil, id, &Error{Op: "metadata", Topic: topic, Partition: -1, Offset: -1, Kind: ErrTopicNotFound,
			Detail: fmt.Sprintf("topic %q has no partitions", topic)}
	}
	for _, p := range parts {
		if p.Leader < 0 {
			// The partitions are returned with the error: the set is
			// known even while a leader is missing.
			return parts, id, &Error{Op: "metadata", Topic: topic, Partition: p.Partition, Offset: -1, Kind: ErrUnavailable,
				Detail: fmt.Sprintf("partition %d has no leader", p.Partition), Err: errNoLeader}
		}
	}
	return parts, id, nil
}

// LSOs asks for each partition's current last stable offset, once (no
// retry: its callers ask during a stall and report a failure as the
// brokers being unreachable). A negative offset is never returned as an
// LSO.
func LSOs(ctx context.Context, admin *kafka.AdminClient, plan Plan, timeout time.Duration) (map[int32]int64, error) {
	return listOffsets(ctx, admin, plan.Topic, timeout, plan, kafka.LatestOffsetSpec, kafka.IsolationLevelReadCommitted)
}

// listOffsetsRetry is listOffsets retried within timeout (see retry). An
// UNKNOWN_TOPIC_OR_PARTITION answer is retried only while metadata still
// says the topic exists: ListOffsets can reach a broker that has not yet
// learned of a partition, but a topic deleted since discovery is final.
func listOffsetsRetry(ctx context.Context, admin *kafka.AdminClient, topic string, timeout time.Duration, plan Plan, spec kafka.OffsetSpec, iso kafka.IsolationLevel) (map[int32]int64, error) {
	var out map[int32]int64
	err := retry(ctx, "list-offsets", topic, timeout, func(ctx context.Context, t time.Duration) error {
		var err error
		out, err = listOffsets(ctx, admin, topic, t, plan, spec, iso)
		var re *Error
		if !errors.Is(err, ErrTopicNotFound) || !errors.As(err, &re) {
			return err
		}
		if _, derr := describe(ctx, admin, topic, t); derr != nil && errors.Is(derr, ErrTopicNotFound) {
			return &Error{Op: "list-offsets", Topic: topic, Partition: -1, Offset: -1, Kind: ErrTopicNotFound, Reason: ErrTopicDeleted,
				Detail: fmt.Sprintf("topic deleted: %q was deleted after its partitions were discovered", topic), Err: re.Err}
		}
		// Metadata still lists the topic: a broker that has not yet
		// learned of the partition. Retriable, as a missing leader.
		cause := "unknown topic or partition"
		if re.Err != nil {
			cause = re.Err.Error()
		}
		re.Kind, re.Detail = ErrUnavailable, "the partition's broker does not know it yet (metadata lists the topic)"
		re.Err = kafka.NewError(kafka.ErrLeaderNotAvailable, cause, false)
		return re
	})
	return out, err
}

// listOffsets asks ListOffsets for every partition of the plan, once. For
// the earliest and latest specs a negative answer (librdkafka's
// OffsetInvalid, -1001, for a request that got no real answer) is an error,
// never an offset; for a timestamp spec -1 means "no such record" and is
// returned as is.
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
		off := int64(info.Offset)
		if off < 0 && (spec == kafka.EarliestOffsetSpec || spec == kafka.LatestOffsetSpec) {
			return nil, &Error{Op: "list-offsets", Topic: topic, Partition: tp.Partition, Offset: -1, Kind: ErrUnavailable,
				Detail: fmt.Sprintf("ListOffsets gave no offset for partition %d", tp.Partition),
				Err:    kafka.NewError(kafka.ErrTimedOut, "the request got no answer", false)}
		}
		out[tp.Partition] = off
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
		offs, err := listOffsetsRetry(ctx, cl.admin, c.Topic, c.StallTimeout, *plan, kafka.NewOffsetSpecForTimestamp(ms), kafka.IsolationLevelReadUncommitted)
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
	if c.Stop != nil {
		if err := applyStop(c, plan); err != nil {
			return err
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

// resolveEnds applies c.Until to a captured plan, before the starts are
// resolved: each partition ends at the lower of its end mark and its bound.
func resolveEnds(ctx context.Context, cl *clients, c Config, plan *Plan) error {
	u := c.Until
	bad := func(p int32, off int64, format string, args ...any) error {
		return &Error{Op: "end", Topic: c.Topic, Partition: p, Offset: off, Kind: ErrBadEnd, Detail: fmt.Sprintf(format, args...)}
	}
	lower := func(pb *PartitionBounds, end int64) {
		if end < pb.End {
			pb.End, pb.Bounded = end, true
		}
	}
	switch {
	case len(u.Offsets) > 0 && !u.Timestamp.IsZero():
		return bad(-1, -1, "end offsets and an end timestamp are exclusive")
	case len(u.Offsets) > 0:
		byPart := map[int32]*PartitionBounds{}
		for i := range plan.Partitions {
			byPart[plan.Partitions[i].Partition] = &plan.Partitions[i]
		}
		parts := make([]int32, 0, len(u.Offsets))
		for p := range u.Offsets {
			parts = append(parts, p)
		}
		sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
		for _, p := range parts {
			off := u.Offsets[p]
			pb, ok := byPart[p]
			switch {
			case !ok:
				return bad(p, off, "partition %d does not exist (the topic has partitions 0..%d)", p, len(plan.Partitions)-1)
			case off > pb.High:
				return bad(p, off, "end offset %d is above the high mark %d of partition %d", off, pb.High, p)
			case off < 0:
				return bad(p, off, "negative end offset %d", off)
			}
			if s, ok := c.Start.Offsets[p]; ok && off < s {
				return bad(p, off, "end offset %d is below the start offset %d of partition %d", off, s, p)
			}
			if off < pb.Low {
				plan.Warnings = append(plan.Warnings, fmt.Sprintf(
					"partition %d: end offset %d is below the retained low %d; the partition contributes nothing", p, off, pb.Low))
				off = pb.Low
			}
			lower(pb, off)
		}
	case !u.Timestamp.IsZero():
		ms := u.Timestamp.UnixMilli()
		offs, err := listOffsetsRetry(ctx, cl.admin, c.Topic, c.StallTimeout, *plan, kafka.NewOffsetSpecForTimestamp(ms), kafka.IsolationLevelReadUncommitted)
		if err != nil {
			return err
		}
		for i := range plan.Partitions {
			pb := &plan.Partitions[i]
			off := offs[pb.Partition]
			switch {
			case off < 0 || off > pb.High:
				// No record at or after the timestamp (or one that arrived
				// after the high mark was captured): every record is older.
			case off < pb.Low:
				lower(pb, pb.Low)
			default:
				lower(pb, off)
			}
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

// PartitionSet writes a set of partition numbers compactly, runs as ranges:
// "0-2", "0-2,5", "4" (partition.FormatSet). ps need not be sorted.
func PartitionSet(ps []int32) string { return partition.FormatSet(ps) }

// brokersOf names the bootstrap brokers of c, for messages.
func brokersOf(c Config) string {
	if c.Brokers != "" {
		return c.Brokers
	}
	return c.Props["bootstrap.servers"]
}

// applyStop ends each partition at c.Stop's offset; a partition it does
// not name reads nothing.
func applyStop(c Config, plan *Plan) error {
	for i := range plan.Partitions {
		pb := &plan.Partitions[i]
		until, ok := c.Stop[pb.Partition]
		switch {
		case !ok:
			pb.End = pb.Start
		case until > pb.High:
			return &Error{Op: "start", Topic: c.Topic, Partition: pb.Partition, Offset: until, Kind: ErrBadStart,
				Detail: fmt.Sprintf("end offset %d is above the high mark %d of partition %d", until, pb.High, pb.Partition)}
		default:
			pb.End = max(until, pb.Start)
		}
	}
	return nil
}
