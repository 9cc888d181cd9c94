package main

// Tests of tables over a subset of their topic's partitions (shards,
// docs/shards.md) as the CLI defines them: rebuild's --partitions and
// --partitioner, the config file's partitions: and partitioner:, and what
// tables and export show of them.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// shardConfig writes a config file whose table t (over topic) has the
// given extra fields, its database beside it; it returns the file's path
// and the database's.
func shardConfig(t *testing.T, topic, fields string) (cfg, db string) {
	t.Helper()
	dir := t.TempDir()
	cfg, db = filepath.Join(dir, "kmaterialize.yaml"), filepath.Join(dir, "tables.db")
	doc := fmt.Sprintf("db: tables.db\nkafka:\n  brokers: %s\ntables:\n  - name: t\n    topic: %s\n    stall_timeout: 20s\n%s", broker.Addr, topic, fields)
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg, db
}

// TestShardFlagsRefused: a malformed --partitions, an unknown
// --partitioner and a partitioner over keys that are not raw are exit 2
// before any work (no database is created), each message naming the flag
// and the value; the config file's equivalents are exit 2 naming the
// table, the field and the line.
func TestShardFlagsRefused(t *testing.T) {
	topic := newTopic(t, 4)
	for _, tc := range []struct {
		name  string
		flags []string
		want  []string
	}{
		{"not a set", []string{"--partitions", "0-x"}, []string{`--partitions "0-x"`, "not a partition number"}},
		{"overlap", []string{"--partitions", "0-3,2"}, []string{`--partitions "0-3,2"`, "partition 2 is named twice"}},
		{"backwards", []string{"--partitions", "3-1"}, []string{`"3-1" runs backwards`}},
		{"empty", []string{"--partitions", ""}, []string{"--partitions", "empty"}},
		{"unknown partitioner", []string{"--partitioner", "crc32"}, []string{"--partitioner", `"crc32"`, "murmur2, consistent, fnv1a"}},
		{"random partitioner", []string{"--partitioner", "random"}, []string{"--partitioner", "ignores the key"}},
		{"json keys", []string{"--partitioner", "murmur2", "--key-format", "json"},
			[]string{"--partitioner murmur2 with key format json", "producers hash the serialized key bytes", "--key-format raw"}},
		{"json keys, librdkafka name", []string{"--partitions", "1", "--key-format", "json", "--partitioner", "consistent_random"},
			[]string{"--partitioner consistent with key format json", "serialized key bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := dbPath(t)
			r := mustCLI(t, exitUsage, rebuildArgs(topic, db, tc.flags...)...)
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr does not say %q:\n%s", w, r.stderr)
				}
			}
			if _, err := os.Stat(db); !os.IsNotExist(err) {
				t.Errorf("the refused rebuild left %s (%v)", db, err)
			}
		})
	}
	for _, tc := range []struct {
		name   string
		fields string
		want   []string
	}{
		{"config: not a set", "    partitions: 0-x\n", []string{":8:", "tables[0].partitions", `table "t"`, `"0-x"`}},
		{"config: list twice", "    partitions: [1, 1]\n", []string{":8:", "tables[0].partitions", "[1 1]", "named twice"}},
		{"config: json keys", "    key_format: json\n    partitioner: murmur2\n", []string{":9:", "tables[0].partitioner", `table "t"`,
			"key_format json", "producers hash the serialized key bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, db := shardConfig(t, topic, tc.fields)
			r := mustCLI(t, exitUsage, "rebuild", "--config", cfg, "--table", "t")
			for _, w := range append(tc.want, cfg) {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr does not say %q:\n%s", w, r.stderr)
				}
			}
			if _, err := os.Stat(db); !os.IsNotExist(err) {
				t.Errorf("the refused rebuild left %s (%v)", db, err)
			}
		})
	}
}
