package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/config"
)

// TestLoadFollowFields: follow, follow_interval, max_lag and
// rebuild_if_needed are read as written, default to zero (the daemon's
// defaults apply), and a bad value, or one given without follow: true, is
// an *Error naming the table's field and line.
func TestLoadFollowFields(t *testing.T) {
	const head = "db: t.db\nkafka:\n  brokers: k:9092\ntables:\n"
	path := write(t, head+"  - name: a\n    topic: t\n    follow: true\n    follow_interval: 50ms\n    max_lag: 500\n    rebuild_if_needed: true\n"+
		"  - name: b\n    topic: t\n    follow: true\n  - name: c\n    topic: t\n", nil)
	cfg, err := parse(t, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := cfg.Tables[0], cfg.Tables[1], cfg.Tables[2]
	if !a.Follow || a.FollowInterval != 50*time.Millisecond || a.MaxLag != 500 || !a.RebuildIfNeeded {
		t.Errorf("table a: follow %v, interval %s, max_lag %d, rebuild_if_needed %v", a.Follow, a.FollowInterval, a.MaxLag, a.RebuildIfNeeded)
	}
	if !b.Follow || b.FollowInterval != 0 || b.MaxLag != 0 || b.RebuildIfNeeded {
		t.Errorf("table b: want follow with defaults, got %+v", b)
	}
	if c.Follow {
		t.Errorf("table c follows without follow: true")
	}

	for _, tc := range []struct {
		name, fields string
		line         int
		want         []string
	}{
		{"interval without follow", "    follow_interval: 1s\n", 7, []string{"tables[0].follow_interval", "follow: true only"}},
		{"max_lag without follow", "    max_lag: 10\n", 7, []string{"tables[0].max_lag", "follow: true only"}},
		{"rebuild_if_needed without follow", "    rebuild_if_needed: true\n", 7, []string{"tables[0].rebuild_if_needed", "follow: true only"}},
		{"bad interval", "    follow: true\n    follow_interval: often\n", 8, []string{"tables[0].follow_interval", "not a duration"}},
		{"zero interval", "    follow: true\n    follow_interval: 0s\n", 8, []string{"must be positive"}},
		{"negative max_lag", "    follow: true\n    max_lag: -1\n", 8, []string{"tables[0].max_lag", "positive number of records"}},
		{"max_lag not a number", "    follow: true\n    max_lag: lots\n", 8, []string{"max_lag"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, head+"  - name: a\n    topic: t\n"+tc.fields, nil)
			_, err := parse(t, path, nil)
			var ce *config.Error
			if !errors.As(err, &ce) || !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("Parse = %v, want a *config.Error", err)
			}
			if ce.Line != tc.line {
				t.Errorf("line %d, want %d (%v)", ce.Line, tc.line, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not contain %q", err, w)
				}
			}
		})
	}
}
