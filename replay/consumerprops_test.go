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
		"fetch.wait.max.ms":          "100",
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
