package main

// End-to-end tests of --value-format/--key-format with an in-process Schema
// Registry (franz-go's srfake) next to the package's kfake broker. Records
// are framed with franz-go's sr.ConfluentHeader and encoded with hamba/avro
// here; the oracle is the JSON docs/schema-registry.md promises, built from the
// values encoded, compared by value (numbers exactly).

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

const cliAccountV1 = `{"type":"record","name":"Account","namespace":"cli","fields":[
 {"name":"id","type":"long"},{"name":"owner","type":"string"}]}`

const cliAccountV2 = `{"type":"record","name":"Account","namespace":"cli","fields":[
 {"name":"id","type":"long"},{"name":"owner","type":"string"},
 {"name":"email","type":["null","string"],"default":null},
 {"name":"balance","type":{"type":"bytes","logicalType":"decimal","precision":24,"scale":2},"default":"\u0000"}]}`

type cliV1 struct {
	ID    int64  `avro:"id"`
	Owner string `avro:"owner"`
}

type cliV2 struct {
	ID      int64    `avro:"id"`
	Owner   string   `avro:"owner"`
	Email   *string  `avro:"email"`
	Balance *big.Rat `avro:"balance"`
}

// registryFixture is a registry with the two account schemas under the
// topic's value subject.
type registryFixture struct {
	reg      *srfake.Registry
	id1, id2 int
}

func newRegistryFixture(t *testing.T, topic string, opts ...srfake.Option) *registryFixture {
	t.Helper()
	reg := srfake.New(opts...)
	t.Cleanup(reg.Close)
	f := &registryFixture{reg: reg}
	for _, s := range []struct {
		text string
		id   *int
	}{{cliAccountV1, &f.id1}, {cliAccountV2, &f.id2}} {
		id, _, err := reg.RegisterSchema(topic+"-value", sr.Schema{Schema: s.text, Type: sr.TypeAvro})
		if err != nil {
			t.Fatal(err)
		}
		*s.id = id
	}
	return f
}

// frame puts franz-go's Confluent header (magic byte, schema id) before body.
func frame(t *testing.T, id int, body []byte) []byte {
	t.Helper()
	var h sr.ConfluentHeader
	b, err := h.AppendEncode(nil, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, body...)
}

// accountRecords generates records of both schema versions over the
// partitions, with tombstones and null keys, and returns them with the
// JSON each value should become (nil for a tombstone).
func (f *registryFixture) accountRecords(t *testing.T, partitions, n int) ([]localkafka.Record, map[string]string) {
	t.Helper()
	rng := newRand(t)
	s1, s2 := avro.MustParse(cliAccountV1), avro.MustParse(cliAccountV2)
	var recs []localkafka.Record
	want := map[string]string{} // value bytes -> JSON
	for i := 0; i < n; i++ {
		p := int32(rng.Intn(partitions))
		r := localkafka.Record{Partition: p, Key: []byte(fmt.Sprintf("p%d-acct-%d", p, rng.Intn(6)))}
		id := int64(1)<<53 + int64(rng.Intn(1000)) // beyond float64's exact integers
		switch x := rng.Intn(10); {
		case x == 0:
			// tombstone
		case x < 5:
			if x == 1 {
				r.Key = nil // skipped by the fold; its value still decodes
			}
			body, err := avro.Marshal(s1, cliV1{ID: id, Owner: fmt.Sprintf("o%d", i)})
			if err != nil {
				t.Fatal(err)
			}
			r.Value = frame(t, f.id1, body)
			want[string(r.Value)] = fmt.Sprintf(`{"id":%d,"owner":"o%d"}`, id, i)
		default:
			cents := rng.Int63n(1_000_000_000_000) - 500_000_000_000
			bal := big.NewRat(cents, 100)
			v := cliV2{ID: id, Owner: fmt.Sprintf("o%d", i), Balance: bal}
			email := "null"
			if rng.Intn(2) == 0 {
				e := fmt.Sprintf("u%d@example.com", i)
				v.Email = &e
				email = `"` + e + `"`
			}
			body, err := avro.Marshal(s2, v)
			if err != nil {
				t.Fatal(err)
			}
			r.Value = frame(t, f.id2, body)
			want[string(r.Value)] = fmt.Sprintf(`{"balance":%s,"email":%s,"id":%d,"owner":"o%d"}`, bal.FloatString(2), email, id, i)
		}
		recs = append(recs, r)
	}
	return recs, want
}

