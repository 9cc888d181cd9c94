package main

// Tests of bad records, of mistakes that would wipe a table, and of bad
// flags (issue 7, point 4). Every topic is new on every run (newTopic), so
// these tests repeat with -count.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// TestScanExportNeverPartial: a value that cannot be shown (not UTF-8; in
// tsv, a newline) in the last row of a table much larger than any output
// buffer fails scan and export with exit 2 and nothing on stdout; with
// --base64 (or a format that can show it) the document is complete and
// matches the oracle.
func TestScanExportNeverPartial(t *testing.T) {
	topic := newTopic(t, 1)
	var recs []localkafka.Record
	for i := range 3000 {
		recs = append(recs, localkafka.Record{Key: []byte(fmt.Sprintf("k%05d", i)), Value: []byte(strings.Repeat("v", 60) + fmt.Sprint(i))})
	}
	recs = append(recs,
		localkafka.Record{Key: []byte("zz-newline"), Value: []byte("two\nlines")},
		localkafka.Record{Key: []byte("zzz-binary"), Value: []byte{0xff, 0xfe, 'x'}})
	all := produce(t, topic, recs)
	want, _, _ := oracle(all, nil)
	db := dbPath(t)
	mustCLI(t, 0, rebuildArgs(topic, db)...)

	for _, args := range [][]string{
		{"scan", "--format", "json"},
		{"scan", "--format", "jsonl"},
		{"scan", "--format", "tsv"},
		{"export"},
	} {
		r := kmz(t, append(args, "--db", db, "--table", topic)...)
		if r.code != exitUsage || r.stdout != "" {
			t.Fatalf("%v: exit %d with %d bytes on stdout, want exit 2 and nothing", args, r.code, len(r.stdout))
		}
		if !strings.Contains(r.stderr, "zz") || !strings.Contains(r.stderr, "--base64") {
			t.Fatalf("%v: stderr should name the key and suggest --base64:\n%s", args, r.stderr)
		}
	}
	// tsv without the binary row: the newline alone fails it before any byte.
	r := kmz(t, "scan", "--db", db, "--table", topic, "--format", "tsv", "--prefix", "zz-")
	if r.code != exitUsage || r.stdout != "" {
		t.Fatalf("tsv with a newline: exit %d, stdout %q", r.code, r.stdout)
	}

	// Complete documents: the json scan and the export with --base64.
	r = mustCLI(t, 0, "scan", "--db", db, "--table", topic, "--base64")
	var rows map[string]string
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("scan --base64 is not one JSON document: %v", err)
	}
	checkTable(t, base64Map(want), rows)
	r = mustCLI(t, 0, "export", "--db", db, "--table", topic, "--base64")
	var doc struct {
		Rows map[string]string `json:"rows"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("export --base64 is not one JSON document: %v", err)
	}
	checkTable(t, base64Map(want), doc.Rows)
	// jsonl shows the newline (JSON escapes it); only the binary row fails it.
	r = mustCLI(t, 0, "scan", "--db", db, "--table", topic, "--format", "jsonl", "--prefix", "zz-n")
	if !bytes.Contains([]byte(r.stdout), []byte(`"two\nlines"`)) {
		t.Fatalf("jsonl of the newline row: %q", r.stdout)
	}
}

func base64Map(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[base64.StdEncoding.EncodeToString([]byte(k))] = base64.StdEncoding.EncodeToString([]byte(v))
	}
	return out
}

// nullKeyReason is how `tables` shows n records skipped for their null key.
func nullKeyReason(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (null_key=%d)", n)
}

// exportDoc is `export` of table, the byte-exact document.
func exportDoc(t *testing.T, db, table string) string {
	t.Helper()
	return mustCLI(t, 0, "export", "--db", db, "--table", table).stdout
}

// tableSkippedLine is the "records skipped" line of `tables` (one table in
// db), with its spacing collapsed.
func tableSkippedLine(t *testing.T, db string) string {
	t.Helper()
	r := mustCLI(t, 0, "tables", "--db", db)
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.Contains(line, "records skipped:") {
			return strings.Join(strings.Fields(line), " ")
		}
	}
	t.Fatalf("no records skipped line in:\n%s", r.stdout)
	return ""
}

// TestOversizedKey: a record whose key is over bbolt's 32 KiB limit fails
// the rebuild with exit 3 naming topic, partition, offset and key size, and
// the published table stays byte for byte; --on-bad-record skip publishes
// the oracle's table without that record and `tables` counts it by reason.
func TestOversizedKey(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 3)
	db := dbPath(t)
	all := produce(t, topic, genRecords(rng, []int32{0, 1, 2}, 60))
	mustCLI(t, 0, rebuildArgs(topic, db)...)
	before := exportDoc(t, db, topic)

	big := bytes.Repeat([]byte("K"), 32768+1)
	edge := bytes.Repeat([]byte("E"), 32768) // exactly the limit: a row
	more := produce(t, topic, []localkafka.Record{
		{Partition: 1, Key: edge, Value: []byte("edge")},
		{Partition: 1, Key: big, Value: []byte("too big")},
	})
	more = append(more, produce(t, topic, genRecords(rng, []int32{0, 1, 2}, 20))...)
	all = append(all, more...)
	bad := more[1]

	r := mustCLI(t, exitConflict, rebuildArgs(topic, db)...)
	where := fmt.Sprintf("%s/%d@%d", topic, bad.P, bad.O)
	for _, s := range []string{where, fmt.Sprintf("key is %d bytes", len(big)), "--on-bad-record skip"} {
		if !strings.Contains(r.stderr, s) {
			t.Fatalf("stderr lacks %q:\n%s", s, r.stderr)
		}
	}
	if after := exportDoc(t, db, topic); after != before {
		t.Fatalf("a refused rebuild changed the table:\n%s\n---\n%s", before, after)
	}

	mustCLI(t, 0, rebuildArgs(topic, db, "--on-bad-record", "skip")...)
	want, read, nullKeys := oracle(all, func(r rec) bool { return len(r.K) <= 32768 })
	got := map[string]string{}
	if err := json.Unmarshal([]byte(mustCLI(t, 0, "scan", "--db", db, "--table", topic).stdout), &got); err != nil {
		t.Fatal(err)
	}
	checkTable(t, want, got)
	if _, ok := got[string(edge)]; !ok {
		t.Fatal("a key of exactly 32768 bytes is missing")
	}
	tb := tablesJSON(t, db)[topic]
	if tb.Records != read+1 || tb.Skipped != nullKeys+1 {
		t.Fatalf("tables: %d records, %d skipped; want %d and %d", tb.Records, tb.Skipped, read+1, nullKeys+1)
	}
	var tables []struct {
		SkippedByReason map[string]int64 `json:"skipped_by_reason"`
	}
	r = mustCLI(t, 0, "tables", "--db", db, "--format", "json")
	if err := json.Unmarshal([]byte(r.stdout), &tables); err != nil || len(tables) != 1 {
		t.Fatalf("tables --format json: %v\n%s", err, r.stdout)
	}
	wantReasons := map[string]int64{"key_too_large": 1}
	if nullKeys > 0 {
		wantReasons["null_key"] = nullKeys
	}
	checkReasons(t, wantReasons, tables[0].SkippedByReason)
	wantLine := fmt.Sprintf("records skipped: %d (key_too_large=1%s)", nullKeys+1, map[bool]string{true: fmt.Sprintf(", null_key=%d", nullKeys)}[nullKeys > 0])
	if line := tableSkippedLine(t, db); line != wantLine {
		t.Fatalf("tables shows %q, want %q", line, wantLine)
	}
	mustCLI(t, exitUsage, rebuildArgs(topic, db, "--on-bad-record", "ignore")...)
}

func checkReasons(t *testing.T, want, got map[string]int64) {
	t.Helper()
	if fmt.Sprint(want) != fmt.Sprint(got) {
		t.Fatalf("skipped_by_reason %v, want %v", got, want)
	}
}

// TestEmptyTableGuard: --from-timestamp after the last record would publish
// an empty table over a full one: exit 3 naming the table and its key count,
// the table byte for byte as before; with --allow-empty it is published.
// A first rebuild into an empty table has nothing to wipe and succeeds.
func TestEmptyTableGuard(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 2)
	db := dbPath(t)
	all := produce(t, topic, genRecords(rng, []int32{0, 1}, 40))
	future := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)

	// First rebuild, from after the last record: empty, allowed.
	first := dbPath(t)
	mustCLI(t, 0, rebuildArgs(topic, first, "--from-timestamp", future)...)
	checkTable(t, map[string]string{}, scanTable(t, first, topic))

	mustCLI(t, 0, rebuildArgs(topic, db)...)
	want, _, _ := oracle(all, nil)
	if len(want) == 0 {
		t.Fatal("setup: the oracle table is empty")
	}
	checkTable(t, want, scanTable(t, db, topic))
	before := exportDoc(t, db, topic)

	for _, from := range [][]string{
		{"--from-timestamp", future},
		{"--from-offsets", fmt.Sprintf("0=%d,1=%d", marksOf(t, topic)[0].High, marksOf(t, topic)[1].High)},
	} {
		r := mustCLI(t, exitConflict, rebuildArgs(topic, db, from...)...)
		for _, s := range []string{fmt.Sprintf("table %q has %d keys", topic, len(want)), "--allow-empty"} {
			if !strings.Contains(r.stderr, s) {
				t.Fatalf("%v: stderr lacks %q:\n%s", from, s, r.stderr)
			}
		}
		if after := exportDoc(t, db, topic); after != before {
			t.Fatalf("%v: a refused rebuild changed the table:\n%s\n---\n%s", from, before, after)
		}
	}
	mustCLI(t, 0, rebuildArgs(topic, db, "--from-timestamp", future, "--allow-empty")...)
	checkTable(t, map[string]string{}, scanTable(t, db, topic))
	if tb := tablesJSON(t, db)[topic]; tb.Keys != 0 || tb.Records != 0 {
		t.Fatalf("tables after --allow-empty: %+v", tb)
	}
}

// TestSecondsTimestamp: a numeric --from-timestamp of fewer than 12 digits
// is epoch seconds by mistake: refused (exit 2) with the milliseconds and
// RFC 3339 forms of the same instant as the hint, before any work.
func TestSecondsTimestamp(t *testing.T) {
	db := dbPath(t)
	r := mustCLI(t, exitUsage, rebuildArgs("no-topic-needed", db, "--from-timestamp", "1700000000")...)
	for _, s := range []string{"1700000000 looks like seconds", "milliseconds", "1700000000000", "2023-11-14T22:13:20Z"} {
		if !strings.Contains(r.stderr, s) {
			t.Fatalf("stderr lacks %q:\n%s", s, r.stderr)
		}
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Fatalf("the database was created (%v): the check must come before any work", err)
	}
}

// TestStallTimeoutZero: copy, verify and describe refuse --stall-timeout 0
// (and negative) with exit 2, as rebuild does, instead of waiting 30 s.
func TestStallTimeoutZero(t *testing.T) {
	topic := newTopic(t, 1)
	dst := newTopic(t, 1)
	for _, args := range [][]string{
		{"rebuild", "--brokers", broker.Addr, "--topic", topic, "--db", dbPath(t)},
		{"describe", "--brokers", broker.Addr, "--topic", topic},
		{"verify", "--brokers", broker.Addr, "--from", topic, "--to", dst},
		{"copy", "--brokers", broker.Addr, "--from", topic, "--to", dst, "--group", topic + "-g", "--transactional-id", topic + "-t"},
	} {
		for _, d := range []string{"0", "0s", "-1s"} {
			r := mustCLI(t, exitUsage, append(args, "--stall-timeout", d)...)
			if !strings.Contains(r.stderr, "--stall-timeout") || r.stdout != "" {
				t.Fatalf("%s --stall-timeout %s: stderr should name the flag, stdout be empty:\n%s\n%s", args[0], d, r.stderr, r.stdout)
			}
		}
	}
}

// TestBadProperty: a -X property librdkafka rejects (unknown name, bad
// value) is a usage error (exit 2) naming it, for every command that takes
// -X, before any work: no database file, no copy summary. A good property
// that belongs to the other client kind is accepted.
func TestBadProperty(t *testing.T) {
	topic := newTopic(t, 1)
	dst := newTopic(t, 1)
	db := dbPath(t)
	commands := [][]string{
		{"rebuild", "--brokers", broker.Addr, "--topic", topic, "--db", db, "--stall-timeout", "20s"},
		{"describe", "--brokers", broker.Addr, "--topic", topic},
		{"verify", "--brokers", broker.Addr, "--from", topic, "--to", dst, "--stall-timeout", "20s"},
		{"copy", "--brokers", broker.Addr, "--from", topic, "--to", dst, "--group", topic + "-g", "--transactional-id", topic + "-t", "--stall-timeout", "20s"},
	}
	for _, args := range commands {
		for _, bad := range []string{"no.such.property=1", "security.protocol=carrier-pigeon", "fetch.wait.max.ms=soon"} {
			r := mustCLI(t, exitUsage, append(args, "-X", "client.id=ok", "-X", bad)...)
			if !strings.Contains(r.stderr, "-X "+bad) || strings.Contains(r.stderr, "client.id") || r.stdout != "" {
				t.Fatalf("%s -X %s: stderr should name the property alone, stdout be empty:\n%s\n%s", args[0], bad, r.stderr, r.stdout)
			}
		}
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Fatalf("rebuild created the database (%v) before checking -X", err)
	}
	// Good properties pass the check and the commands run.
	mustCLI(t, 0, append(commands[0], "-X", "fetch.wait.max.ms=50", "-X", "client.id=ok")...)
	mustCLI(t, 0, append(commands[1], "-X", "fetch.wait.max.ms=50")...)
	mustCLI(t, 0, append(commands[2], "-X", "fetch.wait.max.ms=50")...)
}
