package main

// Tests of bad records, of mistakes that would wipe a table, and of bad
// flags (issue 7, point 4). Every topic is new on every run (freshTopic), so
// these tests repeat with -count.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

var topicSeq atomic.Int64

// freshTopic creates a topic named after the test and unique to this run.
func freshTopic(t *testing.T, partitions int32) string {
	t.Helper()
	topic := fmt.Sprintf("%s-%d-%d", strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()), time.Now().UnixNano(), topicSeq.Add(1))
	if err := broker.CreateTopic(topic, partitions, nil); err != nil {
		t.Fatal(err)
	}
	return topic
}

// TestScanExportNeverPartial: a value that cannot be shown (not UTF-8; in
// tsv, a newline) in the last row of a table much larger than any output
// buffer fails scan and export with exit 2 and nothing on stdout; with
// --base64 (or a format that can show it) the document is complete and
// matches the oracle.
func TestScanExportNeverPartial(t *testing.T) {
	topic := freshTopic(t, 1)
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
