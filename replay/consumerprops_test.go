package replay

import (
	"strings"
	"testing"
)

// TestConsumerProperties: the properties handed to librdkafka's C API are
// the replay's: the user's over the tuned defaults, the fixed ones over
// both, and none of confluent-kafka-go's own.
func TestConsumerProperties(t *testing.T) {
	props, err := ConsumerProperties(Config{Brokers: "b:9092", Props: map[string]string{
		"queued.max.messages.kbytes": "32768",
		"isolation.level":            "read_uncommitted", // not negotiable
		"enable.auto.commit":         "true",             // not negotiable
		GroupPrefixProperty:          "mine-",
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"bootstrap.servers":          "b:9092",
		"queued.max.messages.kbytes": "32768",
		"queued.min.messages":        "20000",
		"fetch.queue.backoff.ms":     "10",
		"fetch.wait.max.ms":          "10",
		"client.id":                  "kmaterialize",
		"isolation.level":            "read_committed",
		"enable.auto.commit":         "false",
		"enable.auto.offset.store":   "false",
		"auto.offset.reset":          "error",
		"enable.partition.eof":       "true",
		"allow.auto.create.topics":   "false",
	}
	for k, v := range want {
		if props[k] != v {
			t.Errorf("%s = %q, want %q", k, props[k], v)
		}
	}
	if g := props["group.id"]; !strings.HasPrefix(g, "mine-") || len(g) <= len("mine-") {
		t.Errorf("group.id = %q, want the prefix mine- and a random suffix", g)
	}
	for k := range props {
		if strings.HasPrefix(k, "go.") || k == GroupPrefixProperty {
			t.Errorf("%s is not a librdkafka property but is in the map", k)
		}
	}
	again, err := ConsumerProperties(Config{Brokers: "b:9092"})
	if err != nil {
		t.Fatal(err)
	}
	if again["group.id"] == props["group.id"] {
		t.Errorf("two calls share the group id %q", again["group.id"])
	}
	if _, err := ConsumerProperties(Config{}); err == nil {
		t.Error("no brokers: no error")
	}
}

// TestFollowFetchWait: a follower's consumers wait longer at the live end
// than a bounded replay's (followFetchWait, TunedDefaults), unless the
// properties say otherwise, and the caller's properties are not changed.
func TestFollowFetchWait(t *testing.T) {
	for _, c := range []struct {
		props map[string]string
		want  string
	}{
		{nil, followFetchWait},
		{map[string]string{"client.id": "x"}, followFetchWait},
		{map[string]string{"fetch.wait.max.ms": "7"}, "7"},
	} {
		before := len(c.props)
		fc := Config{Brokers: "b:9092", Props: c.props}.followDefaults()
		props, err := ConsumerProperties(fc)
		if err != nil {
			t.Fatal(err)
		}
		if got := props["fetch.wait.max.ms"]; got != c.want {
			t.Errorf("props %v: a follower's fetch.wait.max.ms %s, want %s", c.props, got, c.want)
		}
		if len(c.props) != before {
			t.Errorf("props %v: the caller's properties were changed", c.props)
		}
		bounded, err := ConsumerProperties(Config{Brokers: "b:9092", Props: c.props})
		if err != nil {
			t.Fatal(err)
		}
		if c.props["fetch.wait.max.ms"] == "" && bounded["fetch.wait.max.ms"] != TunedDefaults["fetch.wait.max.ms"] {
			t.Errorf("props %v: a bounded replay's fetch.wait.max.ms %s, want the tuned %s", c.props, bounded["fetch.wait.max.ms"], TunedDefaults["fetch.wait.max.ms"])
		}
	}
}
