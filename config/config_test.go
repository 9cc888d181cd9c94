package config_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/config"
	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
)

// write puts a config and its files in a fresh directory and returns the
// config's path.
func write(t *testing.T, doc string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(dir, "kmaterialize.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func parse(t *testing.T, path string, vars map[string]string) (*config.Config, error) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return config.Parse(data, config.ParseOptions{Path: path, LookupEnv: env(vars)})
}

const full = `db: data/tables.db
socket: /run/km/tables.sock
socket_mode: "0660"
socket_group: readers
listen: 127.0.0.1:9466
admin_token: tok-${ADMIN}
kafka:
  brokers: kafka-1:9092,kafka-2:9092
  properties:
    security.protocol: SASL_SSL
    sasl.password: ${KAFKA_PASSWORD}
    client.id: km-$${HOST}
tables:
  - name: balances
    topic: account-balances
    fold: latest
    schedule: "@every 10m"
    end: stable
    stall_timeout: 45s
    on_bad_record: skip
    allow_empty: true
    keep: 3
    max_change: 12.5
    readers: 3
    partitions: 0-2,5
    partitioner: murmur2_random
  - name: votes
    topic: studio-votes
    fold: count
    schedule: "*/5 * * * *"
    identity_field: event_id
    group_field: booth
    ignore_fields: [sent_at, client]
    catalog: cat/booths.json
    allow_unknown_groups: true
`

// TestLoadEveryField loads a config that sets every field and checks each
// value, the relative paths resolved against the file's directory, the
// catalog read, and ${NAME} expanded ($${ kept literal).
func TestLoadEveryField(t *testing.T) {
	path := write(t, full, map[string]string{"cat/booths.json": `["b1","b2","b3"]`})
	dir := filepath.Dir(path)
	c, err := parse(t, path, map[string]string{"KAFKA_PASSWORD": "pw-secret", "ADMIN": "xyz"})
	if err != nil {
		t.Fatal(err)
	}
	maxChange := 12.5
	want := &config.Config{
		Path: path, DB: filepath.Join(dir, "data/tables.db"), Socket: "/run/km/tables.sock", SocketMode: 0o660,
		SocketGroup: "readers", Listen: "127.0.0.1:9466", AdminToken: "tok-xyz",
		Kafka: config.Kafka{Brokers: "kafka-1:9092,kafka-2:9092", Properties: config.Properties{
			"security.protocol": "SASL_SSL", "sasl.password": "pw-secret", "client.id": "km-${HOST}"}},
		Tables: []config.Table{
			{Line: 14, Schedule: "@every 10m", Spec: materialize.Spec{Name: "balances", Topic: "account-balances", Fold: "latest",
				End: replay.EndStable, StallTimeout: 45 * time.Second, OnBadRecord: fold.SkipBadRecords, AllowEmpty: true,
				Keep: 3, MaxChange: &maxChange, Readers: 3, Partitions: []int32{0, 1, 2, 5}, Partitioner: "murmur2"}},
			{Line: 27, Schedule: "*/5 * * * *", Catalog: filepath.Join(dir, "cat/booths.json"), Spec: materialize.Spec{
				Name: "votes", Topic: "studio-votes", Fold: "count", IdentityField: "event_id", GroupField: "booth",
				IgnoreFields: []string{"sent_at", "client"}, Catalog: []string{"b1", "b2", "b3"}, AllowUnknownGroups: true,
				End: replay.EndHigh}},
		},
		// No memory in the file: one run of the default memory (no
		// table follows) and the read path's share.
		Memory: materialize.DefaultMemory + config.ReadMemory + 2*config.DefaultFeedRetainBytes,
	}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Fatalf("config (-want +got):\n%s", diff)
	}
	if c.AdminToken.Reveal() != "tok-xyz" {
		t.Fatalf("admin token %q", c.AdminToken.Reveal())
	}
	s, err := c.Table("votes")
	if err != nil || s.Name != "votes" || len(s.Catalog) != 3 {
		t.Fatalf("Table(votes) = %+v, %v", s, err)
	}
	if !cmp.Equal(c.Names(), []string{"balances", "votes"}) {
		t.Fatalf("names %v", c.Names())
	}
}

