package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/kmaterialize/kmaterialize/config"
	"github.com/kmaterialize/kmaterialize/materialize"
)

// TestLoadMemory: a table's memory is its Spec.Memory (default 0: the
// default applies); the daemon's memory, when the file has none, is the
// sum of its parts (the followed tables' memory, max_concurrent_runs (1)
// times the largest table's, the read path's share), and a memory below
// that sum is an *Error naming memory's line and the sum; a bad size is an
// *Error naming the field.
func TestLoadMemory(t *testing.T) {
	const head = "db: t.db\nkafka:\n  brokers: k:9092\n"
	tables := "tables:\n  - name: a\n    topic: t\n    follow: true\n    memory: 64MiB\n" +
		"  - name: b\n    topic: t\n    follow: true\n  - name: c\n    topic: t\n    memory: 512MiB\n"
	cfg, err := parse(t, write(t, head+tables, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if a, b, c := cfg.Tables[0].Spec.Memory, cfg.Tables[1].Spec.Memory, cfg.Tables[2].Spec.Memory; a != 64<<20 || b != 0 || c != 512<<20 {
		t.Fatalf("tables' memory %d %d %d, want 64MiB, 0 (default), 512MiB", a, b, c)
	}
	// The sum, computed here from the file's figures: followers a (64MiB)
	// and b (the default), one run of the largest (c), 64MiB of reads,
	// and the change feeds' default (twice their 64MiB retention).
	want := int64(64<<20) + materialize.DefaultMemory + 512<<20 + config.ReadMemory + 2*config.DefaultFeedRetainBytes
	if cfg.Memory != want {
		t.Fatalf("daemon memory without memory: %d, want the sum %d", cfg.Memory, want)
	}
	// max_concurrent_runs runs of the largest table at once.
	two, err := parse(t, write(t, head+"max_concurrent_runs: 2\n"+tables, nil), nil)
	if err != nil || two.Memory != want+512<<20 {
		t.Fatalf("max_concurrent_runs 2: %v, memory %d, want %d", err, two.Memory, want+512<<20)
	}
	ok, err := parse(t, write(t, head+"memory: 1GiB\n"+tables, nil), nil)
	if err != nil || ok.Memory != 1<<30 {
		t.Fatalf("memory 1GiB: %v, %d", err, ok.Memory)
	}
	// feed: max_bytes is the feeds' part.
	small, err := parse(t, write(t, head+"feed:\n  max_bytes: 16MiB\n  retain_bytes: 8MiB\n"+tables, nil), nil)
	if err != nil || small.Memory != want-2*config.DefaultFeedRetainBytes+16<<20 {
		t.Fatalf("feed max_bytes 16MiB: %v, memory %d, want %d", err, small.Memory, want-2*config.DefaultFeedRetainBytes+16<<20)
	}

	for _, tc := range []struct {
		name, doc string
		line      int
		want      []string
	}{
		{"daemon memory below its parts", head + "memory: 512MiB\n" + tables, 4,
			[]string{"memory", "512MiB is less than", "followers (2) 320MiB", "max_concurrent_runs 1 x the largest table's 512MiB", "reads 64MiB", "change feeds 128MiB", "= 1GiB"}},
		{"bad daemon memory", head + "memory: lots\n" + tables, 4, []string{"memory", "unknown unit"}},
		{"bad table memory", head + "tables:\n  - name: a\n    topic: t\n    memory: 12XB\n", 7, []string{"tables[0].memory", "unknown unit"}},
		{"table memory below 1MiB", head + "tables:\n  - name: a\n    topic: t\n    memory: 1000\n", 7, []string{"tables[0].memory", "minimum of 1MiB"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, write(t, tc.doc, nil), nil)
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
