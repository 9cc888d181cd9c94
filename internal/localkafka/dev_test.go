package localkafka

import (
	"errors"
	"testing"
)

// TestParseDevTopic: the --topic forms the dev broker takes, their
// defaults, String as the inverse, and the refusals.
func TestParseDevTopic(t *testing.T) {
	for spec, want := range map[string]DevTopic{
		"a":                     {Name: "a", Partitions: 1},
		"orders:3":              {Name: "orders", Partitions: 3},
		"acct.v1_x-y:1:compact": {Name: "acct.v1_x-y", Partitions: 1, Compact: true},
		"big:10000":             {Name: "big", Partitions: 10000},
	} {
		got, err := ParseDevTopic(spec)
		if err != nil || got != want {
			t.Errorf("ParseDevTopic(%q) = %+v, %v; want %+v", spec, got, err, want)
			continue
		}
		again, err := ParseDevTopic(got.String())
		if err != nil || again != got {
			t.Errorf("ParseDevTopic(%q) = %+v, %v; want %+v", got.String(), again, err, got)
		}
	}
	for _, spec := range []string{"", ":3", "a:", "a:0", "a:-1", "a:10001", "a:x", "a:1:delete", "a:1:compact:", "a b", "a/b", ".", ".."} {
		if _, err := ParseDevTopic(spec); !errors.Is(err, ErrBadDevTopic) {
			t.Errorf("ParseDevTopic(%q) = %v, want ErrBadDevTopic", spec, err)
		}
	}
	if _, err := StartDev(DevOptions{Topics: []DevTopic{{Name: "a", Partitions: 1}, {Name: "a", Partitions: 2}}}); !errors.Is(err, ErrBadDevTopic) {
		t.Errorf("StartDev with a topic twice = %v, want ErrBadDevTopic", err)
	}
}
