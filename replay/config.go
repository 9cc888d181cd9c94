package replay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/rs/zerolog"
)

// EndMark chooses where each partition's replay ends.
type EndMark string

const (
	// EndHigh ends at the high watermark captured at start (read_uncommitted
	// ListOffsets). An open transaction below it makes the replay wait.
	EndHigh EndMark = "high"
	// EndStable ends at the last stable offset captured at start: never
	// waits, but leaves out records committed after the oldest open
	// transaction.
	EndStable EndMark = "stable"
)

// Start says where each partition's replay begins. The zero value starts
// every partition at its earliest retained offset.
type Start struct {
	// Offsets maps a partition to its first offset. A partition not named
	// starts at its retained low; an offset below the low starts at the low
	// (with a warning); an offset above the high mark is ErrBadStart.
	Offsets map[int32]int64
	// Timestamp, if non-zero, starts each partition at the first offset
	// whose record timestamp is >= it; a partition with no such record
	// contributes nothing. Exclusive with Offsets.
	Timestamp time.Time
}

// Until bounds each partition's replay below its end mark: a table as of a
// point. The zero value reads to the end mark. The bound is resolved once,
// after the marks are captured, and each partition ends at the lower of its
// end mark and its bound; the end is then handled exactly as the end mark is
// (an open transaction below it makes the replay wait, aborted records and
// control records before it are passed by position).
type Until struct {
	// Offsets maps a partition to its end offset (exclusive: the record at
	// that offset is not read). A partition not named ends at its end mark;
	// an offset above the high mark, or below an explicit start offset, is
	// ErrBadEnd; one above the LSO with EndStable ends at the LSO.
	Offsets map[int32]int64
	// Timestamp, if non-zero, ends each partition at the first offset whose
	// record timestamp is >= it (ListOffsets by timestamp, captured once),
	// so every record before that offset is read. A partition with no such
	// record ends at its end mark. Exclusive with Offsets.
	Timestamp time.Time
}

// Pacer is a share of the CPU that CPU-bound work takes turns on: Acquire
// waits for a turn (or for ctx to end), Release ends it.
type Pacer interface {
	Acquire(ctx context.Context) error
	Release()
}

// IsZero reports whether u bounds nothing.
func (u Until) IsZero() bool { return len(u.Offsets) == 0 && u.Timestamp.IsZero() }

