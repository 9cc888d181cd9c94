package localkafka

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"
)

// DevTopic is a topic the dev broker creates at start, as the command line
// gives it: NAME[:PARTITIONS[:compact]].
type DevTopic struct {
	Name       string
	Partitions int32 // at least 1; 1 when the spec gives none
	Compact    bool  // cleanup.policy=compact
}

// ErrBadDevTopic is returned (wrapped, with the spec) by ParseDevTopic for a
// spec that is not NAME[:PARTITIONS[:compact]], and by StartDev for a topic
// that its data directory already holds with other settings.
var ErrBadDevTopic = errors.New("bad dev broker topic")

// maxDevPartitions bounds a dev topic: kfake keeps every partition in
// memory, and a typo of 30000 for 3 should not eat the laptop.
const maxDevPartitions = 10000

// ParseDevTopic parses NAME[:PARTITIONS[:compact]]: a legal Kafka topic
// name (letters, digits, '.', '_', '-'; at most 249; not "." or ".."), a
// partition count from 1 to 10000 (default 1), and "compact" for a
// compacted topic. Kafka topic names cannot hold ':', so the split is
// unambiguous.
func ParseDevTopic(spec string) (DevTopic, error) {
	bad := func(why string) (DevTopic, error) {
		return DevTopic{}, fmt.Errorf("%w %q: %s (want NAME[:PARTITIONS[:compact]], e.g. orders:3 or accounts:1:compact)", ErrBadDevTopic, spec, why)
	}
	parts := strings.Split(spec, ":")
	if len(parts) > 3 {
		return bad("too many ':'")
	}
	t := DevTopic{Name: parts[0], Partitions: 1}
	if why := checkTopicName(t.Name); why != "" {
		return bad(why)
	}
	if len(parts) > 1 {
		n, err := strconv.Atoi(parts[1])
		if err != nil || n < 1 || n > maxDevPartitions {
			return bad(fmt.Sprintf("partitions %q: want a number from 1 to %d", parts[1], maxDevPartitions))
		}
		t.Partitions = int32(n)
	}
	if len(parts) > 2 {
		if parts[2] != "compact" {
			return bad(fmt.Sprintf("%q: the third part can only be compact", parts[2]))
		}
		t.Compact = true
	}
	return t, nil
}

// checkTopicName says what is wrong with a topic name, as Kafka's
// Topic.validate does, or "" when nothing is.
func checkTopicName(name string) string {
	switch {
	case name == "":
		return "no topic name"
	case name == "." || name == "..":
		return "a topic cannot be named . or .."
	case len(name) > 249:
		return "a topic name has at most 249 characters"
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Sprintf("%q is not allowed in a topic name (letters, digits, '.', '_' and '-' are)", r)
		}
	}
	return ""
}

// String returns the spec as ParseDevTopic reads it.
func (t DevTopic) String() string {
	s := fmt.Sprintf("%s:%d", t.Name, t.Partitions)
	if t.Compact {
		s += ":compact"
	}
	return s
}

// DevOptions configure StartDev. The zero value is a broker on a free port
// that keeps nothing after it stops.
type DevOptions struct {
	// Port is the loopback port to listen on; 0 picks a free one.
	Port int
	// DataDir, when set, is where the broker keeps its log and state:
	// a broker started again on it has the topics and records of the
	// last one (kfake's persistence, written as records arrive and
	// completed on Close; not fsynced per record, so a machine crash may
	// lose the last writes). "" keeps everything in memory.
	DataDir string
	// Topics are created at start. A topic the data directory already
	// holds is kept if it has the same partition count and cleanup
	// policy, and refused (ErrBadDevTopic) otherwise: a broker that
	// silently differs from its command line misleads.
	Topics []DevTopic
}

// DevBroker is the broker `kmaterialize dev broker` runs: one kfake broker
// on 127.0.0.1, for trying kmaterialize out. It is not Apache Kafka and not
// for production: one broker, no replication, no authentication.
type DevBroker struct {
	*Broker
	// Created are the topics StartDev created; Kept are those it found in
	// the data directory, as asked.
	Created, Kept []DevTopic
}

// StartDev starts the dev broker and creates its topics. Close stops it
// (and, with a DataDir, completes its files); on error nothing is left
// running.
func StartDev(o DevOptions) (*DevBroker, error) {
	seen := map[string]bool{}
	for _, t := range o.Topics {
		if seen[t.Name] {
			return nil, fmt.Errorf("%w: topic %s is given twice", ErrBadDevTopic, t.Name)
		}
		seen[t.Name] = true
	}
	if o.Port < 0 || o.Port > 65535 {
		return nil, fmt.Errorf("dev broker: port %d: want 0 (a free port) to 65535", o.Port)
	}
	var opts []kfake.Opt
	if o.Port != 0 {
		opts = append(opts, kfake.Ports(o.Port))
	}
	if o.DataDir != "" {
		opts = append(opts, kfake.DataDir(o.DataDir))
	}
	b, err := Start(opts...)
	if err != nil {
		return nil, err
	}
	d := &DevBroker{Broker: b}
	for _, t := range o.Topics {
		kept, err := d.ensureTopic(t)
		if err != nil {
			b.Close()
			return nil, err
		}
		if kept {
			d.Kept = append(d.Kept, t)
		} else {
			d.Created = append(d.Created, t)
		}
	}
	return d, nil
}

// ensureTopic creates t, or checks that the topic the broker already has
// (from its data directory) is t. It reports whether the topic was there.
func (d *DevBroker) ensureTopic(t DevTopic) (bool, error) {
	if ti := d.Cluster.TopicInfo(t.Name); ti != nil {
		parts := int32(len(d.Cluster.PartitionInfos(t.Name)))
		policy := "delete"
		if v := ti.Configs["cleanup.policy"]; v != nil {
			policy = *v
		}
		compact := policy == "compact"
		if parts != t.Partitions || compact != t.Compact {
			have := DevTopic{Name: t.Name, Partitions: parts, Compact: compact}
			return true, fmt.Errorf("%w: topic %s is already in the data directory as %s (cleanup.policy=%s), not %s; give --topic %s or none",
				ErrBadDevTopic, t.Name, have, policy, t, have)
		}
		return true, nil
	}
	var configs map[string]string
	if t.Compact {
		configs = map[string]string{"cleanup.policy": "compact"}
	}
	return false, d.CreateTopic(t.Name, t.Partitions, configs)
}
