package main

// Tests of tables over a subset of their topic's partitions (shards,
// docs/shards.md) as the CLI defines them: rebuild's --partitions and
// --partitioner, the config file's partitions: and partitioner:, and what
// tables and export show of them.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
	// The file's partitioner with the command line's key format.
	cfg, _ := shardConfig(t, topic, "    partitioner: fnv1a\n")
	r := mustCLI(t, exitUsage, "rebuild", "--config", cfg, "--table", "t", "--key-format", "json")
	if w := "the config file's partitioner fnv1a with key format json: producers hash the serialized key bytes"; !strings.Contains(r.stderr, w) {
		t.Errorf("stderr does not say %q:\n%s", w, r.stderr)
	}
}

// shardDoc is what `tables --format json` says of a table's partitions.
type shardDoc struct {
	Name              string `json:"name"`
	PartitionSet      string `json:"partition_set"`
	Subset            bool   `json:"subset"`
	PartitionsOfTopic int32  `json:"partitions_of_topic"`
	Partitioner       string `json:"partitioner"`
	Partitions        []struct {
		Partition int32 `json:"partition"`
	} `json:"partitions"`
}

// tablesShards runs `tables --format json` on db, without a daemon, and
// returns each table's shardDoc by name.
func tablesShards(t *testing.T, args ...string) map[string]shardDoc {
	t.Helper()
	r := mustCLI(t, 0, append([]string{"tables", "--format", "json"}, args...)...)
	var docs []shardDoc
	if err := json.Unmarshal([]byte(r.stdout), &docs); err != nil {
		t.Fatalf("tables --format json: %v\n%s", err, r.stdout)
	}
	out := map[string]shardDoc{}
	for _, d := range docs {
		out[d.Name] = d
	}
	return out
}

// exportShard is what an export document says of a table's partitions,
// with its rows; absent members are their zero values (and not in has).
type exportShard struct {
	PartitionSet      string            `json:"partition_set"`
	PartitionsOfTopic int32             `json:"partitions_of_topic"`
	Partitioner       string            `json:"partitioner"`
	Rows              map[string]string `json:"rows"`
	has               map[string]bool
}

func exportShardOf(t *testing.T, db, table string) exportShard {
	t.Helper()
	doc := exportBytes(t, db, table)
	var e exportShard
	var members map[string]json.RawMessage
	if err := json.Unmarshal([]byte(doc), &e); err != nil {
		t.Fatalf("export: %v\n%s", err, doc)
	}
	if err := json.Unmarshal([]byte(doc), &members); err != nil {
		t.Fatal(err)
	}
	e.has = map[string]bool{}
	for k := range members {
		e.has[k] = true
	}
	return e
}

// inSet keeps the records of the partitions in set.
func inSet(set ...int32) func(rec) bool {
	return func(r rec) bool { return slices.Contains(set, r.P) }
}