// Config describes one replay. Zero values mean the documented defaults.
type Config struct {
	Brokers string // bootstrap.servers; required unless Props sets it
	Topic   string
	// Props are librdkafka properties (-X key=value). They win over the
	// tuned defaults, except for the properties that make the replay
	// read-only and bounded (group.id, isolation.level, auto commit, offset
	// store, auto.offset.reset), which are not negotiable.
	Props map[string]string
	End   EndMark // default EndHigh
	Start Start
	// Stop, when set, ends each partition it names at the offset given
	// instead of its end mark (a position another reader reached: it must
	// not be above the high watermark captured at start, else ErrBadStart),
	// and leaves the partitions it does not name unread. A rebuild of a
	// followed table uses it to catch up with the follower's positions.
	Stop map[int32]int64
	// Until ends the replay before the end mark (default: no bound).
	Until Until
	// Partitions, when not nil, are the only partitions read (a shard's,
	// sorted, without duplicates): the plan holds only these, and a
	// follower never adds a partition the topic gains. One the topic
	// lacks fails the capture with ErrPartitionsMissing. nil: all.
	Partitions []int32
	// StallTimeout bounds how long no partition may make progress, and how
	// long metadata and ListOffsets may take. Default 30s.
	StallTimeout time.Duration
	// BatchRecords is the most records handed to the sink at once.
	// Default 20000.
	BatchRecords int
	// BatchBytes, when positive, also ends a batch once its records' keys
	// and values reach this many bytes, so that a batch of large records
	// stays within a memory budget. Default 0: records only.
	BatchBytes int
	// Readers is how many consumers read the partitions (parallel.go),
	// each a share of them. Default 1. The prefetch queue
	// (queued.max.messages.kbytes, from Props or the tuned default) and
	// BatchBytes are divided among them, so that N readers hold what one
	// does.
	Readers int
	// Headers asks for record headers in record.Record.Headers (off by
	// default: they cost a record its headers' bytes in the batch).
	Headers bool
	// CPU, when set, is held around the Go work of each batch read (its
	// records made and handed to the driver), never around the wait for
	// records nor around the sink: a daemon's reads keep a P while
	// replays run (package cpushare's Share is one).
	CPU Pacer
	// Lower, if set, runs fn, a reader's read loop on a goroutine of its
	// own, at the lower CPU priority the caller's own goroutine reads at
	// (a daemon's cpushare.Share.Run): with Readers N, the loops past the
	// first run on goroutines of their own, which would otherwise read at
	// the default priority. nil: fn runs as it is.
	Lower func(fn func())
	// CloseBehind makes Run return once the end marks are reached (or it
	// failed) without waiting for its Kafka clients to close: a close
	// waits for the fetch in flight, which the broker holds up to
	// fetch.wait.max.ms when the partitions have nothing more, so it takes
	// up to 100 ms after the last record. The caller then does its own
	// work (a rebuild's merge and publish) meanwhile and must call the
	// Result's WaitClosed before it returns.
	CloseBehind bool
	// perRecord reads with confluent-kafka-go's Poll, one message a call,
	// instead of in batches (batch.go): the tests' oracle for the batch
	// reader.
	perRecord bool
	// ProgressInterval is how often Progress is called. Default 1s.
	ProgressInterval time.Duration
	// Progress, if set, is called from the read loop with a snapshot.
	Progress func(Progress)
	Log      zerolog.Logger
	// TopicConfigs names topic configuration entries (e.g.
	// "cleanup.policy", "delete.retention.ms") to read with DescribeConfigs
	// once the marks are captured; the answer is Plan.TopicConfig. Nil: not
	// asked.
	TopicConfigs []string
	// Check, if set, is called once the partitions and their marks are
	// captured (Plan.Start not yet resolved, End set from the end mark) and
	// before any record is read: an error from it ends the replay and is
	// returned as is. An incremental update, a follower (FollowConfig) and
	// a rebuild's catch-up refuse there a checkpoint the topic no longer
	// fits.
	Check func(Plan) error
}

// lower runs fn by Lower, or as it is.
func (c Config) lower(fn func()) {
	if c.Lower == nil {
		fn()
		return
	}
	c.Lower(fn)
}

func (c *Config) withDefaults() Config {
	out := *c
	if out.End == "" {
		out.End = EndHigh
	}
	if out.StallTimeout <= 0 {
		out.StallTimeout = 30 * time.Second
	}
	if out.BatchRecords <= 0 {
		out.BatchRecords = 20000
	}
	if out.ProgressInterval <= 0 {
		out.ProgressInterval = time.Second
	}
	if out.Readers <= 0 {
		out.Readers = 1
	}
	return out
}

// TunedDefaults are the consumer properties the replay uses unless Props
// overrides them. librdkafka's defaults fetch in small steps with a 1s
// backoff between queue refills, which leaves most of a replay's throughput
// unused (the measurement is in bench/RESULTS.md, "Measurements the code's
// choices rest on").
//
// fetch.wait.max.ms is short because librdkafka keeps one fetch in flight
// per broker connection: when the prefetch queue is full, the partitions
// with records to fetch back off (fetch.queue.backoff.ms) while those
// already at their end do not, so the next fetch may name only the
// latter, and the broker holds it, having nothing for them, for
// fetch.wait.max.ms; the records of the others wait behind it. At the end
// of a replay, while some partitions are done and others are not, that
// cost 100 ms at a time (a 1M-record read of the C floor: 0.54 to 0.62 s
// at 100 ms, 0.41 to 0.50 s at 10 ms; bench/RESULTS.md, 2026-12-06). A
// bounded replay ends; a follower, which keeps its consumers idle at the
// live end, waits longer (followFetchWait).
var TunedDefaults = map[string]string{
	"fetch.queue.backoff.ms":     "10",
	"queued.min.messages":        "20000",
	"queued.max.messages.kbytes": "16384",
	"fetch.wait.max.ms":          "10",
	"client.id":                  "kmaterialize",
}

