package replay

import (
	"fmt"
	"strings"
)

// ConsumerProperties returns the librdkafka properties of the replay's
// consumer for c, as key and value strings: ClientConfig with c.Brokers and
// c.Props, the tuned defaults (TunedDefaults) under c.Props, and the fixed
// properties that make the replay read-only and bounded (a fresh group.id,
// no auto commit or offset store, read_committed, auto.offset.reset=error,
// partition EOFs, no topic auto-creation) over both. The keys that only
// confluent-kafka-go understands (those starting with "go.") are left out,
// so that the map can be handed to librdkafka's C API as it is: the
// benchmark's C floor (bench/internal/floor) reads with exactly the
// replay's properties through it.
//
// Each call makes a new group id, as each replay does.
func ConsumerProperties(c Config) (map[string]string, error) {
	cm, _, err := consumerConfig(c)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(*cm))
	for k, v := range *cm {
		if strings.HasPrefix(k, "go.") {
			continue
		}
		switch x := v.(type) {
		case string:
			out[k] = x
		case bool, int:
			// confluent-kafka-go hands these to librdkafka as
			// "true"/"false" and decimal, as fmt prints them.
			out[k] = fmt.Sprint(x)
		default:
			return nil, fmt.Errorf("librdkafka property %s: value %v of type %T has no string form here", k, v, v)
		}
	}
	return out, nil
}
