package replay

import (
	"errors"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TestCheckProps: librdkafka's verdict on -X properties, for each client
// kind: an unknown name and a bad value are a *PropertyError naming the
// property, wrapping librdkafka's ErrInvalidArg; good properties pass.
func TestCheckProps(t *testing.T) {
	good := map[string]string{"fetch.wait.max.ms": "100", "client.id": "x", "security.protocol": "plaintext"}
	for _, kind := range []ClientKind{ConsumerClient, ProducerClient} {
		if err := CheckProps("127.0.0.1:1", good, kind); err != nil {
			t.Fatalf("kind %d: good properties: %v", kind, err)
		}
		for _, bad := range []struct{ key, value string }{
			{"no.such.property", "1"},
			{"security.protocol", "carrier-pigeon"},
			{"message.max.bytes", "lots"},
		} {
			props := map[string]string{"client.id": "x", bad.key: bad.value}
			err := CheckProps("127.0.0.1:1", props, kind)
			var pe *PropertyError
			var ke kafka.Error
			if !errors.Is(err, ErrBadProperty) || !errors.As(err, &pe) || !errors.As(err, &ke) || ke.Code() != kafka.ErrInvalidArg {
				t.Fatalf("kind %d: -X %s=%s: %v, want a PropertyError wrapping ErrInvalidArg", kind, bad.key, bad.value, err)
			}
			if len(pe.Keys) != 1 || pe.Keys[0] != bad.key+"="+bad.value || !strings.Contains(err.Error(), bad.key) {
				t.Fatalf("kind %d: error %q names %v, want %s", kind, err, pe.Keys, bad.key)
			}
		}
	}
}
