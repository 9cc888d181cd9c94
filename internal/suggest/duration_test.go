package suggest

import (
	"strconv"
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"30", "30s", true},
		{"0", "", false}, // "0" is a valid duration already
		{"1.5", "1.5s", true},
		{"250", "250s", true},
		{"30s", "", false}, // already a duration
		{"1m30s", "", false},
		{"", "", false},
		{"-5", "", false}, // not a plain number
		{".5", "", false},
		{"1e3", "", false},
		{"30 s", "", false},
		{"soon", "", false},
		{"99999999999999999999", "", false}, // too many seconds for a Duration
		{"1.2.3", "", false},
	} {
		got, ok := Duration(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Duration(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzDuration: a hint is only ever given for a value that is not a
// duration, it always is one, and it is the same number of seconds.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{"30", "1.5", "30s", "", "-1", "0.000000001", "1.", "9223372036", "1e9", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		hint, ok := Duration(in)
		_, inErr := time.ParseDuration(in)
		if !ok {
			if hint != "" {
				t.Fatalf("Duration(%q) = %q without ok", in, hint)
			}
			return
		}
		if inErr == nil {
			t.Fatalf("Duration(%q) = %q for a value that is a duration already", in, hint)
		}
		d, err := time.ParseDuration(hint)
		if err != nil {
			t.Fatalf("Duration(%q) = %q, which is not a duration: %v", in, hint, err)
		}
		secs, err := strconv.ParseFloat(in, 64)
		if err != nil {
			t.Fatalf("Duration(%q) gave a hint for a value that is not a number: %v", in, err)
		}
		// ParseDuration rounds to nanoseconds; compare within that.
		if diff := d.Seconds() - secs; diff > 1e-9*max(1, secs) || diff < -1e-9*max(1, secs) {
			t.Fatalf("Duration(%q) = %q = %v, not %v seconds", in, hint, d, secs)
		}
	})
}
