package main

// Tests of update and import, run through the built binary (binPath). Each
// table is compared with an oracle computed here from the records the test
// produced, and with a full rebuild over the same records (their exports
// byte for byte, apart from the provenance members).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmaterialize/kmaterialize/internal/failpoint"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// bin runs the built binary with args and fails the test unless it exits
// with want.
func bin(t *testing.T, want int, args ...string) result {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	r := result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
	if r.code != want {
		t.Fatalf("kmaterialize %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
	}
	return r
}

func updateArgs(db, table string, extra ...string) []string {
	return append([]string{"update", "--brokers", broker.Addr, "--db", db, "--table", table, "--stall-timeout", "20s"}, extra...)
}

// provenanceFields are the export members that say where the data came from,
// which an update changes and a full rebuild does not share.
var provenanceFields = []string{"partitions", "updates_since_rebuild"}

// exportMembers returns the export document of table as its members, raw,
// without the provenance members.
func exportMembers(t *testing.T, db, table string) map[string]string {
	t.Helper()
	doc := bin(t, 0, "export", "--db", db, "--table", table).stdout
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatalf("export is not JSON: %v\n%s", err, doc)
	}
	out := map[string]string{}
	for k, v := range m {
		out[k] = string(v)
	}
	for _, k := range provenanceFields {
		if _, ok := out[k]; !ok {
			t.Fatalf("export lacks %q:\n%s", k, doc)
		}
		delete(out, k)
	}
	return out
}

// sameAsRebuild rebuilds the table into a fresh database from the whole
// topic (rebuildExtra: its fold flags) and checks that db's table exports
// the same document apart from provenance.
func sameAsRebuild(t *testing.T, topic, db, table string, rebuildExtra ...string) {
	t.Helper()
	fresh := dbPath(t)
	bin(t, 0, rebuildArgs(topic, fresh, append([]string{"--table", table}, rebuildExtra...)...)...)
	if diff := cmp.Diff(exportMembers(t, fresh, table), exportMembers(t, db, table)); diff != "" {
		t.Fatalf("export after updates differs from a full rebuild's (-rebuild +updated):\n%s", diff)
	}
}

// manyKeys generates n records over parts, with keys from a pool of pool
// per partition (a key lives in one partition), about 1 in 8 a tombstone.
func manyKeys(rng *rand.Rand, parts []int32, n, pool int, prefix string) []localkafka.Record {
	out := make([]localkafka.Record, n)
	for i := range out {
		p := parts[rng.Intn(len(parts))]
		out[i] = localkafka.Record{Partition: p, Key: []byte(fmt.Sprintf("p%d-%s%05d", p, prefix, rng.Intn(pool)))}
		if rng.Intn(8) != 0 {
			out[i].Value = []byte(fmt.Sprintf("v%d-%d-%s", i, rng.Intn(1_000_000), strings.Repeat("x", rng.Intn(100))))
		}
	}
	return out
}