// sameJSONText reports whether a and b are the same JSON value, numbers
// compared by exact decimal value.
func sameJSONText(a, b string) bool {
	va, err1 := decodeUseNumber(a)
	vb, err2 := decodeUseNumber(b)
	return err1 == nil && err2 == nil && sameValue(va, vb)
}

func decodeUseNumber(s string) (any, error) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

func sameValue(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		bn, ok := b.(json.Number)
		x, ok1 := new(big.Rat).SetString(string(a))
		y, ok2 := new(big.Rat).SetString(string(bn))
		return ok && ok1 && ok2 && x.Cmp(y) == 0
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok || len(a) != len(bm) {
			return false
		}
		for k, v := range a {
			if w, ok := bm[k]; !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

// canonicalText reports whether s is compact with sorted keys (as
// encoding/json writes a decoded value back).
func canonicalText(s string) bool {
	v, err := decodeUseNumber(s)
	if err != nil {
		return false
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return false
	}
	return strings.TrimSuffix(buf.String(), "\n") == s
}

// checkDecodedTable compares the scanned table with the latest fold of
// recs over the decoded values.
func checkDecodedTable(t *testing.T, recs []rec, decoded map[string]string, got map[string]string) {
	t.Helper()
	want, _, _ := oracle(recs, nil)
	if len(want) != len(got) {
		t.Fatalf("table has %d keys, the oracle %d:\n%v\n%v", len(got), len(want), got, want)
	}
	for k, raw := range want {
		w, ok := decoded[raw]
		if !ok {
			t.Fatalf("oracle row %q has no decoded form", k)
		}
		g, ok := got[k]
		if !ok || !sameJSONText(g, w) {
			t.Fatalf("row %q = %s, want %s", k, g, w)
		}
		if !canonicalText(g) {
			t.Fatalf("row %q = %s: not canonical JSON", k, g)
		}
	}
}

// TestRebuildAvroValues: a topic whose values use two versions of an Avro
// schema folds into one table of canonical JSON (exact 54-bit longs and
// decimals), which scan and get serve; tombstones delete; the config
// file's schema_registry section and value_format build the same table.
func TestRebuildAvroValues(t *testing.T) {
	topic := newTopic(t, 3)
	f := newRegistryFixture(t, topic)
	recs, decoded := f.accountRecords(t, 3, 120)
	all := produce(t, topic, recs)

	db := dbPath(t)
	mustCLI(t, 0, rebuildArgs(topic, db, "--value-format", "avro", "--schema-registry", f.reg.URL())...)
	got := scanJSON(t, db, topic)
	checkDecodedTable(t, all, decoded, got)
	for k, v := range got {
		r := mustCLI(t, 0, "get", "--db", db, "--table", topic, k)
		if strings.TrimSuffix(r.stdout, "\n") != v {
			t.Fatalf("get %s = %q, scan says %q", k, r.stdout, v)
		}
		break
	}

	// The same table from the config file.
	dir := t.TempDir()
	cfg := filepath.Join(dir, "k.yaml")
	doc := fmt.Sprintf("db: %s\nkafka:\n  brokers: %s\nschema_registry:\n  url: ${TEST_SR_URL}\ntables:\n  - name: acc\n    topic: %s\n    value_format: avro\n    stall_timeout: 20s\n",
		filepath.Join(dir, "c.db"), broker.Addr, topic)
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEST_SR_URL", f.reg.URL())
	mustCLI(t, 0, "rebuild", "--config", cfg, "--table", "acc")
	checkDecodedTable(t, all, decoded, scanJSON(t, filepath.Join(dir, "c.db"), "acc"))
}

// TestRebuildUndecodable: a value with a schema id the registry does not
// know fails the rebuild with exit 3 naming its partition and offset, and
// publishes nothing; --on-bad-record skip leaves it out and counts it as
// undecodable.
func TestRebuildUndecodable(t *testing.T) {
	topic := newTopic(t, 2)
	f := newRegistryFixture(t, topic)
	recs, decoded := f.accountRecords(t, 2, 30)
	all := produce(t, topic, recs)
	body, err := avro.Marshal(avro.MustParse(cliAccountV1), cliV1{ID: 1, Owner: "ghost"})
	if err != nil {
		t.Fatal(err)
	}
	bad := produce(t, topic, []localkafka.Record{
		{Partition: 1, Key: []byte("ghost"), Value: frame(t, f.id2+100, body)},
		{Partition: 0, Key: []byte("plain"), Value: []byte(`{"not":"framed"}`)},
	})
	db := dbPath(t)
	r := mustCLI(t, exitConflict, rebuildArgs(topic, db, "--value-format", "avro", "--schema-registry", f.reg.URL())...)
	if !strings.Contains(r.stderr, "--on-bad-record skip") ||
		!(strings.Contains(r.stderr, fmt.Sprintf("%s/%d@%d", topic, bad[0].P, bad[0].O)) || strings.Contains(r.stderr, fmt.Sprintf("%s/%d@%d", topic, bad[1].P, bad[1].O))) {
		t.Fatalf("stderr names neither bad record's position, or lacks the hint:\n%s", r.stderr)
	}
	mustCLI(t, exitNotFound, "get", "--db", db, "--table", topic, "ghost")

	mustCLI(t, 0, rebuildArgs(topic, db, "--value-format", "avro", "--schema-registry", f.reg.URL(), "--on-bad-record", "skip")...)
	checkDecodedTable(t, all, decoded, scanJSON(t, db, topic))
	var tables []struct {
		SkippedByReason map[string]int64 `json:"skipped_by_reason"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, 0, "tables", "--db", db, "--format", "json").stdout), &tables); err != nil || len(tables) != 1 {
		t.Fatalf("tables: %v", err)
	}
	if n := tables[0].SkippedByReason["undecodable"]; n != 2 {
		t.Fatalf("skipped_by_reason %v: want undecodable=2", tables[0].SkippedByReason)
	}
}

// TestRebuildRegistryBinary runs the built binary: credentials from the
// environment reach a registry that demands them (exit 0, the table
// decoded), a wrong password or a registry that is down is exit 5, a bad
// format is exit 2, and the password shows in no output.
func TestRebuildRegistryBinary(t *testing.T) {
	const user, pass = "svc", "Sekr1t-pw-in-env"
	topic := newTopic(t, 1)
	f := newRegistryFixture(t, topic, srfake.WithAuth("Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+pass))))
	recs, decoded := f.accountRecords(t, 1, 20)
	all := produce(t, topic, recs)
	db := dbPath(t)

	runBin := func(want int, env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command(binPath, args...)
		cmd.Env = append(os.Environ(), env...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		t.Logf("$ %s %s\n-> exit %d\n%s%s", strings.Join(env, " "), strings.Join(args, " "), code, out.String(), errb.String())
		if code != want {
			t.Fatalf("exit %d, want %d", code, want)
		}
		if strings.Contains(out.String()+errb.String(), pass) {
			t.Fatalf("the registry password shows in the output")
		}
		return errb.String()
	}
	args := rebuildArgs(topic, db, "--value-format", "avro")
	good := []string{"KMATERIALIZE_SCHEMA_REGISTRY=" + f.reg.URL(), "KMATERIALIZE_SCHEMA_REGISTRY_USER=" + user, "KMATERIALIZE_SCHEMA_REGISTRY_PASSWORD=" + pass}
	runBin(0, good, args...)
	checkDecodedTable(t, all, decoded, scanJSON(t, db, topic))

	wrong := []string{good[0], good[1], "KMATERIALIZE_SCHEMA_REGISTRY_PASSWORD=" + pass + "-wrong"}
	stderr := runBin(exitUnavailable, wrong, args...)
	if !strings.Contains(stderr, "schema registry") {
		t.Fatalf("stderr does not name the schema registry:\n%s", stderr)
	}

	down := srfake.New()
	downURL := down.URL()
	down.Close()
	stderr = runBin(exitUnavailable, []string{"KMATERIALIZE_SCHEMA_REGISTRY=" + downURL}, args...)
	if !strings.Contains(stderr, "schema registry") {
		t.Fatalf("stderr does not name the schema registry:\n%s", stderr)
	}
	// The table the first run published is still there, unchanged.
	checkDecodedTable(t, all, decoded, scanJSON(t, db, topic))

	runBin(exitUsage, good, rebuildArgs(topic, db, "--value-format", "xml")...)
	runBin(exitUsage, nil, rebuildArgs(topic, db, "--value-format", "protobuf")...) // no registry
	runBin(exitUsage, nil, rebuildArgs(topic, db, "--value-format", "avro", "--schema-registry", "http://"+user+":"+pass+"@127.0.0.1:1")...)
}

// TestServeAvroTable: the daemon builds a table whose config says
// value_format: avro with the config file's schema_registry section (the
// password from ${NAME}), serves its rows as JSON over the socket, and
// shows the password in no log line; a config whose avro table has no
// registry is exit 2.
func TestServeAvroTable(t *testing.T) {
	const user, pass = "svc", "Sekr1t-pw-in-config"
	topic := newTopic(t, 2)
	f := newRegistryFixture(t, topic, srfake.WithAuth("Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+pass))))
	recs, decoded := f.accountRecords(t, 2, 60)
	all := produce(t, topic, recs)
	want, _, _ := oracle(all, nil)

	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "kmaterialize.yaml")
	table := fmt.Sprintf("tables:\n  - name: accounts\n    topic: %s\n    value_format: avro\n    stall_timeout: 20s\n", topic)
	doc := fmt.Sprintf("db: tables.db\nkafka:\n  brokers: %s\nschema_registry:\n  url: %s\n  username: %s\n  password: ${TEST_SR_PASSWORD}\n%s",
		broker.Addr, f.reg.URL(), user, table)
	if err := os.WriteFile(cfgPath, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEST_SR_PASSWORD", pass)
	p := startProc(t, "--log-format", "json", "serve", "--config", cfgPath)
	cl := unixClient(t, filepath.Join(dir, "tables.db.sock"))
	awaitStatus(t, cl, p, "/readyz", http.StatusOK)
	for k, raw := range want {
		code, body, _ := httpGet(t, cl, "/v1/tables/accounts/keys/"+url.PathEscape(k))
		if code != http.StatusOK || !sameJSONText(body, decoded[raw]) || !canonicalText(body) {
			t.Fatalf("GET accounts/%s: %d %s, want %s", k, code, body, decoded[raw])
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("serve exit %d after SIGTERM", code)
	}
	if strings.Contains(p.stderrText()+p.stdout.String(), pass) {
		t.Fatal("the registry password shows in the daemon's output")
	}

	noRegistry := filepath.Join(dir, "no-registry.yaml")
	if err := os.WriteFile(noRegistry, []byte(fmt.Sprintf("db: other.db\nkafka:\n  brokers: %s\n%s", broker.Addr, table)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(decode.EnvURL, "")
	r := mustCLI(t, exitUsage, "serve", "--config", noRegistry)
	if !strings.Contains(r.stderr, "tables[0]") || !strings.Contains(r.stderr, "schema registry URL") {
		t.Fatalf("stderr does not say the table needs a registry:\n%s", r.stderr)
	}
}

// TestUpdateAvroValues: update decodes what a topic gained since an Avro
// table's checkpoint as its rebuild did (the stored value_format, the
// registry from the environment), skipping and counting an undecodable
// record as the stored --on-bad-record skip says; the table equals the
// oracle over every record.
func TestUpdateAvroValues(t *testing.T) {
	topic := newTopic(t, 2)
	f := newRegistryFixture(t, topic)
	recs, decoded := f.accountRecords(t, 2, 40)
	all := produce(t, topic, recs)
	db := dbPath(t)
	mustCLI(t, 0, rebuildArgs(topic, db, "--value-format", "avro", "--schema-registry", f.reg.URL(), "--on-bad-record", "skip")...)

	more, decodedMore := f.accountRecords(t, 2, 40)
	for k, v := range decodedMore {
		decoded[k] = v
	}
	all = append(all, produce(t, topic, more)...)
	produce(t, topic, []localkafka.Record{{Partition: 0, Key: []byte("ghost"), Value: frame(t, f.id2+100, []byte{2})}})
	t.Setenv(decode.EnvURL, f.reg.URL())
	mustCLI(t, 0, "update", "--db", db, "--table", topic, "--brokers", broker.Addr, "--stall-timeout", "20s")
	checkDecodedTable(t, all, decoded, scanJSON(t, db, topic))
	var tables []struct {
		SkippedByReason map[string]int64 `json:"skipped_by_reason"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, 0, "tables", "--db", db, "--format", "json").stdout), &tables); err != nil || len(tables) != 1 {
		t.Fatalf("tables: %v", err)
	}
	if n := tables[0].SkippedByReason["undecodable"]; n != 1 {
		t.Fatalf("skipped_by_reason %v: want undecodable=1", tables[0].SkippedByReason)
	}
}
