package replay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/rs/zerolog"
)

// clients is the replay's consumer and an admin client sharing its handle,
// plus the goroutine that forwards librdkafka's logs. Close stops both and
// waits for the forwarder.
type clients struct {
	consumer *kafka.Consumer
	admin    *kafka.AdminClient
	group    string
	watch    *BootstrapWatch // the bootstrap brokers' failures, from the logs (unreachable.go)
	logsDone sync.WaitGroup
}

func newClients(c Config) (*clients, error) {
	cm, group, err := consumerConfig(c)
	if err != nil {
		return nil, &Error{Op: "configure", Topic: c.Topic, Partition: -1, Offset: -1, Kind: ErrKafka, Err: err}
	}
	consumer, err := kafka.NewConsumer(cm)
	if err != nil {
		return nil, &Error{Op: "create consumer", Topic: c.Topic, Partition: -1, Offset: -1, Kind: ErrKafka, Err: err}
	}
	admin, err := kafka.NewAdminClientFromConsumer(consumer)
	if err != nil {
		_ = closeConsumer(consumer)
		return nil, &Error{Op: "create admin client", Topic: c.Topic, Partition: -1, Offset: -1, Kind: ErrKafka, Err: err}
	}
	bootstrap, _ := cm.Get("bootstrap.servers", "")
	cl := &clients{consumer: consumer, admin: admin, group: group, watch: NewBootstrapWatch(fmt.Sprint(bootstrap), c.StallTimeout)}
	cl.logsDone.Add(1)
	go ForwardLogs(consumer.Logs(), c.Log, &cl.logsDone, cl.watch.Observe)
	return cl, nil
}

// Close closes the admin client and the consumer (which commits nothing: auto
// commit is off and no offset was ever stored; closeConsumer, without the
// wait for the log poller) and waits for the log forwarder, which ends when
// librdkafka closes the logs channel.
func (cl *clients) Close() error {
	cl.admin.Close()
	err := closeConsumer(cl.consumer)
	cl.logsDone.Wait()
	return err
}

// closeClients closes cls, each on a goroutine of its own (a close waits
// for its fetch in flight: Config.CloseBehind), and returns a channel
// closed when all are; unless behind, it waits for that first.
func closeClients(cls []*clients, behind bool) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for _, cl := range cls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = cl.Close()
			}()
		}
		wg.Wait()
	}()
	if !behind {
		<-done
	}
	return done
}

// ForwardLogs turns librdkafka log lines (a client's Logs channel, with
// go.logs.channel.enable) into zerolog events until librdkafka closes the
// channel at the client's Close, then calls done.Done: syslog levels 0-3 as
// warnings (they usually explain a failure that will be reported), the rest
// at debug. Each line goes to observe too (a BootstrapWatch's Observe).
func ForwardLogs(ch chan kafka.LogEvent, log zerolog.Logger, done *sync.WaitGroup, observe ...func(kafka.LogEvent)) {
	defer done.Done()
	for ev := range ch {
		for _, o := range observe {
			o(ev)
		}
		lvl := zerolog.DebugLevel
		if ev.Level <= 3 {
			lvl = zerolog.WarnLevel
		}
		log.WithLevel(lvl).Str("librdkafka", ev.Tag).Msg(ev.Message)
	}
}

// classify maps a client error to one of the package's sentinel kinds.
func classify(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return ErrUnavailable
	}
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return ErrKafka
	}
	switch ke.Code() {
	case kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic, kafka.ErrUnknownTopicID:
		return ErrTopicNotFound
	case kafka.ErrTransport, kafka.ErrAllBrokersDown, kafka.ErrTimedOut, kafka.ErrTimedOutQueue,
		kafka.ErrRequestTimedOut, kafka.ErrBrokerNotAvailable, kafka.ErrLeaderNotAvailable,
		kafka.ErrNotLeaderForPartition, kafka.ErrResolve, kafka.ErrNetworkException,
		kafka.ErrTopicAuthorizationFailed, kafka.ErrClusterAuthorizationFailed,
		kafka.ErrGroupAuthorizationFailed, kafka.ErrSaslAuthenticationFailed,
		kafka.ErrAuthentication, kafka.ErrSsl:
		return ErrUnavailable
	}
	if ke.IsTimeout() {
		return ErrUnavailable
	}
	return ErrKafka
}