func updatesSinceRebuild(t *testing.T, db, table string) int64 {
	t.Helper()
	r := bin(t, 0, "tables", "--db", db, "--format", "json")
	var ts []struct {
		Name    string `json:"name"`
		Updates int64  `json:"updates_since_rebuild"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &ts); err != nil {
		t.Fatal(err)
	}
	for _, tb := range ts {
		if tb.Name == table {
			return tb.Updates
		}
	}
	t.Fatalf("tables lacks %q:\n%s", table, r.stdout)
	return 0
}

// TestUpdateLatestEqualsRebuild: a rebuild, then an update applied in place,
// then one too big for one transaction (merged into a new generation, with
// run files), equal the oracle and a full rebuild over the same records.
func TestUpdateLatestEqualsRebuild(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 3)
	parts := []int32{0, 1, 2}
	db := dbPath(t)
	const table = "balances"
	var all []rec
	all = append(all, produce(t, topic, genRecords(rng, parts, 400))...)
	bin(t, 0, rebuildArgs(topic, db, "--table", table)...)

	all = append(all, produce(t, topic, genRecords(rng, parts, 300))...)
	r := bin(t, 0, updateArgs(db, table)...)
	if !strings.Contains(r.stdout, "(in-place)") {
		t.Fatalf("a small update was not applied in place:\n%s", r.stdout)
	}
	want, _, _ := oracle(all, nil)
	checkTable(t, want, scanTable(t, db, table))

	// 4000 records over 6000 new keys: their rows overflow --memory 1MiB's
	// hold (256 KiB), so the update spills run files and merges.
	all = append(all, produce(t, topic, manyKeys(rng, parts, 4000, 2000, "m"))...)
	r = bin(t, 0, updateArgs(db, table, "--memory", "1MiB")...)
	if !strings.Contains(r.stdout, "(merged)") {
		t.Fatalf("a large update was not merged:\n%s", r.stdout)
	}
	spilled := false
	for _, l := range logLines(r.stderr) {
		if l["message"] == "updated" {
			n, _ := l["runs"].(float64)
			spilled = n > 0
		}
	}
	if !spilled {
		t.Fatalf("the large update spilled no run file:\n%s", r.stderr)
	}
	if _, err := os.Stat(db + ".runs"); !os.IsNotExist(err) {
		t.Fatalf("run files left beside the database: %v", err)
	}
	want, _, _ = oracle(all, nil)
	checkTable(t, want, scanTable(t, db, table))
	if n := updatesSinceRebuild(t, db, table); n != 2 {
		t.Fatalf("updates since rebuild: %d, want 2", n)
	}

	// Nothing new: an update that reads nothing changes nothing but counts.
	bin(t, 0, updateArgs(db, table)...)
	checkTable(t, want, scanTable(t, db, table))
	sameAsRebuild(t, topic, db, table)
}

// vote is one count-fold record: an event id, its booth, and an ignored
// envelope field.
func vote(p int32, id, booth string, sent int) localkafka.Record {
	return localkafka.Record{Partition: p, Key: []byte(id),
		Value: []byte(fmt.Sprintf(`{"event_id":%q,"booth":%q,"sent_at":%d}`, id, booth, sent))}
}

var countFlags = []string{"--fold", "count", "--identity-field", "event_id", "--group-field", "booth", "--ignore-field", "sent_at"}

// genVotes generates n votes over parts with ids from pool: an id always
// votes for the same booth (its duplicates are retries, never conflicts).
func genVotes(rng *rand.Rand, parts []int32, n, pool int, prefix string) []localkafka.Record {
	out := make([]localkafka.Record, n)
	for i := range out {
		id := rng.Intn(pool)
		out[i] = vote(parts[rng.Intn(len(parts))], fmt.Sprintf("%s-%d", prefix, id), fmt.Sprintf("booth-%d", id%7), rng.Intn(1000))
	}
	return out
}

// countOracle counts distinct event ids per booth.
func countOracle(t *testing.T, recs []rec) map[string]string {
	t.Helper()
	booth := map[string]string{}
	for _, r := range recs {
		var v struct {
			ID    string `json:"event_id"`
			Booth string `json:"booth"`
		}
		if err := json.Unmarshal(r.V, &v); err != nil {
			t.Fatal(err)
		}
		if b, ok := booth[v.ID]; ok && b != v.Booth {
			t.Fatalf("oracle: event %s votes for %s and %s", v.ID, b, v.Booth)
		}
		booth[v.ID] = v.Booth
	}
	n := map[string]int{}
	for _, b := range booth {
		n[b]++
	}
	out := map[string]string{}
	for b, c := range n {
		out[b] = fmt.Sprint(c)
	}
	return out
}

// TestUpdateCountEqualsRebuild: the count fold dedupes across increments
// (retries of events an earlier run counted), in place and merged, and
// equals the oracle and a full rebuild.
func TestUpdateCountEqualsRebuild(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 2)
	parts := []int32{0, 1}
	db := dbPath(t)
	const table = "votes"
	var all []rec
	all = append(all, produce(t, topic, genVotes(rng, parts, 300, 200, "a"))...)
	bin(t, 0, rebuildArgs(topic, db, append([]string{"--table", table}, countFlags...)...)...)

	// Retries of the first ids and new ones.
	all = append(all, produce(t, topic, genVotes(rng, parts, 300, 300, "a"))...)
	r := bin(t, 0, updateArgs(db, table)...)
	if !strings.Contains(r.stdout, "(in-place)") {
		t.Fatalf("a small update was not applied in place:\n%s", r.stdout)
	}
	checkTable(t, countOracle(t, all), scanTable(t, db, table))

	// More than --memory 1MiB holds (256 KiB of records): folded into a
	// new generation that starts from a copy of the identity index.
	all = append(all, produce(t, topic, genVotes(rng, parts, 4000, 3000, "a"))...)
	r = bin(t, 0, updateArgs(db, table, "--memory", "1MiB")...)
	if !strings.Contains(r.stdout, "(merged)") {
		t.Fatalf("a large update was not merged:\n%s", r.stdout)
	}
	checkTable(t, countOracle(t, all), scanTable(t, db, table))
	sameAsRebuild(t, topic, db, table, countFlags...)
}

// TestUpdateCountConflictAcrossIncrements: an event id counted by the
// rebuild comes back with another booth: the update exits 3, in place and
// merged, and the table (its export, provenance included) is unchanged.
func TestUpdateCountConflictAcrossIncrements(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 2)
	db := dbPath(t)
	const table = "votes"
	// a-5 is counted for certain (200 random draws from 100 ids miss one
	// id about one run in eight).
	produce(t, topic, append(genVotes(rng, []int32{0, 1}, 200, 100, "a"), vote(0, "a-5", "booth-5", 0)))
	bin(t, 0, rebuildArgs(topic, db, append([]string{"--table", table}, countFlags...)...)...)
	before := bin(t, 0, "export", "--db", db, "--table", table).stdout

	// a-5 voted for booth-5 (5%7); now for booth-6, from the other partition.
	produce(t, topic, append(genVotes(rng, []int32{0}, 50, 1000, "b"), vote(1, "a-5", "booth-6", 1)))
	for _, extra := range [][]string{nil, {"--memory", "1MiB"}} {
		r := bin(t, 3, updateArgs(db, table, extra...)...)
		if !strings.Contains(r.stderr, `conflicting event_id \"a-5\"`) && !strings.Contains(r.stderr, `conflicting event_id "a-5"`) {
			t.Fatalf("update %v: stderr does not name the conflict:\n%s", extra, r.stderr)
		}
		if after := bin(t, 0, "export", "--db", db, "--table", table).stdout; after != before {
			t.Fatalf("update %v: the table changed after a conflict:\n%s\n---\n%s", extra, before, after)
		}
	}
}

