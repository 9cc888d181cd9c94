package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/config"
)

// TestFeedSection: feed: takes sizes (spool_max_bytes among them), durations and a watcher count, and
// refuses bad ones naming the field and its line.
func TestFeedSection(t *testing.T) {
	const head = "db: t.db\nkafka:\n  brokers: k:9092\nfeed:\n"
	c, err := config.Parse([]byte(head+"  retain_bytes: 32MiB\n  retain_for: 10m\n  max_bytes: 96MiB\n  slow_watcher_bytes: 4MiB\n  spool_max_bytes: 2GiB\n  max_watchers: 8\n  heartbeat: 2s\n"), config.ParseOptions{Path: "k.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	want := config.Feed{RetainBytes: 32 << 20, RetainFor: 10 * time.Minute, MaxBytes: 96 << 20, SlowWatcherBytes: 4 << 20, SpoolMaxBytes: 2 << 30, MaxWatchers: 8, Heartbeat: 2 * time.Second}
	if c.Feed != want {
		t.Errorf("feed = %+v, want %+v", c.Feed, want)
	}
	c, err = config.Parse([]byte("db: t.db\nkafka:\n  brokers: k:9092\n"), config.ParseOptions{Path: "k.yaml"})
	if err != nil || c.Feed != (config.Feed{}) {
		t.Errorf("no feed section: %+v, %v; want zero (the daemon's defaults)", c.Feed, err)
	}
	for _, tc := range []struct {
		doc  string
		want []string
	}{
		{"  retain_bytes: lots\n", []string{"k.yaml:5:", "feed.retain_bytes"}},
		{"  retain_for: forever\n", []string{"k.yaml:5:", "feed.retain_for"}},
		{"  spool_max_bytes: -1GiB\n", []string{"k.yaml:5:", "feed.spool_max_bytes"}},
		{"  heartbeat: -1s\n", []string{"k.yaml:5:", "feed.heartbeat", "must be positive"}},
		{"  max_watchers: 0\n", []string{"k.yaml:5:", "feed.max_watchers", "want 1 to 100000"}},
		{"  retain_bytes: 64MiB\n  max_bytes: 32MiB\n", []string{"k.yaml:6:", "feed.max_bytes", "less than retain_bytes"}},
		{"  retain_byte: 1MiB\n", []string{"k.yaml:5:", `unknown field "retain_byte"`}},
	} {
		_, err := config.Parse([]byte(head+tc.doc), config.ParseOptions{Path: "k.yaml"})
		if err == nil {
			t.Errorf("%q: accepted", tc.doc)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: %v; want it to say %q", tc.doc, err, w)
			}
		}
	}
}
