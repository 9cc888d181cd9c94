package main

// End-to-end tests of a malformed record frame (issue 19, point 11): the
// Protobuf value FuzzDecodeValue found, whose message-index count is a
// varint of 2^39, made confluent's serde allocate 2^39 ints and the process
// die out of memory (a fatal error, not a panic) before the registry was
// asked. It is bad data now: rebuild and update exit 3 naming its topic,
// partition and offset, --on-bad-record skip counts it as undecodable, and
// a daemon whose followed table meets it keeps serving.

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// malformedValue is the value found: magic byte 0, schema id 1, a
// message-index count of 0x80 80 80 80 80 20 (2^39 zigzagged) and three
// bytes.
const malformedValue = "00000000018080808080200873" + "65"

const protoAccount = `syntax = "proto3";
package cli;
message Account {
  string id = 1;
  string owner = 2;
}
`

// protoFixture is a registry whose first schema (id 1, the id the found
// value names) is protoAccount.
func protoFixture(t *testing.T, topic string) *srfake.Registry {
	t.Helper()
	reg := srfake.New()
	t.Cleanup(reg.Close)
	id, _, err := reg.RegisterSchema(topic+"-value", sr.Schema{Schema: protoAccount, Type: sr.TypeProtobuf})
	if err != nil {
		t.Fatal(err)
	}
	if id != 1 {
		t.Fatalf("the Protobuf schema has id %d, want 1 (the found value's)", id)
	}
	return reg
}