// TestUpdateRecordsDeleted: records deleted above the checkpoint (DeleteRecords)
// refuse the update with exit 4 naming partition, checkpoint and low; with
// --rebuild-if-needed a full rebuild publishes what is retained. A
// partition added since the checkpoint is read from its low.
func TestUpdateRecordsDeleted(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 2)
	db := dbPath(t)
	const table = "balances"
	var all []rec
	all = append(all, produce(t, topic, genRecords(rng, []int32{0, 1}, 200))...)
	bin(t, 0, rebuildArgs(topic, db, "--table", table)...)
	cp := tablesJSON(t, db)[table].Partitions[1].End

	// A third partition, then new records everywhere.
	cl, err := broker.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreatePartitions(context.Background(), 1, topic); err != nil {
		t.Fatal(err)
	}
	all = append(all, produce(t, topic, genRecords(rng, []int32{0, 1, 2}, 300))...)
	// Partition 1 loses records the table has not read.
	low := cp + 5
	if err := broker.DeleteRecords(context.Background(), topic, 1, low); err != nil {
		t.Fatal(err)
	}
	before := bin(t, 0, "export", "--db", db, "--table", table).stdout
	r := bin(t, 4, updateArgs(db, table)...)
	for _, s := range []string{"partition 1", fmt.Sprintf("checkpoint %d", cp), fmt.Sprintf("retained low %d", low), "--rebuild-if-needed"} {
		if !strings.Contains(r.stderr, s) {
			t.Fatalf("refusal lacks %q:\n%s", s, r.stderr)
		}
	}
	if after := bin(t, 0, "export", "--db", db, "--table", table).stdout; after != before {
		t.Fatal("a refused update changed the table")
	}

	r = bin(t, 0, updateArgs(db, table, "--rebuild-if-needed")...)
	if !strings.Contains(r.stdout, "published table") {
		t.Fatalf("--rebuild-if-needed did not rebuild:\n%s", r.stdout)
	}
	want, _, _ := oracle(all, func(r rec) bool { return r.P != 1 || r.O >= low })
	checkTable(t, want, scanTable(t, db, table))
	if n := updatesSinceRebuild(t, db, table); n != 0 {
		t.Fatalf("updates since rebuild after a rebuild: %d", n)
	}

	// Then a normal update reads the third partition's new records too.
	all = append(all, produce(t, topic, genRecords(rng, []int32{0, 1, 2}, 100))...)
	bin(t, 0, updateArgs(db, table)...)
	want, _, _ = oracle(all, func(r rec) bool { return r.P != 1 || r.O >= low })
	checkTable(t, want, scanTable(t, db, table))
}