// NotAuthorized reports whether err is (or wraps) an authentication or
// authorization failure: classified ErrUnavailable like an outage, but it
// does not pass by waiting.
func NotAuthorized(err error) bool { return notAuthorized(err) }

// notAuthorized reports whether err is an authentication or authorization
// failure.
func notAuthorized(err error) bool {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return false
	}
	switch ke.Code() {
	case kafka.ErrTopicAuthorizationFailed, kafka.ErrClusterAuthorizationFailed,
		kafka.ErrGroupAuthorizationFailed, kafka.ErrSaslAuthenticationFailed,
		kafka.ErrAuthentication, kafka.ErrSsl:
		return true
	}
	return false
}

func wrapErr(op, topic string, partition int32, offset int64, err error) *Error {
	kind := classify(err)
	detail := ""
	switch kind {
	case ErrUnavailable:
		detail = "Kafka unavailable"
		if notAuthorized(err) {
			detail = "Kafka refused: " + refusal(op, topic, err)
		}
	case ErrTopicNotFound:
		detail = fmt.Sprintf("topic %q does not exist (kmaterialize never creates topics)", topic)
	}
	return &Error{Op: op, Topic: topic, Partition: partition, Offset: offset, Kind: kind, Detail: detail, Err: err}
}

// refusal says what the broker refused, for an authentication or
// authorization failure of op on topic: "not authorized: ..." naming the
// ACL the principal lacks (resource and operation) as the request that
// failed needs it. Kafka answers TOPIC_AUTHORIZATION_FAILED to Metadata and
// ListOffsets without Describe on the topic, to Fetch without Read, and to
// DescribeConfigs without DescribeConfigs; Read implies Describe.
func refusal(op, topic string, err error) string {
	var ke kafka.Error
	errors.As(err, &ke)
	switch ke.Code() {
	case kafka.ErrTopicAuthorizationFailed:
		need := "Describe (Read or Write grant it too)"
		switch op {
		case "read", "follow":
			need = "Read"
		case "describe-configs":
			need = "DescribeConfigs"
		}
		return fmt.Sprintf("not authorized: the principal needs %s on topic %q (%s)", need, topic, op)
	case kafka.ErrGroupAuthorizationFailed:
		// The group is the caller's to name (GroupLag does).
		return fmt.Sprintf("not authorized: the principal needs Describe on the group (%s)", op)
	case kafka.ErrClusterAuthorizationFailed:
		return fmt.Sprintf("not authorized on the cluster (%s)", op)
	}
	return "authentication failed: check the SASL or TLS settings (sasl.username, sasl.password, sasl.mechanism, security.protocol)"
}

// groupRefusal reports, once per client, that the coordinator lookup of the
// replay's own group (Config's group id, which it never joins nor commits
// to) was refused: librdkafka's consumer looks up its group's coordinator
// even when partitions are assigned explicitly, and Kafka answers
// GROUP_AUTHORIZATION_FAILED to a principal without Describe on the group.
// Nothing of a replay needs the coordinator, so the refusal is neither an
// error of the replay nor a cause of a stall: it is logged once, as a
// warning naming the ACL that silences it, and passed over.
func groupRefusal(logged *atomic.Bool, log zerolog.Logger, topic, group string, err error) {
	if !logged.CompareAndSwap(false, true) {
		return
	}
	log.Warn().Err(err).Str("topic", topic).Str("group", group).
		Msg("the brokers refused the coordinator lookup of the replay's own group (never joined nor committed to; the replay goes on): grant Describe on the group prefix to silence this (see docs/security.md)")
}

// refusedFetch reports whether a client error during a read is the
// brokers refusing it (no Read on the topic, the cluster, or the
// credentials): waiting for the stall timeout cannot help. TLS errors are
// left to the stall timeout, as before: a handshake may fail while a
// broker restarts.
func refusedFetch(e kafka.Error) bool {
	switch e.Code() {
	case kafka.ErrTopicAuthorizationFailed, kafka.ErrClusterAuthorizationFailed,
		kafka.ErrSaslAuthenticationFailed, kafka.ErrAuthentication:
		return true
	}
	return false
}