// TestLoadDefaults checks the defaults of a minimal config: the socket
// beside the db, mode 0600, fold latest, end high, stall timeout left to
// the replay's default, failing on bad records.
func TestLoadDefaults(t *testing.T) {
	path := write(t, "db: /var/lib/km/t.db\nkafka: {brokers: k:9092}\ntables:\n  - {name: b, topic: t}\n", nil)
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Socket != "/var/lib/km/t.db.sock" || c.SocketMode != 0o600 || c.Listen != "" || c.AdminToken != "" ||
		c.MaxConcurrentRuns != 0 || c.RetryBackoffMax != 0 || c.ShutdownTimeout != 0 {
		t.Fatalf("defaults: %+v", c)
	}
	if c.SpoolMaxBytes != 0 || c.MaxHeavyRequests != 0 || c.PageMaxBytes != 0 {
		t.Fatalf("large-answer limits %d %d %d without the fields: want 0 (the daemon's defaults)", c.SpoolMaxBytes, c.MaxHeavyRequests, c.PageMaxBytes)
	}
	path = write(t, "db: t.db\nspool_max_bytes: 2147483648\nmax_heavy_requests: 4\npage_max_bytes: 65536\n", nil)
	limits, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if limits.SpoolMaxBytes != 2<<30 || limits.MaxHeavyRequests != 4 || limits.PageMaxBytes != 64<<10 {
		t.Fatalf("large-answer limits %d %d %d, want 2147483648 4 65536", limits.SpoolMaxBytes, limits.MaxHeavyRequests, limits.PageMaxBytes)
	}
	want := materialize.Spec{Name: "b", Topic: "t", Fold: "latest", End: replay.EndHigh}
	if diff := cmp.Diff(want, c.Tables[0].Spec); diff != "" {
		t.Fatalf("table defaults (-want +got):\n%s", diff)
	}
	if _, err := c.Table("nope"); !errors.Is(err, config.ErrUnknownTable) || !strings.Contains(err.Error(), `"nope"`) ||
		!strings.Contains(err.Error(), "b") {
		t.Fatalf("Table(nope) = %v", err)
	}
}

