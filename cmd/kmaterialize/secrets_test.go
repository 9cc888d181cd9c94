package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/kmaterialize/kmaterialize/config"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// Tests that a secret given to a run, by -F, by --config with ${NAME} or
// by -X, never reaches anything the run prints (stdout, stderr, log lines
// at debug level, the final error), the database's tables and export, or
// the daemon's API and metrics. The broker requires SASL/PLAIN with the
// secret as the password, so a run that succeeds proves the secret reached
// librdkafka, and one with a wrong password proves the failure path hides
// it too.

// saslRig is a SASL/PLAIN broker of its own with a random password.
type saslRig struct {
	b        *localkafka.Broker
	user     string
	password string
}

func randomSecret(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b)
}

func newSASLRig(t *testing.T) *saslRig {
	t.Helper()
	r := &saslRig{user: "kmz-" + runName(t), password: randomSecret(t, "pw-")}
	b, err := localkafka.Start(kfake.EnableSASL(), kfake.Superuser("PLAIN", r.user, r.password))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	// The fixtures (topic creation through kadm) authenticate too.
	b.ClientOpts = []kgo.Opt{kgo.SASL(plain.Auth{User: r.user, Pass: r.password}.AsMechanism())}
	r.b = b
	return r
}

// produce writes recs through a SASL client (with the right password).
func (r *saslRig) produce(t *testing.T, topic string, recs []localkafka.Record) []rec {
	t.Helper()
	cl, err := r.b.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	krs := make([]*kgo.Record, len(recs))
	for i, x := range recs {
		krs[i] = &kgo.Record{Topic: topic, Partition: x.Partition, Key: x.Key, Value: x.Value}
	}
	if err := cl.ProduceSync(context.Background(), krs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	offs := make([]int64, len(krs))
	for i, kr := range krs {
		offs[i] = kr.Offset
	}
	return withOffsets(recs, offs, true)
}

func (r *saslRig) topic(t *testing.T, partitions int32) string {
	t.Helper()
	topic := runName(t)
	if err := r.b.CreateTopic(topic, partitions, nil); err != nil {
		t.Fatal(err)
	}
	return topic
}

// propsFile writes a kcat-style properties file: SASL/PLAIN with password.
func (r *saslRig) propsFile(t *testing.T, password string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "client.properties")
	doc := fmt.Sprintf("# SASL for the test broker\nsecurity.protocol=SASL_PLAINTEXT\n\nsasl.mechanism = PLAIN\nsasl.username=%s\nsasl.password=%s\n", r.user, password)
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// saslX is -X flags for SASL/PLAIN with password.
func (r *saslRig) saslX(password string) []string {
	return []string{"-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN",
		"-X", "sasl.username=" + r.user, "-X", "sasl.password=" + password}
}

// noSecret fails the test if any of outs holds secret (or its JSON or
// hex forms would; it is plain ASCII, so the text itself is the check).
func noSecret(t *testing.T, secret, what string, outs ...string) {
	t.Helper()
	for _, o := range outs {
		if strings.Contains(o, secret) {
			t.Fatalf("%s shows the secret %q:\n%s", what, secret, o)
		}
	}
}

// TestSecretsNeverShown rebuilds, describes, copies and verifies against a
// SASL broker with the password given by -F, by --config with ${NAME} and
// by -X, at debug log level with librdkafka's own debug output on, and
// checks every output of every run, the tables, the export and the
// holder-free database for the password. Failing runs (a wrong password; a
// secret-named property librdkafka rejects, whose value it quotes) are
// checked too, and must still exit with their documented codes.
func TestSecretsNeverShown(t *testing.T) {
	localkafka.KfakeOnly(t)
	r := newSASLRig(t)
	topic := r.topic(t, 3)
	recs := r.produce(t, topic, genRecords(newRand(t), []int32{0, 1, 2}, 200))
	want, _, _ := oracle(recs, nil)
	dir := t.TempDir()
	db := filepath.Join(dir, "tables.db")
	var outputs []string
	keep := func(res result) result { outputs = append(outputs, res.stdout, res.stderr); return res }
	debug := []string{"--log-level", "debug", "--log-format", "json"}
	base := func(cmd string, extra ...string) []string {
		return append(append(append([]string{}, debug...), cmd, "--brokers", r.b.Addr, "--stall-timeout", "20s"), extra...)
	}

	// -F: the table is the oracle's, so the password reached the client.
	keep(mustCLI(t, 0, base("rebuild", "--topic", topic, "--db", db, "--table", "via-f", "-F", r.propsFile(t, r.password), "-X", "debug=security,conf")...))
	checkTable(t, want, scanJSON(t, db, "via-f"))

	// --config with ${NAME}.
	t.Setenv("KMZ_TEST_KAFKA_PASSWORD", r.password)
	cfg := filepath.Join(dir, "k.yaml")
	doc := fmt.Sprintf("db: %s\nkafka:\n  brokers: %s\n  properties:\n    security.protocol: SASL_PLAINTEXT\n    sasl.mechanism: PLAIN\n    sasl.username: %s\n    sasl.password: ${KMZ_TEST_KAFKA_PASSWORD}\ntables:\n  - name: via-config\n    topic: %s\n    stall_timeout: 20s\n",
		db, r.b.Addr, r.user, topic)
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	keep(mustCLI(t, 0, append(append([]string{}, debug...), "rebuild", "--config", cfg, "--table", "via-config")...))
	checkTable(t, want, scanJSON(t, db, "via-config"))

	// -X.
	keep(mustCLI(t, 0, base("rebuild", append([]string{"--topic", topic, "--db", db, "--table", "via-x"}, r.saslX(r.password)...)...)...))
	checkTable(t, want, scanJSON(t, db, "via-x"))

	// describe, copy and verify with -F.
	keep(mustCLI(t, 0, base("describe", "--topic", topic, "-F", r.propsFile(t, r.password))...))
	dst := r.topic(t, 3)
	name := runName(t)
	keep(mustCLI(t, 0, base("copy", "--from", topic, "--to", dst, "--group", name, "--transactional-id", name, "-F", r.propsFile(t, r.password))...))
	keep(mustCLI(t, 0, base("verify", "--from", topic, "--to", dst, "-F", r.propsFile(t, r.password))...))

	// The database's views of the tables.
	keep(mustCLI(t, 0, "tables", "--db", db))
	keep(mustCLI(t, 0, "tables", "--db", db, "--format", "json"))
	for _, tb := range []string{"via-f", "via-config", "via-x"} {
		keep(mustCLI(t, 0, "export", "--db", db, "--table", tb))
	}

	// A wrong password (given by -X, kept by the Redactor) fails the
	// rebuild without showing it; the right one is not shown either.
	wrong := randomSecret(t, "wrong-")
	res := keep(kmz(t, base("rebuild", append([]string{"--topic", topic, "--db", db, "--table", "wrong", "--stall-timeout", "3s"}, r.saslX(wrong)...)...)...))
	if res.code == 0 {
		t.Fatalf("a rebuild with a wrong password succeeded")
	}
	noSecret(t, wrong, "the failed rebuild", res.stdout, res.stderr)

	// A secret-named property librdkafka does not know: its verdict quotes
	// the value, the message must not.
	custom := randomSecret(t, "custom-")
	res = keep(kmz(t, base("rebuild", "--topic", topic, "--db", db, "-X", "my.custom.password="+custom)...))
	if res.code != 2 || !strings.Contains(res.stderr, "my.custom.password="+config.Redacted) {
		t.Fatalf("a rejected secret property: exit %d, want 2 naming it redacted; stderr:\n%s", res.code, res.stderr)
	}
	noSecret(t, custom, "the rejected property's error", res.stdout, res.stderr)

	// Every line at debug level was captured: the runs logged.
	if n := len(logLines(strings.Join(outputs, "\n"))); n < 10 {
		t.Fatalf("only %d log lines captured; the check would be vacuous", n)
	}
	noSecret(t, r.password, "a run's output", outputs...)
	raw, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	noSecret(t, r.password, "the database file", string(raw))
}

// TestSecretsNotInDaemon runs serve against the SASL broker with the
// password from a -F file (and the admin token from the environment), and
// checks its log,
// every read route, /metrics, and a failing table's status (a second
// daemon whose password is wrong) for the secrets.
func TestSecretsNotInDaemon(t *testing.T) {
	localkafka.KfakeOnly(t)
	r := newSASLRig(t)
	topic := r.topic(t, 2)
	want, _, _ := oracle(r.produce(t, topic, genRecords(newRand(t), []int32{0, 1}, 100)), nil)
	token := randomSecret(t, "token-")
	wrong := randomSecret(t, "wrong-")
	t.Setenv("KMZ_TEST_WRONG_PASSWORD", wrong)
	t.Setenv("KMZ_TEST_ADMIN_TOKEN", token)

	// pwLine is the config's sasl.password line ("" for none).
	daemon := func(pwLine string, extra ...string) (*proc, *http.Client, string) {
		dir := t.TempDir()
		cfg := filepath.Join(dir, "k.yaml")
		doc := fmt.Sprintf("db: tables.db\nadmin_token: ${KMZ_TEST_ADMIN_TOKEN}\nkafka:\n  brokers: %s\n  properties:\n    security.protocol: SASL_PLAINTEXT\n    sasl.mechanism: PLAIN\n    sasl.username: %s\n%s    debug: security\ntables:\n  - name: t1\n    topic: %s\n    stall_timeout: 3s\n",
			r.b.Addr, r.user, pwLine, topic)
		if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		p := startProc(t, append([]string{"--log-format", "json", "--log-level", "debug", "serve", "--config", cfg}, extra...)...)
		return p, unixClient(t, filepath.Join(dir, "tables.db.sock")), dir
	}
	routes := []string{"/v1/tables", "/v1/tables/t1", "/v1/tables/t1/rows", "/v1/tables/t1/export", "/metrics", "/readyz", "/healthz"}
	readAll := func(cl *http.Client) []string {
		var out []string
		for _, route := range routes {
			code, body, _ := httpGet(t, cl, route)
			out = append(out, fmt.Sprintf("GET %s -> %d\n%s", route, code, body))
		}
		return out
	}
	stop := func(p *proc) {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("serve exit %d after SIGTERM, want 0", code)
		}
	}

	// The password from -F only (the config has none): -F reaches serve.
	good, cl, _ := daemon("", "-F", r.propsFile(t, r.password))
	awaitStatus(t, cl, good, "/readyz", http.StatusOK)
	checkKeys(t, cl, "t1", want)
	served := readAll(cl)
	stop(good)
	noSecret(t, r.password, "the daemon's API", served...)
	noSecret(t, token, "the daemon's API", served...)
	noSecret(t, r.password, "the daemon's log", good.stderrText(), good.stdout.String())
	noSecret(t, token, "the daemon's log", good.stderrText(), good.stdout.String())

	// A wrong password: the table's build fails; its status says why.
	bad, cl, _ := daemon("    sasl.password: ${KMZ_TEST_WRONG_PASSWORD}\n")
	waitFor(t, 60*time.Second, "the failed build's error in the table's status", func() bool {
		_, body, _ := httpGet(t, cl, "/v1/tables/t1")
		return strings.Contains(body, "nothing published")
	})
	failed := readAll(cl)
	t.Logf("the failing daemon's API:\n%s", strings.Join(failed, "\n"))
	stop(bad)
	noSecret(t, wrong, "the failing daemon's API", failed...)
	noSecret(t, wrong, "the failing daemon's log", bad.stderrText(), bad.stdout.String())
	noSecret(t, token, "the failing daemon's API and log", append(failed, bad.stderrText())...)
}

