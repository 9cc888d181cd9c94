package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// usage asserts that err is a usage error (exit 2) naming flag.
func usage(t *testing.T, err error, flag string) {
	t.Helper()
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(ue.msg, flag) {
		t.Fatalf("error %v (%T): want a usage error naming %s", err, err, flag)
	}
}

// FuzzOffsetsFlag: --from-offsets and --to-offsets never panic; the value
// is a usage error naming the flag, or partitions and offsets that are not
// negative, which written back as PARTITION=OFFSET pairs parse the same.
func FuzzOffsetsFlag(f *testing.F) {
	for _, s := range []string{"0=120,2=7", " 1 = 5 ", "0=1,0=2", "0=-1", "-1=0", "2147483648=0", "0=9223372036854775808", "", ",", "0=", "=3", "0=1,,1=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseOffsetsFlag("--to-offsets", s)
		if err != nil {
			usage(t, err, "--to-offsets")
			return
		}
		if len(m) == 0 {
			t.Fatalf("%q: no partitions and no error", s)
		}
		var parts []string
		for _, p := range slices.Sorted(maps.Keys(m)) {
			if p < 0 || m[p] < 0 {
				t.Fatalf("%q: partition %d offset %d", s, p, m[p])
			}
			parts = append(parts, fmt.Sprintf("%d=%d", p, m[p]))
		}
		again, err := parseOffsetsFlag("--to-offsets", strings.Join(parts, ","))
		if err != nil || !maps.Equal(m, again) {
			t.Fatalf("%q -> %v -> %v, %v", s, m, again, err)
		}
	})
}

// FuzzTimestampFlag: --from-timestamp and --to-timestamp never panic; the
// value is a usage error naming the flag, or a time that reads back the
// same from its own text (RFC 3339 within years 0-9999, epoch
// milliseconds beyond), and a number of fewer than 12 digits is never
// taken as milliseconds (it is seconds, from a clock).
func FuzzTimestampFlag(f *testing.F) {
	for _, s := range []string{"2026-11-29T10:00:00Z", "2026-11-29T10:00:00.123456789+02:00", "1795993200000", "1795993200", "-5", "+0001795993200000", "9223372036854775807", "2026-13-01T00:00:00Z", "", "now"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := parseTimestampFlag("--from-timestamp", s)
		if err != nil {
			usage(t, err, "--from-timestamp")
			return
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && len(strings.TrimLeft(s, "+0")) < minMillisDigits {
			t.Fatalf("%q (%d, fewer than %d digits) taken as %s", s, n, minMillisDigits, ts)
		}
		if y := ts.Year(); y >= 0 && y <= 9999 {
			text := ts.Format(time.RFC3339Nano)
			again, err := parseTimestampFlag("--from-timestamp", text)
			if err != nil || !again.Equal(ts) {
				t.Fatalf("%q -> %s -> %s, %v", s, text, again, err)
			}
			return
		}
		ms := strconv.FormatInt(ts.UnixMilli(), 10)
		again, err := parseTimestampFlag("--from-timestamp", ms)
		if err != nil || !again.Equal(ts) {
			t.Fatalf("%q -> %s (epoch ms %s) -> %s, %v", s, ts, ms, again, err)
		}
	})
}

// FuzzMemoryFlag: --memory never panics; it is a usage error naming the
// flag or a size of at least the minimum.
func FuzzMemoryFlag(f *testing.F) {
	for _, s := range []string{"256MiB", "1g", "1048576", "0.5GiB", "1KiB", "-1", "1e400MiB", "NaN", "12 TB", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseMemory(s)
		if err != nil {
			usage(t, err, "--memory")
			return
		}
		if v < minMemory {
			t.Fatalf("%q: %d bytes, below the minimum %d", s, v, minMemory)
		}
	})
}
