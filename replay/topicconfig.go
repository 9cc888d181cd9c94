package replay

import (
	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TopicConfig is what DescribeConfigs answered for the topic's
// configuration entries a replay asked for (Config.TopicConfigs), or why it
// could not answer.
type TopicConfig struct {
	// Values holds each entry asked for that the broker answered, with its
	// effective value (a default included).
	Values map[string]string
	// Err is set when DescribeConfigs failed: typically an *Error whose
	// cause is TOPIC_AUTHORIZATION_FAILED, when the principal lacks the
	// DescribeConfigs ACL on the topic. Values is then empty.
	Err error
}

// describeTopicConfig asks DescribeConfigs for names of topic, once; a
// failure is returned in TopicConfig.Err, not as an error: what to make of
// an unreadable configuration is the caller's decision (Config.Check).
func describeTopicConfig(ctx context.Context, admin *kafka.AdminClient, topic string, names []string, timeout time.Duration) *TopicConfig {
	tc := &TopicConfig{Values: map[string]string{}}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := admin.DescribeConfigs(tctx, []kafka.ConfigResource{{Type: kafka.ResourceTopic, Name: topic}},
		kafka.SetAdminRequestTimeout(timeout))
	if err != nil {
		tc.Err = wrapErr("describe-configs", topic, -1, -1, err)
		return tc
	}
	if len(res) != 1 {
		tc.Err = &Error{Op: "describe-configs", Topic: topic, Partition: -1, Offset: -1, Kind: ErrKafka,
			Detail: fmt.Sprintf("DescribeConfigs answered %d resources for one asked", len(res))}
		return tc
	}
	if res[0].Error.Code() != kafka.ErrNoError {
		tc.Err = wrapErr("describe-configs", topic, -1, -1, res[0].Error)
		return tc
	}
	for _, n := range names {
		if e, ok := res[0].Config[n]; ok {
			tc.Values[n] = e.Value
		}
	}
	return tc
}