// TestPropertiesPrecedence checks -X over -F over --config with the SASL
// broker's password as the witness: a run succeeds only when the winning
// source holds the right password, so each pair below shows which one
// librdkafka got.
func TestPropertiesPrecedence(t *testing.T) {
	localkafka.KfakeOnly(t)
	r := newSASLRig(t)
	topic := r.topic(t, 1)
	want, _, _ := oracle(r.produce(t, topic, genRecords(newRand(t), []int32{0}, 30)), nil)
	dir := t.TempDir()
	db := filepath.Join(dir, "tables.db")
	wrong := randomSecret(t, "wrong-")
	writeCfg := func(password string) string {
		path := filepath.Join(t.TempDir(), "k.yaml")
		doc := fmt.Sprintf("db: %s\nkafka:\n  brokers: %s\n  properties:\n    security.protocol: SASL_PLAINTEXT\n    sasl.mechanism: PLAIN\n    sasl.username: %s\n    sasl.password: %q\n",
			db, r.b.Addr, r.user, password)
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	rebuild := func(table string, extra ...string) result {
		return kmz(t, append([]string{"--log-format", "json", "rebuild", "--topic", topic, "--table", table, "--stall-timeout", "3s"}, extra...)...)
	}
	cases := []struct {
		name string
		args []string
		ok   bool
	}{
		{"config alone", []string{"--config", writeCfg(r.password)}, true},
		{"-F over --config", []string{"--config", writeCfg(wrong), "-F", r.propsFile(t, r.password)}, true},
		{"-F applied over --config", []string{"--config", writeCfg(r.password), "-F", r.propsFile(t, wrong)}, false},
		{"-X over -F", []string{"--config", writeCfg(wrong), "-F", r.propsFile(t, wrong), "-X", "sasl.password=" + r.password}, true},
		{"-X applied over -F", []string{"--config", writeCfg(r.password), "-F", r.propsFile(t, r.password), "-X", "sasl.password=" + wrong}, false},
	}
	for i, c := range cases {
		table := fmt.Sprintf("t%d", i)
		res := rebuild(table, c.args...)
		if c.ok {
			if res.code != 0 {
				t.Fatalf("%s: exit %d, want 0 (the winning source has the right password)\n%s", c.name, res.code, res.stderr)
			}
			checkTable(t, want, scanJSON(t, db, table))
		} else if res.code != 5 {
			t.Fatalf("%s: exit %d, want 5 (the winning source has a wrong password)\n%s", c.name, res.code, res.stderr)
		}
		noSecret(t, r.password, c.name, res.stdout, res.stderr)
		noSecret(t, wrong, c.name, res.stdout, res.stderr)
	}
}

// TestPropertiesFileErrors checks that a -F file that does not parse is
// exit 2 naming the file and line, without the line's text.
func TestPropertiesFileErrors(t *testing.T) {
	secret := randomSecret(t, "pw-")
	path := filepath.Join(t.TempDir(), "bad.properties")
	if err := os.WriteFile(path, []byte("# ok\nsecurity.protocol=SASL_SSL\nsasl.password "+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"rebuild", "--topic", "t", "--db", filepath.Join(t.TempDir(), "x.db")},
		{"describe", "--topic", "t"},
		{"copy", "--from", "a", "--to", "b", "--group", "g", "--transactional-id", "i"},
		{"verify", "--from", "a", "--to", "b"},
	} {
		res := kmz(t, append(append([]string{}, cmd...), "--brokers", broker.Addr, "-F", path)...)
		if res.code != 2 || !strings.Contains(res.stderr, path+":3:") {
			t.Fatalf("%s -F with a bad line 3: exit %d, want 2 naming %s:3\n%s", cmd[0], res.code, path, res.stderr)
		}
		noSecret(t, secret, cmd[0]+" -F error", res.stdout, res.stderr)
	}
	res := kmz(t, "describe", "--brokers", broker.Addr, "--topic", "t", "-F", filepath.Join(t.TempDir(), "missing.properties"))
	if res.code != 2 || !strings.Contains(res.stderr, "missing.properties") {
		t.Fatalf("-F with a missing file: exit %d, want 2 naming it\n%s", res.code, res.stderr)
	}
}