// TestLoadErrors checks that each bad config is an *Error that names the
// line and says what is wrong.
func TestLoadErrors(t *testing.T) {
	const head = "db: t.db\nkafka:\n  brokers: k:9092\ntables:\n"
	for _, tc := range []struct {
		name string
		doc  string
		line int
		want []string
	}{
		{"unknown top-level field", "db: t.db\nsockets: x\n", 2, []string{`unknown field "sockets"; did you mean "socket"?`}},
		{"unknown table field", head + "  - name: a\n    topic: t\n    folds: count\n", 7, []string{`unknown field "folds"; did you mean "fold"?`}},
		{"unknown kafka field", "db: t.db\nkafka:\n  broker: k:9092\n", 3, []string{`unknown field "broker"; did you mean "brokers"?`}},
		// Issue 18: the did-you-mean of a misspelt field, in each section.
		{"misspelt table field", head + "  - name: a\n    topic: t\n    folow: true\n", 7, []string{`unknown field "folow"; did you mean "follow"?`}},
		{"dashes for underscores", head + "  - name: a\n    topic: t\n    stall-timeout: 30s\n", 7,
			[]string{`unknown field "stall-timeout"; did you mean "stall_timeout"?`}},
		{"misspelt registry field", "db: t.db\nschema_registry:\n  usrname: svc\n", 3, []string{`unknown field "usrname"; did you mean "username"?`}},
		{"unknown field, nothing near", "db: t.db\ncolour: blue\n", 2, []string{`unknown field "colour"`}},
		{"not yaml", "db: t.db\ntables: [\n", 2, []string{"not valid YAML"}},
		{"wrong kind", "db: t.db\nallow_remote: maybe\n", 2, []string{"allow_remote", "bool"}},
		{"wrong kind, secret value not shown", "db: t.db\nkafka:\n  properties: sasl.password=hunter2\n", 3,
			[]string{"kafka.properties", "cannot unmarshal a string into map"}},
		{"repeated key", "db: t.db\ndb: u.db\n", 2, []string{`"db" already defined`}},
		{"duplicate table", head + "  - {name: a, topic: t}\n  - {name: b, topic: t}\n  - {name: a, topic: u}\n", 7,
			[]string{`table "a" is defined twice (first at line 5)`}},
		{"unknown fold", head + "  - name: a\n    topic: t\n    fold: sum\n", 7, []string{"tables[0].fold", `"sum"`, "latest or count"}},
		{"no name", head + "  - topic: t\n", 5, []string{"name is required"}},
		{"no topic", head + "  - name: a\n", 5, []string{"topic is required"}},
		{"count without group", head + "  - name: a\n    topic: t\n    fold: count\n    identity_field: id\n", 5,
			[]string{"tables[0].group_field", "required by fold count"}},
		{"latest with a count field", head + "  - name: a\n    topic: t\n    identity_field: id\n", 7,
			[]string{"tables[0].identity_field", "fold count only"}},
		{"bad schedule", head + "  - name: a\n    topic: t\n    schedule: \"every 10m\"\n", 7, []string{"tables[0].schedule", "5 cron fields"}},
		{"six cron fields", head + "  - name: a\n    topic: t\n    schedule: \"0 */5 * * * *\"\n", 7, []string{"tables[0].schedule"}},
		{"bad every", head + "  - name: a\n    topic: t\n    schedule: \"@every soon\"\n", 7, []string{`"soon" is not a duration`}},
		{"bad end", head + "  - name: a\n    topic: t\n    end: low\n", 7, []string{"tables[0].end", "high or stable"}},
		{"bad stall timeout", head + "  - name: a\n    topic: t\n    stall_timeout: soon\n", 7, []string{"tables[0].stall_timeout", "not a duration"}},
		{"stall timeout without a unit", head + "  - name: a\n    topic: t\n    stall_timeout: 30\n", 7,
			[]string{"tables[0].stall_timeout", `"30": a duration needs a unit: use 30s`}},
		{"follow interval without a unit", head + "  - name: a\n    topic: t\n    follow: true\n    follow_interval: 1.5\n", 8,
			[]string{"tables[0].follow_interval", "use 1.5s"}},
		{"negative keep", head + "  - name: a\n    topic: t\n    keep: -1\n", 7, []string{"tables[0].keep", "must not be negative"}},
		{"bad max change", head + "  - name: a\n    topic: t\n    max_change: lots\n", 7, []string{"tables[0].max_change", "want a percentage"}},
		{"too many readers", head + "  - name: a\n    topic: t\n    readers: 65\n", 7, []string{"tables[0].readers", "want 1 to 64"}},
		{"negative readers", head + "  - name: a\n    topic: t\n    readers: -1\n", 7, []string{"tables[0].readers", "want 1 to 64"}},
		{"zero stall timeout", head + "  - name: a\n    topic: t\n    stall_timeout: 0s\n", 7, []string{"must be positive"}},
		{"bad on_bad_record", head + "  - name: a\n    topic: t\n    on_bad_record: ignore\n", 7, []string{"fail or skip"}},
		{"zero max_concurrent_runs", "db: t.db\nmax_concurrent_runs: 0\n", 2, []string{"max_concurrent_runs", "want at least 1"}},
		{"retry_backoff_max without a unit", "db: t.db\nretry_backoff_max: 60\n", 2, []string{"retry_backoff_max", "use 60s"}},
		{"negative shutdown_timeout", "db: t.db\nshutdown_timeout: -1s\n", 2, []string{"shutdown_timeout", "must be positive"}},
		{"missing catalog", head + "  - {name: a, topic: t, fold: count, identity_field: i, group_field: g, catalog: nope.json}\n", 5,
			[]string{"tables[0].catalog", "nope.json"}},
		{"bad catalog", head + "  - {name: a, topic: t, fold: count, identity_field: i, group_field: g, catalog: bad.json}\n", 5,
			[]string{"tables[0].catalog", "bad.json", "not JSON"}},
		{"bad socket mode", "db: t.db\nsocket_mode: \"rw-rw----\"\n", 2, []string{"socket_mode", "octal"}},
		{"socket mode too wide", "db: t.db\nsocket_mode: \"01777\"\n", 2, []string{"socket_mode"}},
		{"socket mode without owner", "db: t.db\nsocket_mode: \"0060\"\n", 2, []string{"socket_mode", "0600"}},
		{"listen not host:port", "db: t.db\nlisten: localhost\n", 2, []string{"listen", "HOST:PORT"}},
		{"remote listen", "db: t.db\nlisten: 0.0.0.0:9466\n", 2, []string{"listen", "allow_remote", "admin_token"}},
		{"remote listen, every interface", "db: t.db\nlisten: \":9466\"\nallow_remote: true\n", 2, []string{"admin_token"}},
		{"remote listen without allow_remote", "db: t.db\nlisten: 10.0.0.5:9466\nadmin_token: abc\n", 2, []string{"allow_remote"}},
		// Issue 19 point 6: allow_remote closes the listener; without TLS
		// it is refused unless allow_plaintext_tokens.
		{"allow_remote without TLS", "db: t.db\nlisten: 10.0.0.5:9466\nread_token: r\nallow_remote: true\n", 4,
			[]string{"allow_remote", "tls_cert", "allow_plaintext_tokens"}},
		{"allow_remote on loopback without a token", "db: t.db\nlisten: 127.0.0.1:9466\nallow_remote: true\n", 2, []string{"listen", "read_token"}},
		{"read_token without allow_remote", "db: t.db\nlisten: 127.0.0.1:9466\nread_token: r\n", 3, []string{"read_token", "allow_remote: true only"}},
		{"metrics_token without listen", "db: t.db\nmetrics_token: m\n", 2, []string{"metrics_token", "set listen"}},
		{"tls_cert without tls_key", "db: t.db\nlisten: 127.0.0.1:9466\ntls_cert: c.pem\n", 3, []string{"tls_key", "both or neither"}},
		{"read_token equals admin_token", "db: t.db\nlisten: 10.0.0.5:9466\nallow_remote: true\nallow_plaintext_tokens: true\nadmin_token: hunter2\nread_token: hunter2\n", 6,
			[]string{"read_token", "must differ"}},
		{"unset variable in read_token", "db: t.db\nlisten: 10.0.0.5:9466\nread_token: ${KM_READ_UNSET}\n", 3, []string{"read_token", "KM_READ_UNSET is not set"}},
		{"unset variable", "db: t.db\nkafka:\n  properties:\n    sasl.username: ${KM_USER_UNSET}\n", 4,
			[]string{"kafka.properties.sasl.username", "KM_USER_UNSET is not set"}},
		{"negative spool_max_bytes", "db: t.db\nspool_max_bytes: -1\n", 2, []string{"spool_max_bytes", "positive"}},
		{"negative page_max_bytes", "db: t.db\npage_max_bytes: -5\n", 2, []string{"page_max_bytes", "positive"}},
		{"negative max_heavy_requests", "db: t.db\nmax_heavy_requests: -2\n", 2, []string{"max_heavy_requests", "positive"}},
		{"empty", "", 0, []string{"empty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, tc.doc, map[string]string{"bad.json": "{"})
			_, err := parse(t, path, nil)
			var ce *config.Error
			if !errors.As(err, &ce) || !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("Parse = %v, want a *config.Error", err)
			}
			if ce.Line != tc.line {
				t.Errorf("line %d, want %d (%v)", ce.Line, tc.line, err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "config "+path) {
				t.Errorf("%q does not name the file", msg)
			}
			if tc.line > 0 && !strings.Contains(msg, fmt.Sprintf("%s:%d:", path, tc.line)) {
				t.Errorf("%q does not name line %d", msg, tc.line)
			}
			if strings.Contains(msg, "hunter2") {
				t.Errorf("%q shows a property's value", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q does not contain %q", msg, w)
				}
			}
		})
	}
}

// TestRemoteListenAllowed checks the listen rules that pass: loopback
// without a token, and a remote address with allow_remote and a token.
func TestRemoteListenAllowed(t *testing.T) {
	for _, doc := range []string{
		"listen: 127.0.0.1:9466\n",
		"listen: \"[::1]:9466\"\n",
		"listen: localhost:9466\n",
		"listen: 0.0.0.0:9466\nallow_remote: true\nadmin_token: t0k\nallow_plaintext_tokens: true\n",
		"listen: 0.0.0.0:9466\nallow_remote: true\nread_token: r0k\ntls_cert: c.pem\ntls_key: k.pem\n",
		"listen: 127.0.0.1:9466\nallow_remote: true\nmetrics_token: m0k\nallow_plaintext_tokens: true\n",
		"listen: 127.0.0.1:9466\ntls_cert: c.pem\ntls_key: k.pem\n",
		"allow_remote: false\n",
	} {
		if _, err := parse(t, write(t, "db: t.db\n"+doc, nil), nil); err != nil {
			t.Errorf("%q: %v", doc, err)
		}
	}
}

func TestCheckSchedule(t *testing.T) {
	for s, ok := range map[string]bool{
		"": true, "@every 10m": true, "@every 1h30m": true, "@every 500ms": true, "*/5 * * * *": true, "0 3 * * 1-5": true,
		"@hourly": false, "@every 0s": false, "@every -1m": false, "@every": false, "every 10m": false, "* * * *": false,
		"0 */5 * * * *": false, "61 * * * *": false, " @every 1m": false,
	} {
		if err := config.CheckSchedule(s); (err == nil) != ok {
			t.Errorf("CheckSchedule(%q) = %v, want ok=%v", s, err, ok)
		}
	}
}

// TestSecretsNeverShown checks that secret property values and the admin
// token appear in no error, String, %v/%+v/%#v, JSON or zerolog output,
// while other property values do.
func TestSecretsNeverShown(t *testing.T) {
	const pw, tok, jaas = "pw-7f3a9c", "tok-81bd2e", "jaas-c0ffee"
	doc := "db: t.db\nadmin_token: " + tok + "\nkafka:\n  brokers: k:9092\n  properties:\n" +
		"    sasl.password: " + pw + "\n    sasl.jaas.config: " + jaas + "\n    security.protocol: SASL_SSL\n"
	c, err := parse(t, write(t, doc, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Kafka.Properties["sasl.password"] != pw || c.AdminToken.Reveal() != tok {
		t.Fatal("the real values must stay usable")
	}
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	zl := zerolog.New(&logged)
	zl.Info().Object("properties", c.Kafka.Properties).Interface("config", c).
		Stringer("token", c.AdminToken).Msg("loaded")
	outputs := map[string]string{
		"String": c.String(), "%v": fmt.Sprintf("%v", *c), "%+v": fmt.Sprintf("%+v", *c), "%#v": fmt.Sprintf("%#v", *c),
		"JSON": string(js), "zerolog": logged.String(),
	}
	for name, out := range outputs {
		for _, secret := range []string{pw, tok, jaas} {
			if strings.Contains(out, secret) {
				t.Errorf("%s shows a secret: %s", name, out)
			}
		}
		if name != "%#v" && !strings.Contains(out, "SASL_SSL") {
			t.Errorf("%s hides a value that is not secret: %s", name, out)
		}
	}

	// An error about a property whose value has a secret in it names the
	// property, never the value.
	bad := "db: t.db\nkafka:\n  properties:\n    sasl.password: " + pw + "-${KM_UNSET_PART}\n"
	_, err = parse(t, write(t, bad, nil), nil)
	if err == nil || !strings.Contains(err.Error(), "sasl.password") || strings.Contains(err.Error(), pw) {
		t.Fatalf("error %v: want the property named and its value absent", err)
	}
}

// TestScrubLibrdkafkaError checks Scrub on librdkafka's own rejection of a
// secret-named property (replay.CheckProps names it with its value): the
// value is gone from the message and the error still classifies.
func TestScrubLibrdkafkaError(t *testing.T) {
	const v = "s3cr3t-value-42"
	props := map[string]string{"sasl.oauthbearer.client.secrett": v} // misspelt: librdkafka rejects it
	err := replay.CheckProps("localhost:9092", props, replay.ConsumerClient)
	if !errors.Is(err, replay.ErrBadProperty) || !strings.Contains(err.Error(), v) {
		t.Fatalf("CheckProps = %v: want a rejection naming the value (the premise of this test)", err)
	}
	s := config.Scrub(err, props)
	if strings.Contains(s.Error(), v) || !strings.Contains(s.Error(), "sasl.oauthbearer.client.secrett="+config.Redacted) {
		t.Fatalf("scrubbed: %q", s)
	}
	var pe *replay.PropertyError
	if !errors.Is(s, replay.ErrBadProperty) || !errors.As(s, &pe) {
		t.Fatalf("scrubbed error no longer classifies: %v", s)
	}
	if config.Scrub(nil, props) != nil {
		t.Fatal("Scrub(nil) != nil")
	}
	plain := errors.New("no secret here")
	if config.Scrub(plain, props) != plain {
		t.Fatal("Scrub changed an error without secrets")
	}
}

func TestIsSecretKey(t *testing.T) {
	for k, want := range map[string]bool{
		"sasl.password": true, "ssl.key.password": true, "ssl.keystore.password": true, "sasl.jaas.config": true,
		"sasl.oauthbearer.client.secret": true, "ssl.key.pem": true, "sasl.oauthbearer.config": true, "SASL.PASSWORD": true,
		"security.protocol": false, "sasl.username": false, "ssl.key.location": false, "bootstrap.servers": false,
	} {
		if config.IsSecretKey(k) != want {
			t.Errorf("IsSecretKey(%q) = %v", k, !want)
		}
	}
}

// TestLoadRunSettings: the daemon's run settings are read as written.
func TestLoadRunSettings(t *testing.T) {
	path := write(t, "db: t.db\nmax_concurrent_runs: 3\nretry_backoff_max: 2m\nshutdown_timeout: 45s\n", nil)
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxConcurrentRuns != 3 || c.RetryBackoffMax != 2*time.Minute || c.ShutdownTimeout != 45*time.Second {
		t.Fatalf("run settings: %d %s %s", c.MaxConcurrentRuns, c.RetryBackoffMax, c.ShutdownTimeout)
	}
}