// TestUpdateAddedPartition: a partition created after the checkpoint is
// read from its retained low by the next update.
func TestUpdateAddedPartition(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 1)
	db := dbPath(t)
	const table = "balances"
	var all []rec
	all = append(all, produce(t, topic, genRecords(rng, []int32{0}, 100))...)
	bin(t, 0, rebuildArgs(topic, db, "--table", table)...)
	cl, err := broker.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreatePartitions(context.Background(), 1, topic); err != nil {
		t.Fatal(err)
	}
	all = append(all, produce(t, topic, genRecords(rng, []int32{0, 1}, 200))...)
	bin(t, 0, updateArgs(db, table)...)
	want, _, _ := oracle(all, nil)
	checkTable(t, want, scanTable(t, db, table))
	ps := tablesJSON(t, db)[table].Partitions
	if len(ps) != 2 || ps[1].Start != 0 || ps[0].Start != 0 {
		t.Fatalf("provenance after the added partition: %+v", ps)
	}
	sameAsRebuild(t, topic, db, table)
}

// TestUpdateCompactedTombstones: on a compacted topic whose
// delete.retention.ms has passed since the checkpoint, compaction may have
// removed a tombstone the table never read, so the update is refused; with
// --rebuild-if-needed the table equals what the topic retains. With the
// default retention the update goes ahead; with DescribeConfigs denied it
// is refused and says so.
func TestUpdateCompactedTombstones(t *testing.T) {
	localkafka.KfakeOnly(t)
	topic := runName(t)
	broker.TestTopic(t, topic, 1, map[string]string{"cleanup.policy": "compact", "delete.retention.ms": "1"})
	db := dbPath(t)
	const table = "config"
	produce(t, topic, []localkafka.Record{{Key: []byte("k1"), Value: []byte("a")}, {Key: []byte("k2"), Value: []byte("b")}})
	bin(t, 0, rebuildArgs(topic, db, "--table", table)...)
	// Each in its own batch: compaction keeps the last batch only.
	produce(t, topic, []localkafka.Record{{Key: []byte("k1")}})
	produce(t, topic, []localkafka.Record{{Key: []byte("k3"), Value: []byte("c")}})
	produce(t, topic, []localkafka.Record{{Key: []byte("k4"), Value: []byte("d")}})
	// delete.retention.ms is 1ms: compaction removes the tombstone (and the
	// value it deleted). Proved with an independent reader.
	waitFor(t, 10*time.Second, "compaction to remove the tombstone", func() bool {
		broker.Cluster.Compact()
		recs, err := broker.ReadCommitted(context.Background(), topic, map[int32]int64{0: 5})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs[0] {
			if string(r.Key) == "k1" {
				return false
			}
		}
		return true
	})
	r := bin(t, 4, updateArgs(db, table)...)
	if !strings.Contains(r.stderr, "compacted") || !strings.Contains(r.stderr, "delete.retention.ms=1") {
		t.Fatalf("refusal does not name the retention:\n%s", r.stderr)
	}
	checkTable(t, map[string]string{"k1": "a", "k2": "b"}, scanTable(t, db, table))
	bin(t, 0, updateArgs(db, table, "--rebuild-if-needed")...)
	checkTable(t, map[string]string{"k2": "b", "k3": "c", "k4": "d"}, scanTable(t, db, table))

	// The default retention (24h): the update goes ahead.
	topic2 := runName(t)
	broker.TestTopic(t, topic2, 1, map[string]string{"cleanup.policy": "compact"})
	produce(t, topic2, []localkafka.Record{{Key: []byte("k1"), Value: []byte("a")}})
	bin(t, 0, rebuildArgs(topic2, db, "--table", "t2")...)
	produce(t, topic2, []localkafka.Record{{Key: []byte("k1")}, {Key: []byte("k2"), Value: []byte("b")}})
	bin(t, 0, updateArgs(db, "t2")...)
	checkTable(t, map[string]string{"k2": "b"}, scanTable(t, db, "t2"))

	// An imported table's checkpoint has no age: on a compacted topic its
	// update is refused until a rebuild.
	doc := filepath.Join(t.TempDir(), "t2.json")
	bin(t, 0, "export", "--db", db, "--table", "t2", "--out", doc)
	imported := dbPath(t)
	bin(t, 0, "import", "--db", imported, "--in", doc)
	r = bin(t, 4, updateArgs(imported, "t2")...)
	if !strings.Contains(r.stderr, "age is unknown") {
		t.Fatalf("refusal of an imported checkpoint:\n%s", r.stderr)
	}
	bin(t, 0, updateArgs(imported, "t2", "--rebuild-if-needed")...)
	checkTable(t, map[string]string{"k2": "b"}, scanTable(t, imported, "t2"))

	// DescribeConfigs denied: the age cannot be judged, so it is refused,
	// exit 5 as every refusal by the authorizer (TestACLsPerCommand).
	h := broker.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.DescribeConfigs}, Resource: topic2,
		Err: kerr.TopicAuthorizationFailed, Count: -1})
	defer h.Remove()
	produce(t, topic2, []localkafka.Record{{Key: []byte("k3"), Value: []byte("c")}})
	r = bin(t, 5, updateArgs(db, "t2")...)
	if h.Hits() == 0 {
		t.Fatal("the DescribeConfigs fault never fired")
	}
	if !strings.Contains(r.stderr, "DescribeConfigs") || !strings.Contains(r.stderr, "cannot be read") {
		t.Fatalf("refusal does not say the configuration is unreadable:\n%s", r.stderr)
	}
	checkTable(t, map[string]string{"k2": "b"}, scanTable(t, db, "t2"))
}

