package replay

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// ErrGroupNotFound is returned by GroupLag when the group has no committed
// offset at all (on the topic asked, when one is): a misspelt group, or one
// that never committed.
var ErrGroupNotFound = errors.New("consumer group has no committed offsets")

// GroupPartition is one partition's committed offset of a group and its
// lag behind the high watermark.
type GroupPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Committed is the group's committed offset; nil when the group has
	// none for the partition.
	Committed *int64 `json:"committed"`
	// Metadata is the commit's metadata string, as the consumer wrote it.
	Metadata string `json:"metadata,omitempty"`
	Low      int64  `json:"low"`
	High     int64  `json:"high"`
	// Lag is High - Committed (0 when the committed offset is at or past
	// the high watermark); nil without a committed offset.
	Lag *int64 `json:"lag"`
}

// GroupLag returns the committed offsets of group with each partition's lag,
// sorted by topic and partition: of c.Topic's partitions when c.Topic is
// set (a partition without a commit has a nil Committed), else of every
// topic the group committed on. It is read-only: it asks for the group's
// offsets (OffsetFetch, through the admin API) and the partitions' marks
// (ListOffsets), and never joins, commits to or changes the group.
func GroupLag(ctx context.Context, c Config, group string) ([]GroupPartition, error) {
	c = c.withDefaults()
	cl, err := newClients(c)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var res kafka.ListConsumerGroupOffsetsResult
	// The first request: a wrong broker address fails it fast.
	wctx, stop := cl.watch.Bind(ctx)
	defer stop()
	err = retry(wctx, "list-group-offsets", c.Topic, c.StallTimeout, func(ctx context.Context, t time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, t)
		defer cancel()
		var err error
		res, err = cl.admin.ListConsumerGroupOffsets(ctx, []kafka.ConsumerGroupTopicPartitions{{Group: group}},
			kafka.SetAdminRequireStableOffsets(false))
		if err == nil && len(res.ConsumerGroupsTopicPartitions) == 1 {
			for _, tp := range res.ConsumerGroupsTopicPartitions[0].Partitions {
				if tp.Error != nil {
					return tp.Error
				}
			}
		}
		return err
	})
	err = cl.watch.Err(wctx, "list-group-offsets", c.Topic, err)
	if err == nil {
		cl.watch.Reached()
	}
	var ke kafka.Error
	if errors.As(err, &ke) && ke.Code() == kafka.ErrGroupIDNotFound {
		// Brokers answer this or, older ones, no offsets (below).
		return nil, fmt.Errorf("group %q: %w (%v)", group, ErrGroupNotFound, err)
	}
	if err != nil {
		if !errors.As(err, new(*Error)) {
			err = wrapErr("list-group-offsets", c.Topic, -1, -1, err)
		}
		var re *Error
		if errors.As(err, &re) && errors.As(err, &ke) && ke.Code() == kafka.ErrGroupAuthorizationFailed {
			// OffsetFetch refused: the group is the one asked about,
			// not the replay's own.
			re.Detail = fmt.Sprintf("Kafka refused: not authorized: the principal needs Describe on group %q (list-group-offsets)", group)
		}
		return nil, fmt.Errorf("offsets of group %q: %w", group, err)
	}
	committed := map[string]map[int32]kafka.TopicPartition{}
	for _, g := range res.ConsumerGroupsTopicPartitions {
		for _, tp := range g.Partitions {
			if tp.Topic == nil || tp.Offset < 0 {
				continue
			}
			if committed[*tp.Topic] == nil {
				committed[*tp.Topic] = map[int32]kafka.TopicPartition{}
			}
			committed[*tp.Topic][tp.Partition] = tp
		}
	}
	topics := []string{c.Topic}
	if c.Topic == "" {
		topics = topics[:0]
		for t := range committed {
			topics = append(topics, t)
		}
		sort.Strings(topics)
	}
	if len(topics) == 0 || c.Topic != "" && len(committed[c.Topic]) == 0 {
		where := ""
		if c.Topic != "" {
			where = fmt.Sprintf(" on topic %q", c.Topic)
			// Kafka's OffsetFetch leaves out, without an error, the
			// topics the principal may not Describe: no commit on the
			// topic may be a refusal, which its marks tell.
			if _, err := Marks(ctx, cl.admin, c.Topic, c.StallTimeout); err != nil {
				return nil, fmt.Errorf("group %q%s: %w", group, where, err)
			}
		}
		return nil, fmt.Errorf("group %q%s: %w", group, where, ErrGroupNotFound)
	}
	var out []GroupPartition
	for _, topic := range topics {
		plan, err := Marks(ctx, cl.admin, topic, c.StallTimeout)
		if err != nil {
			return nil, err
		}
		seen := map[int32]bool{}
		for _, p := range plan.Partitions {
			seen[p.Partition] = true
			gp := GroupPartition{Topic: topic, Partition: p.Partition, Low: p.Low, High: p.High}
			if tp, ok := committed[topic][p.Partition]; ok {
				off := int64(tp.Offset)
				lag := max(p.High-off, 0)
				gp.Committed, gp.Lag = &off, &lag
				if tp.Metadata != nil {
					gp.Metadata = *tp.Metadata
				}
			}
			out = append(out, gp)
		}
		// A commit on a partition the topic no longer has (or not yet,
		// in this broker's metadata) is shown, with no marks to compare.
		for p, tp := range committed[topic] {
			if !seen[p] {
				off := int64(tp.Offset)
				out = append(out, GroupPartition{Topic: topic, Partition: p, Committed: &off, Low: -1, High: -1})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out, nil
}