// fetchWaitProperty is how long a broker holds a fetch it has no records
// for (TunedDefaults, followFetchWait).
const fetchWaitProperty = "fetch.wait.max.ms"

// followFetchWait is a follower's fetch.wait.max.ms unless Props set it:
// each of its consumers idle at the live end asks for records once per
// fetch.wait.max.ms, for as long as the table is followed (10 a second at
// 100 ms, 100 at TunedDefaults' 10 ms), and a record that comes is
// answered at once either way.
const followFetchWait = "100"

// followDefaults is c with a follower's fetch.wait.max.ms unless c.Props
// sets one; c.Props is not changed.
func (c Config) followDefaults() Config {
	if _, set := c.Props[fetchWaitProperty]; set {
		return c
	}
	props := maps.Clone(c.Props)
	if props == nil {
		props = map[string]string{}
	}
	props[fetchWaitProperty] = followFetchWait
	c.Props = props
	return c
}

// GroupPrefixProperty names kmaterialize's own property (not librdkafka's)
// that sets the prefix of the replay's group id: librdkafka requires a
// group.id and looks up its coordinator even for a consumer that only
// assigns partitions, so the principal may be given Describe on the groups
// with this prefix (a PREFIXED Group ACL). It is read from the properties
// like any other (the config file's kafka.properties, -F, -X) and never
// given to librdkafka.
const GroupPrefixProperty = "kmaterialize.replay.group.prefix"

// DefaultGroupPrefix is the replay's group id prefix unless
// GroupPrefixProperty sets one; a random suffix makes each replay's group
// its own.
const DefaultGroupPrefix = "kmaterialize-replay-"

// ClientConfig builds the librdkafka configuration shared by every client
// kmaterialize makes: bootstrap servers, then the user's -X properties
// (without kmaterialize's own, GroupPrefixProperty).
func ClientConfig(brokers string, props map[string]string) (*kafka.ConfigMap, error) {
	cm := &kafka.ConfigMap{
		// librdkafka logs go to a channel we drain into zerolog, so its
		// own format never interleaves with ours on stderr.
		"go.logs.channel.enable": true,
	}
	if brokers != "" {
		_ = cm.SetKey("bootstrap.servers", brokers)
	}
	for k, v := range props {
		if k == GroupPrefixProperty {
			continue
		}
		if err := cm.SetKey(k, v); err != nil {
			return nil, fmt.Errorf("librdkafka property %s=%s: %w", k, v, err)
		}
	}
	if v, _ := cm.Get("bootstrap.servers", ""); v == "" {
		return nil, fmt.Errorf("no brokers: set --brokers, KMATERIALIZE_BROKERS or -X bootstrap.servers")
	}
	return cm, nil
}

// consumerConfig is ClientConfig plus the replay's fixed and tuned
// properties.
func consumerConfig(c Config) (*kafka.ConfigMap, string, error) {
	props := map[string]string{}
	for k, v := range TunedDefaults {
		props[k] = v
	}
	for k, v := range c.Props {
		props[k] = v
	}
	cm, err := ClientConfig(c.Brokers, props)
	if err != nil {
		return nil, "", err
	}
	prefix := DefaultGroupPrefix
	if v, ok := c.Props[GroupPrefixProperty]; ok {
		if strings.TrimSpace(v) == "" {
			return nil, "", &PropertyError{Keys: []string{GroupPrefixProperty + "=" + v}, Err: errors.New("the replay's group id prefix must not be empty")}
		}
		prefix = v
	}
	group := prefix + randomHex(8)
	fixed := map[string]any{
		// A fresh group that is never joined (partitions are assigned
		// explicitly) and never committed to.
		"group.id":                 group,
		"enable.auto.commit":       false,
		"enable.auto.offset.store": false,
		// Aborted transactions never reach a table.
		"isolation.level": "read_committed",
		// librdkafka's default silently jumps to the end when a position
		// falls below the retained low; records deleted under the replay
		// must fail it instead.
		"auto.offset.reset":        "error",
		"enable.partition.eof":     true,
		"allow.auto.create.topics": false,
	}
	for k, v := range fixed {
		if err := cm.SetKey(k, v); err != nil {
			return nil, "", fmt.Errorf("librdkafka property %s: %w", k, err)
		}
	}
	return cm, group, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