// TestImportThenUpdate: an export imported into another database, then
// updated, equals a full rebuild; a count export, a mismatched topic and
// another format version are refused with exit 2.
func TestImportThenUpdate(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 2)
	parts := []int32{0, 1}
	src, dst := dbPath(t), dbPath(t)
	const table = "balances"
	var all []rec
	all = append(all, produce(t, topic, genRecords(rng, parts, 300))...)
	bin(t, 0, rebuildArgs(topic, src, "--table", table)...)
	doc := filepath.Join(t.TempDir(), "balances.json")
	bin(t, 0, "export", "--db", src, "--table", table, "--out", doc)

	r := bin(t, 0, "import", "--db", dst, "--in", doc)
	if !strings.Contains(r.stdout, "imported table "+table) {
		t.Fatalf("import output:\n%s", r.stdout)
	}
	if diff := cmp.Diff(exportMembers(t, src, table), exportMembers(t, dst, table)); diff != "" {
		t.Fatalf("imported table differs (-exported +imported):\n%s", diff)
	}
	all = append(all, produce(t, topic, genRecords(rng, parts, 300))...)
	bin(t, 0, updateArgs(dst, table)...)
	want, _, _ := oracle(all, nil)
	checkTable(t, want, scanTable(t, dst, table))
	sameAsRebuild(t, topic, dst, table)

	// Refusals: exit 2, nothing published.
	before := bin(t, 0, "export", "--db", dst, "--table", table).stdout
	votesTopic := newTopic(t, 1)
	produce(t, votesTopic, genVotes(rng, []int32{0}, 20, 10, "a"))
	bin(t, 0, rebuildArgs(votesTopic, src, append([]string{"--table", "votes"}, countFlags...)...)...)
	countDoc := filepath.Join(t.TempDir(), "votes.json")
	bin(t, 0, "export", "--db", src, "--table", "votes", "--out", countDoc)
	r = bin(t, 2, "import", "--db", dst, "--in", countDoc)
	if !strings.Contains(r.stderr, "identity index") {
		t.Fatalf("count import refusal lacks the reason:\n%s", r.stderr)
	}
	other := newTopic(t, 1)
	produce(t, other, genRecords(rng, []int32{0}, 20))
	bin(t, 0, rebuildArgs(other, src, "--table", "other")...)
	otherDoc := filepath.Join(t.TempDir(), "other.json")
	bin(t, 0, "export", "--db", src, "--table", "other", "--out", otherDoc)
	r = bin(t, 2, "import", "--db", dst, "--in", otherDoc, "--table", table)
	if !strings.Contains(r.stderr, "is of topic") {
		t.Fatalf("topic mismatch refusal:\n%s", r.stderr)
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	v2 := filepath.Join(t.TempDir(), "v2.json")
	if err := os.WriteFile(v2, bytes.Replace(b, []byte(`"format": 1`), []byte(`"format": 2`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	r = bin(t, 2, "import", "--db", dst, "--in", v2)
	if !strings.Contains(r.stderr, "format version 2") {
		t.Fatalf("format refusal:\n%s", r.stderr)
	}
	if after := bin(t, 0, "export", "--db", dst, "--table", table).stdout; after != before {
		t.Fatal("a refused import changed the table")
	}
	names := []string{}
	for n := range tablesJSON(t, dst) {
		names = append(names, n)
	}
	sort.Strings(names)
	if diff := cmp.Diff([]string{table}, names); diff != "" {
		t.Fatalf("tables after refused imports (-want +got):\n%s", diff)
	}
}

// TestRoutedUpdate: while a daemon holds the database, update goes through
// it (no --brokers needed: the daemon's), publishes what the oracle says,
// refuses flags that would change how it runs, and keeps update's exit
// codes: a checkpoint below the retained low is exit 4 through the daemon
// too, and --rebuild-if-needed rebuilds.
func TestRoutedUpdate(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 2)
	parts := []int32{0, 1}
	var all []rec
	all = append(all, produce(t, topic, genRecords(rng, parts, 100))...)
	rig := newDaemonRig(t, topic, "")
	rig.start(t)

	all = append(all, produce(t, topic, genRecords(rng, parts, 100))...)
	r := bin(t, 0, "update", "--db", rig.db, "--table", rig.table)
	if !strings.Contains(r.stdout, "updated table "+rig.table+" (in-place)") {
		t.Fatalf("routed update output:\n%s", r.stdout)
	}
	want, _, _ := oracle(all, nil)
	checkServedKeys(t, rig, want)
	if n := updatesSinceRebuild(t, rig.db, rig.table); n != 1 {
		t.Fatalf("updates since rebuild through the daemon: %d, want 1", n)
	}

	// The route's contract: unknown parameters and values are 400.
	for _, q := range []string{"?bogus=1", "?rebuild_if_needed=maybe"} {
		resp, err := rig.cl.Post("http://kmaterialize/v1/tables/"+rig.table+"/update"+q, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Fatalf("POST update%s: %d, want 400", q, resp.StatusCode)
		}
	}

	r = bin(t, 2, "update", "--db", rig.db, "--table", rig.table, "--memory", "1MiB")
	if !strings.Contains(r.stderr, "--memory") {
		t.Fatalf("refused flag not named:\n%s", r.stderr)
	}

	cp := tablesJSON(t, rig.db)[rig.table].Partitions[0].End
	all = append(all, produce(t, topic, genRecords(rng, parts, 100))...)
	if err := broker.DeleteRecords(context.Background(), topic, 0, cp+1); err != nil {
		t.Fatal(err)
	}
	r = bin(t, 4, "update", "--db", rig.db, "--table", rig.table)
	if !strings.Contains(r.stderr, fmt.Sprintf("checkpoint %d is below the retained low %d", cp, cp+1)) {
		t.Fatalf("routed refusal:\n%s", r.stderr)
	}
	checkServedKeys(t, rig, want)
	bin(t, 0, "update", "--db", rig.db, "--table", rig.table, "--rebuild-if-needed")
	want, _, _ = oracle(all, func(r rec) bool { return r.P != 0 || r.O >= cp+1 })
	checkServedKeys(t, rig, want)
}

// checkServedKeys checks every key of the oracle through the daemon, and
// that it serves no other key.
func checkServedKeys(t *testing.T, rig *daemonRig, want map[string]string) {
	t.Helper()
	checkKeys(t, rig.cl, rig.table, want)
	if tb := rig.status(t); *tb.Keys != int64(len(want)) {
		t.Fatalf("the daemon serves %d keys, the oracle has %d", *tb.Keys, len(want))
	}
}

// TestUpdateUsage: bad flags are exit 2, a database or table that is not
// there exit 6, and neither creates the file.
func TestUpdateUsage(t *testing.T) {
	db := dbPath(t)
	r := bin(t, 6, updateArgs(db, "nope")...)
	if !strings.Contains(r.stderr, "no database at") {
		t.Fatalf("missing database:\n%s", r.stderr)
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Fatalf("update created the database file: %v", err)
	}
	bin(t, 2, updateArgs(db, "nope", "--end", "low")...)
	bin(t, 2, updateArgs(db, "nope", "--memory", "1KiB")...)
	topic := newTopic(t, 1)
	produce(t, topic, []localkafka.Record{{Key: []byte("k"), Value: []byte("v")}})
	bin(t, 0, rebuildArgs(topic, db, "--table", "t")...)
	r = bin(t, 6, updateArgs(db, "nope")...)
	if !strings.Contains(r.stderr, `table "nope" not found`) {
		t.Fatalf("missing table:\n%s", r.stderr)
	}
}

// jsonRecords generates n records over parts whose values are JSON objects
// written with whitespace and keys out of order, and a tombstone now and
// then, so that only a decoding fold stores them as canonical JSON.
func jsonRecords(rng *rand.Rand, parts []int32, n int) []localkafka.Record {
	out := make([]localkafka.Record, n)
	for i := range out {
		p := parts[rng.Intn(len(parts))]
		out[i] = localkafka.Record{Partition: p, Key: []byte(fmt.Sprintf("p%d-k%02d", p, rng.Intn(10)))}
		if rng.Intn(9) != 0 {
			out[i].Value = []byte(fmt.Sprintf(`{ "z": %d,  "a": [ %d, "s%d" ], "n": 12345678901234567890 }`, i, rng.Intn(1000), rng.Intn(50)))
		}
	}
	return out
}

// canonicalJSON is the test's own canonical form of a JSON text: decoded
// with exact numbers and encoded again by encoding/json (object keys
// sorted, no insignificant whitespace).
func canonicalJSON(t *testing.T, s string) string {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("oracle: %q is not JSON: %v", s, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestUpdateDecodesLikeTheRebuild: a table rebuilt with --value-format json
// stores canonical JSON, and an update decodes its new records the same way
// (the format is part of the stored definition): the table equals the
// oracle's canonical values and a full rebuild.
func TestUpdateDecodesLikeTheRebuild(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 2)
	parts := []int32{0, 1}
	db := dbPath(t)
	const table = "docs"
	var all []rec
	all = append(all, produce(t, topic, jsonRecords(rng, parts, 60))...)
	bin(t, 0, rebuildArgs(topic, db, "--table", table, "--value-format", "json")...)
	all = append(all, produce(t, topic, jsonRecords(rng, parts, 60))...)
	bin(t, 0, updateArgs(db, table)...)

	raw, _, _ := oracle(all, nil)
	want := map[string]string{}
	for k, v := range raw {
		want[k] = canonicalJSON(t, v)
	}
	checkTable(t, want, scanTable(t, db, table))
	sameAsRebuild(t, topic, db, table, "--value-format", "json")
}

// TestUpdateKill9: an update merged into a new generation, killed with
// SIGKILL at points inside its commits (a run file written, a block of rows
// committed, the publish transaction about to commit), leaves the table
// exactly as it was (its export, provenance included) and the file
// consistent; the next update publishes what the oracle says and leaves no
// generation or run file behind. (An in-place update is one bbolt write
// transaction, store.DB.Apply, which has no failpoint.)
func TestUpdateKill9(t *testing.T) {
	for _, tc := range []struct {
		point string
		extra []string
	}{
		{failpoint.RunWritten, []string{"--memory", "1MiB"}},
		{failpoint.FoldCommitAfter, []string{"--memory", "1MiB"}},
		{failpoint.PublishCommitBefore, []string{"--memory", "1MiB"}},
	} {
		t.Run(tc.point, func(t *testing.T) {
			rng := newRand(t)
			topic := newTopic(t, 2)
			parts := []int32{0, 1}
			db := dbPath(t)
			const table = "balances"
			var all []rec
			all = append(all, produce(t, topic, genRecords(rng, parts, 200))...)
			bin(t, 0, rebuildArgs(topic, db, "--table", table)...)
			before := bin(t, 0, "export", "--db", db, "--table", table).stdout
			all = append(all, produce(t, topic, manyKeys(rng, parts, 4000, 2000, "m"))...)

			file := filepath.Join(t.TempDir(), "failpoint")
			c := startChild(t, []string{failpoint.EnvPoint + "=" + tc.point, failpoint.EnvFile + "=" + file},
				failpointBinary(t), append([]string{"--log-format", "json"}, updateArgs(db, table, tc.extra...)...)...)
			awaitFailpoint(t, c, file, "failpoint "+tc.point+" parked")
			if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if ws := c.wait(t, 30*time.Second); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("child ended with %v, want killed by SIGKILL", ws)
			}
			boltCheck(t, db)
			if after := bin(t, 0, "export", "--db", db, "--table", table).stdout; after != before {
				t.Fatalf("the table changed under a killed update:\n%s\n---\n%s", before, after)
			}

			r := bin(t, 0, updateArgs(db, table)...)
			if !strings.Contains(r.stdout, "updated table") {
				t.Fatalf("update after the kill:\n%s", r.stdout)
			}
			want, _, _ := oracle(all, nil)
			checkTable(t, want, scanTable(t, db, table))
			if ids := generationIDs(generationRows(t, db)); len(ids) != 1 {
				t.Fatalf("generation buckets after the next update: %v, want only the published one", ids)
			}
			if _, err := os.Stat(db + ".runs"); !os.IsNotExist(err) {
				t.Fatalf("run files left after the next update: %v", err)
			}
			sameAsRebuild(t, topic, db, table)
		})
	}
}

// TestUpdateRefusesAsOfTable: a table rebuilt as of a point is not updated
// (that would silently make it a table as of now): exit 2, table unchanged.
func TestUpdateRefusesAsOfTable(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 1)
	db := dbPath(t)
	const table = "asof"
	produce(t, topic, genRecords(rng, []int32{0}, 30))
	bin(t, 0, rebuildArgs(topic, db, "--table", table, "--to-offsets", "0=10")...)
	before := exportMembers(t, db, table)
	produce(t, topic, genRecords(rng, []int32{0}, 10))
	r := bin(t, 2, updateArgs(db, table)...)
	if !strings.Contains(r.stderr, "as of a point") {
		t.Fatalf("the refusal does not say why:\n%s", r.stderr)
	}
	if diff := cmp.Diff(before, exportMembers(t, db, table)); diff != "" {
		t.Fatalf("a refused update changed the table:\n%s", diff)
	}
}

// TestRoutedUpdateFollowedTable: an update of a table the daemon follows
// is refused, through the API (409 table_followed) and the routed CLI
// (exit 2, the daemon's message and a hint, nothing else): the follower
// keeps the table current, and an update would race it. The table is left
// as the follower keeps it: no update counted, still following, and it
// equals the oracle of every record.
func TestRoutedUpdateFollowedTable(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 2)
	parts := []int32{0, 1}
	all := produce(t, topic, genRecords(rng, parts, 100))
	rig := newDaemonRig(t, topic, "    follow: true\n    follow_interval: 50ms\n")
	rig.start(t)
	all = append(all, produce(t, topic, genRecords(rng, parts, 100))...)

	resp, err := rig.cl.Post("http://kmaterialize/v1/tables/"+rig.table+"/update", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var ae struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	if resp.StatusCode != http.StatusConflict || json.Unmarshal(body, &ae) != nil || ae.Code != "table_followed" ||
		!strings.Contains(ae.Error, "follower keeps it current") {
		t.Fatalf("POST update of a followed table: %d %s; want 409 table_followed saying the follower keeps it current", resp.StatusCode, body)
	}

	r := bin(t, 2, "update", "--db", rig.db, "--table", rig.table)
	if r.stdout != "" || !strings.Contains(r.stderr, "the daemon at "+rig.sock+" answered: table \""+rig.table+"\" is followed") ||
		!strings.Contains(r.stderr, "follow: false") {
		t.Fatalf("routed update of a followed table: stdout %q, stderr:\n%s", r.stdout, r.stderr)
	}
	want, _, _ := oracle(all, nil)
	hw := map[int32]int64{}
	for _, p := range parts {
		hw[p] = marksOf(t, topic)[p].High
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body, _ := httpGet(t, rig.cl, "/v1/tables/"+rig.table)
		var tb struct {
			State               string `json:"state"`
			UpdatesSinceRebuild int64  `json:"updates_since_rebuild"`
			Partitions          []struct {
				Partition int32 `json:"partition"`
				End       int64 `json:"end"`
			} `json:"partitions"`
		}
		if code == http.StatusOK && json.Unmarshal([]byte(body), &tb) == nil {
			if tb.UpdatesSinceRebuild != 0 {
				t.Fatalf("the refused update counted: %s", body)
			}
			ends := map[int32]int64{}
			for _, p := range tb.Partitions {
				ends[p.Partition] = p.End
			}
			if tb.State == "following" && cmp.Equal(ends, hw) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follower did not reach %v: %d %s", hw, code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	checkServedKeys(t, rig, want)
}