// TestRebuildPartitionsSubset: `rebuild --partitions 1,3` of a 4-partition
// topic holds exactly the rows of the records in partitions 1 and 3 (the
// oracle: a plain fold of those records), reads only those, and an update
// keeps to them; tables and export show the set, the topic's count and the
// partitioner, and nothing of the kind for a table over all partitions.
// --partitions 0-9 is exit 2 naming the partitions the topic lacks.
func TestRebuildPartitionsSubset(t *testing.T) {
	topic := newTopic(t, 4)
	rng := newRand(t)
	all := []int32{0, 1, 2, 3}
	recs := produce(t, topic, genRecords(rng, all, 400))
	db := dbPath(t)

	r := mustCLI(t, 0, rebuildArgs(topic, db, "--table", "shard", "--partitions", "3,1", "--partitioner", "murmur2_random")...)
	want, read, skipped := oracle(recs, inSet(1, 3))
	checkTable(t, want, scanTable(t, db, "shard"))
	if s := fmt.Sprintf("%d records read, %d skipped", read, skipped); !strings.Contains(r.stdout, s) {
		t.Errorf("rebuild says %q, want %q", r.stdout, s)
	}
	mustCLI(t, 0, rebuildArgs(topic, db, "--table", "whole")...)
	wholeWant, _, _ := oracle(recs, nil)
	checkTable(t, wholeWant, scanTable(t, db, "whole"))

	// An update reads what the partitions gained, and only theirs.
	recs = append(recs, produce(t, topic, genRecords(rng, all, 200))...)
	mustCLI(t, 0, updateArgs(db, "shard")...)
	want, _, _ = oracle(recs, inSet(1, 3))
	checkTable(t, want, scanTable(t, db, "shard"))

	docs := tablesShards(t, "--db", db)
	sd := docs["shard"]
	if sd.PartitionSet != "1,3" || !sd.Subset || sd.PartitionsOfTopic != 4 || sd.Partitioner != "murmur2" ||
		len(sd.Partitions) != 2 || sd.Partitions[0].Partition != 1 || sd.Partitions[1].Partition != 3 {
		t.Errorf("tables: shard %+v: want partition_set 1,3 (partitions 1 and 3), subset, partitions_of_topic 4, partitioner murmur2", sd)
	}
	if wd := docs["whole"]; wd.PartitionSet != "0-3" || wd.Subset || wd.PartitionsOfTopic != 0 || wd.Partitioner != "" || len(wd.Partitions) != 4 {
		t.Errorf("tables: whole %+v: want partition_set 0-3 and no shard fields", wd)
	}
	text := mustCLI(t, 0, "tables", "--db", db).stdout
	for _, w := range []string{`partition set:\s+1,3 of the topic's 4 `, `partitioner:\s+murmur2\n`} {
		if !regexp.MustCompile(w).MatchString(text) {
			t.Errorf("tables does not say %q:\n%s", w, text)
		}
	}
	if strings.Count(text, "partition set:") != 1 || strings.Count(text, "partitioner:") != 1 {
		t.Errorf("tables shows a partition set or partitioner for the table over all partitions:\n%s", text)
	}

	e := exportShardOf(t, db, "shard")
	if e.PartitionSet != "1,3" || e.PartitionsOfTopic != 4 || e.Partitioner != "murmur2" {
		t.Errorf("export: partition_set %q, partitions_of_topic %d, partitioner %q: want 1,3, 4, murmur2", e.PartitionSet, e.PartitionsOfTopic, e.Partitioner)
	}
	checkTable(t, want, e.Rows)
	if w := exportShardOf(t, db, "whole"); w.has["partition_set"] || w.has["partitions_of_topic"] || w.has["partitioner"] {
		t.Errorf("export of a table over all partitions has shard members: %v", w.has)
	}

	// A set the topic lacks partitions of.
	r = mustCLI(t, exitUsage, rebuildArgs(topic, dbPath(t), "--table", "wide", "--partitions", "0-9")...)
	for _, w := range []string{"4-9", "has 4"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr does not say %q:\n%s", w, r.stderr)
		}
	}
}

// TestConfigPartitions: the config file's partitions: (a list, in any
// order) and partitioner: (librdkafka's name) build the table that
// --partitions and --partitioner build, with the oracle's rows of those
// partitions; tables (no daemon) shows the set; --partitions on the
// command line replaces the file's.
func TestConfigPartitions(t *testing.T) {
	topic := newTopic(t, 4)
	recs := produce(t, topic, genRecords(newRand(t), []int32{0, 1, 2, 3}, 400))
	cfg, db := shardConfig(t, topic, "    partitions: [3, 1]\n    partitioner: consistent_random\n")

	mustCLI(t, 0, "rebuild", "--config", cfg, "--table", "t")
	want, _, _ := oracle(recs, inSet(1, 3))
	checkTable(t, want, scanTable(t, db, "t"))
	sd := tablesShards(t, "--config", cfg)["t"]
	if sd.PartitionSet != "1,3" || !sd.Subset || sd.PartitionsOfTopic != 4 || sd.Partitioner != "consistent" {
		t.Errorf("tables: %+v: want partition_set 1,3, subset, partitions_of_topic 4, partitioner consistent", sd)
	}
	if text := mustCLI(t, 0, "tables", "--config", cfg).stdout; !strings.Contains(text, "1,3 of the topic's 4") {
		t.Errorf("tables does not show the set:\n%s", text)
	}

	// The flags' table, in another file, is the same table.
	flagsDB := dbPath(t)
	mustCLI(t, 0, rebuildArgs(topic, flagsDB, "--table", "t", "--partitions", "1,3", "--partitioner", "consistent")...)
	if a, b := exportBytes(t, db, "t"), exportBytes(t, flagsDB, "t"); a != b {
		t.Errorf("the config's table and the flags' differ:\n%s\n---\n%s", a, b)
	}

	otherDB := dbPath(t)
	mustCLI(t, 0, "rebuild", "--config", cfg, "--table", "t", "--db", otherDB, "--partitions", "0-1")
	want, _, _ = oracle(recs, inSet(0, 1))
	checkTable(t, want, scanTable(t, otherDB, "t"))
	if sd := tablesShards(t, "--db", otherDB)["t"]; sd.PartitionSet != "0-1" || sd.Partitioner != "consistent" {
		t.Errorf("tables: %+v: want the flag's partition_set 0-1 and the file's partitioner", sd)
	}
}