// malformed returns the found value's bytes.
func malformed(t *testing.T) []byte {
	t.Helper()
	b, err := hex.DecodeString(malformedValue)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// protoAccountRecords generates n records of protoAccount over the
// partitions (keys repeat; tombstones among them), framed for schema id 1
// and message [0], with the JSON each value must become, written here
// from the fields (the proto3 JSON mapping with every field present).
func protoAccountRecords(t *testing.T, partitions, n int, tag string) ([]localkafka.Record, map[string]string) {
	t.Helper()
	rng := newRand(t)
	var h sr.ConfluentHeader
	var recs []localkafka.Record
	want := map[string]string{}
	for i := 0; i < n; i++ {
		p := int32(rng.Intn(partitions))
		r := localkafka.Record{Partition: p, Key: []byte(fmt.Sprintf("p%d-acct-%d", p, rng.Intn(6)))}
		if rng.Intn(8) > 0 {
			id, owner := fmt.Sprintf("%s-%d", tag, i), ""
			if rng.Intn(4) > 0 {
				owner = fmt.Sprintf("o%d", rng.Intn(1000))
			}
			var body []byte
			body = protowire.AppendTag(body, 1, protowire.BytesType)
			body = protowire.AppendString(body, id)
			if owner != "" { // proto3 leaves a default out, the JSON shows it
				body = protowire.AppendTag(body, 2, protowire.BytesType)
				body = protowire.AppendString(body, owner)
			}
			v, err := h.AppendEncode(nil, 1, []int{0})
			if err != nil {
				t.Fatal(err)
			}
			r.Value = append(v, body...)
			want[string(r.Value)] = fmt.Sprintf(`{"id":%q,"owner":%q}`, id, owner)
		}
		recs = append(recs, r)
	}
	return recs, want
}

// skippedUndecodable is the undecodable count of the only table in db.
func skippedUndecodable(t *testing.T, db string) int64 {
	t.Helper()
	var tables []struct {
		SkippedByReason map[string]int64 `json:"skipped_by_reason"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, 0, "tables", "--db", db, "--format", "json").stdout), &tables); err != nil || len(tables) != 1 {
		t.Fatalf("tables: %v (%d tables)", err, len(tables))
	}
	return tables[0].SkippedByReason["undecodable"]
}

// TestRebuildMalformedProtobufFrame: the found value among good Protobuf
// records fails a rebuild with exit 3 naming its topic, partition and
// offset (the process alive to say so: these run in the test's process);
// with --on-bad-record skip the rebuild counts it as undecodable and the
// table equals the oracle over the good records, before and after it.
func TestRebuildMalformedProtobufFrame(t *testing.T) {
	topic := newTopic(t, 2)
	reg := protoFixture(t, topic)
	before, decoded := protoAccountRecords(t, 2, 30, "a")
	after, decodedAfter := protoAccountRecords(t, 2, 30, "b")
	for k, v := range decodedAfter {
		decoded[k] = v
	}
	good := produce(t, topic, before)
	bad := produce(t, topic, []localkafka.Record{{Partition: 1, Key: []byte("crash"), Value: malformed(t)}})[0]
	good = append(good, produce(t, topic, after)...)
	db := dbPath(t)

	r := mustCLI(t, exitConflict, rebuildArgs(topic, db, "--value-format", "protobuf", "--schema-registry", reg.URL())...)
	where := fmt.Sprintf("%s/%d@%d", topic, bad.P, bad.O)
	if !strings.Contains(r.stderr, where) || !strings.Contains(r.stderr, "message-index count") || !strings.Contains(r.stderr, "--on-bad-record skip") {
		t.Fatalf("stderr does not name the bad record %s, its fault and the hint:\n%s", where, r.stderr)
	}
	mustCLI(t, exitNotFound, "get", "--db", db, "--table", topic, "crash")

	mustCLI(t, 0, rebuildArgs(topic, db, "--value-format", "protobuf", "--schema-registry", reg.URL(), "--on-bad-record", "skip")...)
	checkDecodedTable(t, good, decoded, scanJSON(t, db, topic))
	if n := skippedUndecodable(t, db); n != 1 {
		t.Fatalf("undecodable skipped: %d, want 1", n)
	}
}

// TestUpdateMalformedProtobufFrame: a table built from good records meets
// the found value in an update: exit 3 naming it, the table unchanged, for
// a table built with the default; counted as undecodable, and the good
// records after it applied, for a table built with --on-bad-record skip.
func TestUpdateMalformedProtobufFrame(t *testing.T) {
	topic := newTopic(t, 2)
	reg := protoFixture(t, topic)
	first, decoded := protoAccountRecords(t, 2, 30, "a")
	more, decodedMore := protoAccountRecords(t, 2, 30, "b")
	for k, v := range decodedMore {
		decoded[k] = v
	}
	good := produce(t, topic, first)
	strict, lenient := dbPath(t), dbPath(t)
	mustCLI(t, 0, rebuildArgs(topic, strict, "--value-format", "protobuf", "--schema-registry", reg.URL())...)
	mustCLI(t, 0, rebuildArgs(topic, lenient, "--value-format", "protobuf", "--schema-registry", reg.URL(), "--on-bad-record", "skip")...)
	checkDecodedTable(t, good, decoded, scanJSON(t, strict, topic))
	builtFrom := append([]rec(nil), good...)

	bad := produce(t, topic, []localkafka.Record{{Partition: 0, Key: []byte("crash"), Value: malformed(t)}})[0]
	good = append(good, produce(t, topic, more)...)
	t.Setenv("KMATERIALIZE_SCHEMA_REGISTRY", reg.URL())
	update := func(db string, want int) result {
		return mustCLI(t, want, "update", "--db", db, "--table", topic, "--brokers", broker.Addr, "--stall-timeout", "20s")
	}

	r := update(strict, exitConflict)
	if where := fmt.Sprintf("%s/%d@%d", topic, bad.P, bad.O); !strings.Contains(r.stderr, where) || !strings.Contains(r.stderr, "message-index count") {
		t.Fatalf("stderr does not name the bad record %s and its fault:\n%s", where, r.stderr)
	}
	checkDecodedTable(t, builtFrom, decoded, scanJSON(t, strict, topic))

	update(lenient, 0)
	checkDecodedTable(t, good, decoded, scanJSON(t, lenient, topic))
	if n := skippedUndecodable(t, lenient); n != 1 {
		t.Fatalf("undecodable skipped: %d, want 1", n)
	}
}

// TestServeFollowMalformedProtobufFrame: a daemon follows two tables of a
// Protobuf topic, one failing on a bad record (the default), one skipping
// them, and serves a third, raw table of another topic. The found value
// arrives, then more good records: the strict table's follower stops with
// an error naming the record while the table keeps serving what it had;
// the lenient one counts it as undecodable and applies the rest; the raw
// table still answers its oracle, and the daemon is alive (healthz) and
// exits 0 on SIGTERM.
func TestServeFollowMalformedProtobufFrame(t *testing.T) {
	topic, rawTopic := newTopic(t, 2), newTopic(t, 2)
	reg := protoFixture(t, topic)
	first, decoded := protoAccountRecords(t, 2, 30, "a")
	more, decodedMore := protoAccountRecords(t, 2, 30, "b")
	for k, v := range decodedMore {
		decoded[k] = v
	}
	good := produce(t, topic, first)
	builtFrom := append([]rec(nil), good...)
	raw := produce(t, rawTopic, genRecords(newRand(t), []int32{0, 1}, 80))
	rawWant, _, _ := oracle(raw, nil)

	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "kmaterialize.yaml")
	doc := fmt.Sprintf(`db: tables.db
kafka:
  brokers: %s
schema_registry:
  url: %s
tables:
  - name: strict
    topic: %s
    value_format: protobuf
    stall_timeout: 20s
    follow: true
    follow_interval: 50ms
  - name: lenient
    topic: %s
    value_format: protobuf
    on_bad_record: skip
    stall_timeout: 20s
    follow: true
    follow_interval: 50ms
  - name: plain
    topic: %s
    stall_timeout: 20s
`, broker.Addr, reg.URL(), topic, topic, rawTopic)
	if err := os.WriteFile(cfgPath, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, "--log-format", "json", "serve", "--config", cfgPath)
	cl := unixClient(t, filepath.Join(dir, "tables.db.sock"))
	awaitStatus(t, cl, p, "/readyz", http.StatusOK)
	checkServedDecoded(t, cl, "strict", builtFrom, decoded)
	checkServedDecoded(t, cl, "lenient", builtFrom, decoded)
	checkKeys(t, cl, "plain", rawWant)

	bad := produce(t, topic, []localkafka.Record{{Partition: 1, Key: []byte("crash"), Value: malformed(t)}})[0]
	good = append(good, produce(t, topic, more)...)
	where := fmt.Sprintf("%d@%d", bad.P, bad.O)

	type followed struct {
		SkippedByReason map[string]int64 `json:"skipped_by_reason"`
		Follow          *struct {
			Running bool    `json:"running"`
			Error   *string `json:"error"`
		} `json:"follow"`
	}
	table := func(name string) followed {
		t.Helper()
		code, body, _ := httpGet(t, cl, "/v1/tables/"+name)
		var f followed
		if code != http.StatusOK || json.Unmarshal([]byte(body), &f) != nil || f.Follow == nil {
			t.Fatalf("GET /v1/tables/%s: %d %s", name, code, body)
		}
		return f
	}
	// The strict follower meets the record and stops, naming it.
	deadline := time.Now().Add(60 * time.Second)
	for {
		f := table("strict")
		if !f.Follow.Running && f.Follow.Error != nil {
			if !strings.Contains(*f.Follow.Error, where) || !strings.Contains(*f.Follow.Error, "message-index count") {
				t.Fatalf("strict follower stopped with %q: want the record %s and its fault", *f.Follow.Error, where)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("strict follower still running (%+v); stderr:\n%s", f.Follow, p.stderrText())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The lenient follower skips it and applies everything after it.
	wantAll, _, _ := oracle(good, nil)
	deadline = time.Now().Add(60 * time.Second)
	for !servedDecodedEqual(t, cl, "lenient", wantAll, decoded) {
		if time.Now().After(deadline) {
			t.Fatalf("lenient table never reached the oracle over every good record; stderr:\n%s", p.stderrText())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if f := table("lenient"); !f.Follow.Running || f.SkippedByReason["undecodable"] != 1 {
		t.Fatalf("lenient: running %v, skipped_by_reason %v: want running, undecodable=1", f.Follow.Running, f.SkippedByReason)
	}
	// The daemon is alive and serves every table: the strict one what it
	// had applied when it stopped, the raw one its oracle. The strict
	// follower may have applied partition 0's later records before it met
	// partition 1's bad one (each partition is fetched on its own); its
	// positions, stored with its rows, say how far, and never past the bad
	// record on partition 1.
	if code, body, _ := httpGet(t, cl, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	var strict struct {
		Partitions []struct {
			Partition int32 `json:"partition"`
			End       int64 `json:"end"`
		} `json:"partitions"`
	}
	if code, body, _ := httpGet(t, cl, "/v1/tables/strict"); code != http.StatusOK || json.Unmarshal([]byte(body), &strict) != nil || len(strict.Partitions) != 2 {
		t.Fatalf("GET /v1/tables/strict: %d %s", code, body)
	}
	applied := []rec{}
	for _, pt := range strict.Partitions {
		if pt.Partition == bad.P && pt.End > bad.O {
			t.Fatalf("strict follower stopped at %d@%d, past the bad record %s", pt.Partition, pt.End, where)
		}
		for _, r := range good {
			if r.P == pt.Partition && r.O < pt.End {
				applied = append(applied, r)
			}
		}
	}
	if len(applied) < len(builtFrom) {
		t.Fatalf("strict positions %+v hold %d good records, fewer than the %d it was built from", strict.Partitions, len(applied), len(builtFrom))
	}
	checkServedDecoded(t, cl, "strict", applied, decoded)
	checkKeys(t, cl, "plain", rawWant)
	if code, _, _ := httpGet(t, cl, "/v1/tables/lenient/keys/crash"); code != http.StatusNotFound {
		t.Fatalf("GET lenient/crash: %d, want 404 (skipped)", code)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("serve exit %d after SIGTERM", code)
	}
}

// servedDecodedEqual reports whether table serves exactly want (the
// oracle's raw values) decoded: every key's JSON, and no key more.
func servedDecodedEqual(t *testing.T, cl *http.Client, table string, want map[string]string, decoded map[string]string) bool {
	t.Helper()
	for k, raw := range want {
		code, body, _ := httpGet(t, cl, "/v1/tables/"+table+"/keys/"+url.PathEscape(k))
		if code != http.StatusOK || !sameJSONText(body, decoded[raw]) {
			return false
		}
	}
	var info struct {
		Keys *int64 `json:"keys"`
	}
	code, body, _ := httpGet(t, cl, "/v1/tables/"+table)
	return code == http.StatusOK && json.Unmarshal([]byte(body), &info) == nil && info.Keys != nil && *info.Keys == int64(len(want))
}

// checkServedDecoded fails unless table serves the oracle over recs.
func checkServedDecoded(t *testing.T, cl *http.Client, table string, recs []rec, decoded map[string]string) {
	t.Helper()
	want, _, _ := oracle(recs, nil)
	if !servedDecodedEqual(t, cl, table, want, decoded) {
		t.Fatalf("table %s does not serve the oracle over its %d records", table, len(recs))
	}
}