// TestShardRepartitioned: once the topic of a shard has more partitions
// than its checkpoint recorded, update and rebuild are exit 3 naming both
// counts and saying what to do, and the table keeps its rows (the oracle's
// of its partitions before the change); dropped and rebuilt, the shard
// records the new count. A table over all partitions of the same topic
// updates as before, with the new partitions.
func TestShardRepartitioned(t *testing.T) {
	topic := newTopic(t, 2)
	rng := newRand(t)
	recs := produce(t, topic, genRecords(rng, []int32{0, 1}, 200))
	db := dbPath(t)
	mustCLI(t, 0, rebuildArgs(topic, db, "--table", "shard", "--partitions", "1")...)
	mustCLI(t, 0, rebuildArgs(topic, db, "--table", "whole")...)

	cl, err := broker.Client()
	if err != nil {
		t.Fatal(err)
	}
	res, err := kadm.NewClient(cl).CreatePartitions(context.Background(), 2, topic)
	cl.Close()
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	// Kafka creates partitions asynchronously: wait until they are listed.
	waitFor(t, 30*time.Second, "the topic's 4 partitions", func() bool { return len(marksOf(t, topic)) == 4 })
	recs = append(recs, produce(t, topic, genRecords(rng, []int32{0, 1, 2, 3}, 100))...)

	for _, args := range [][]string{updateArgs(db, "shard"), rebuildArgs(topic, db, "--table", "shard", "--partitions", "1")} {
		r := mustCLI(t, exitConflict, args...)
		for _, w := range []string{`table "shard"`, "the topic has 4 partitions, the table's checkpoint 2", "drop the table and rebuild it"} {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: stderr does not say %q:\n%s", args[0], w, r.stderr)
			}
		}
	}
	before := recs[:200]
	want, _, _ := oracle(before, inSet(1))
	checkTable(t, want, scanTable(t, db, "shard"))

	mustCLI(t, 0, updateArgs(db, "whole")...)
	wholeWant, _, _ := oracle(recs, nil)
	checkTable(t, wholeWant, scanTable(t, db, "whole"))

	mustCLI(t, 0, "drop", "--db", db, "--table", "shard")
	mustCLI(t, 0, rebuildArgs(topic, db, "--table", "shard", "--partitions", "1")...)
	want, _, _ = oracle(recs, inSet(1))
	checkTable(t, want, scanTable(t, db, "shard"))
	if sd := tablesShards(t, "--db", db)["shard"]; sd.PartitionSet != "1" || sd.PartitionsOfTopic != 4 {
		t.Errorf("tables: %+v: want partition_set 1 of 4", sd)
	}
}

// TestImportShard: a shard's export imported into another database is the
// same shard (its export is the same document: set, count, partitioner,
// rows), and an update of it reads only its partitions; importing it over
// a table of other partitions is exit 2.
func TestImportShard(t *testing.T) {
	topic := newTopic(t, 4)
	rng := newRand(t)
	all := []int32{0, 1, 2, 3}
	recs := produce(t, topic, genRecords(rng, all, 300))
	src, dst := dbPath(t), dbPath(t)
	mustCLI(t, 0, rebuildArgs(topic, src, "--table", "shard", "--partitions", "0,2", "--partitioner", "fnv1a")...)
	doc := filepath.Join(t.TempDir(), "shard.json")
	mustCLI(t, 0, "export", "--db", src, "--table", "shard", "--out", doc)
	mustCLI(t, 0, "import", "--db", dst, "--in", doc)
	if a, b := exportBytes(t, src, "shard"), exportBytes(t, dst, "shard"); a != b {
		t.Fatalf("the imported shard's export differs:\n%s\n---\n%s", a, b)
	}
	if sd := tablesShards(t, "--db", dst)["shard"]; sd.PartitionSet != "0,2" || !sd.Subset || sd.PartitionsOfTopic != 4 || sd.Partitioner != "fnv1a" {
		t.Errorf("tables of the import: %+v: want partition_set 0,2 of 4, partitioner fnv1a", sd)
	}
	recs = append(recs, produce(t, topic, genRecords(rng, all, 200))...)
	mustCLI(t, 0, updateArgs(dst, "shard")...)
	want, _, _ := oracle(recs, inSet(0, 2))
	checkTable(t, want, scanTable(t, dst, "shard"))

	other := dbPath(t)
	mustCLI(t, 0, rebuildArgs(topic, other, "--table", "shard", "--partitions", "1")...)
	r := mustCLI(t, exitUsage, "import", "--db", other, "--in", doc)
	if w := "holds partitions 1 of its topic; the document 0,2"; !strings.Contains(r.stderr, w) {
		t.Errorf("stderr does not say %q:\n%s", w, r.stderr)
	}
}
