package config_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kmaterialize/kmaterialize/config"
)

// TestExpandEveryField: ${NAME} is expanded in each field that expands
// (db, socket, kafka.brokers, kafka.properties, admin_token, read_token,
// metrics_token, tls_cert, tls_key, schema_registry, tables[].catalog), and
// $${ is a literal ${ both there and in a field that does not expand. The
// listener's tokens are secrets (Config.Secrets has them).
func TestExpandEveryField(t *testing.T) {
	dir := t.TempDir()
	vars := map[string]string{
		"STATE_DIRECTORY":   filepath.Join(dir, "state"),
		"RUNTIME_DIRECTORY": filepath.Join(dir, "run"),
		"KAFKA_BROKERS":     "kafka-1:9092,kafka-2:9092",
		"KAFKA_PASSWORD":    "pw-secret",
		"ADMIN":             "tok-xyz",
		"READ":              "tok-read",
		"METRICS":           "tok-metrics",
		"TLS_DIR":           filepath.Join(dir, "tls"),
		"SR_URL":            "http://registry:8081",
		"CATALOGS":          "cat",
	}
	doc := `db: ${STATE_DIRECTORY}/tables.db
socket: ${RUNTIME_DIRECTORY}/km.sock
admin_token: ${ADMIN}
listen: 127.0.0.1:9466
allow_remote: true
read_token: ${READ}
metrics_token: ${METRICS}
tls_cert: ${TLS_DIR}/server.pem
tls_key: ${TLS_DIR}/server.key
kafka:
  brokers: ${KAFKA_BROKERS}
  properties:
    sasl.password: ${KAFKA_PASSWORD}
    client.id: km-$${HOST}
schema_registry:
  url: ${SR_URL}
tables:
  - name: cost-$${x}
    topic: t
  - name: votes
    topic: v
    fold: count
    identity_field: id
    group_field: booth
    catalog: ${CATALOGS}/booths.json
`
	path := write(t, doc, map[string]string{"cat/booths.json": `["b1"]`})
	c, err := parse(t, path, vars)
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]bool{}
	for _, v := range c.Secrets() {
		secrets[v] = true
	}
	for _, v := range []string{"ADMIN", "READ", "METRICS"} {
		if !secrets[vars[v]] {
			t.Errorf("Config.Secrets lacks the value of ${%s}", v)
		}
	}
	// The oracle: each value built here from vars, by hand.
	for _, tc := range []struct{ field, got, want string }{
		{"db", c.DB, vars["STATE_DIRECTORY"] + "/tables.db"},
		{"socket", c.Socket, vars["RUNTIME_DIRECTORY"] + "/km.sock"},
		{"admin_token", c.AdminToken.Reveal(), vars["ADMIN"]},
		{"read_token", c.ReadToken.Reveal(), vars["READ"]},
		{"metrics_token", c.MetricsToken.Reveal(), vars["METRICS"]},
		{"tls_cert", c.TLSCert, vars["TLS_DIR"] + "/server.pem"},
		{"tls_key", c.TLSKey, vars["TLS_DIR"] + "/server.key"},
		{"kafka.brokers", c.Kafka.Brokers, vars["KAFKA_BROKERS"]},
		{"kafka.properties.sasl.password", c.Kafka.Properties["sasl.password"], vars["KAFKA_PASSWORD"]},
		{"kafka.properties.client.id ($${)", c.Kafka.Properties["client.id"], "km-${HOST}"},
		{"schema_registry.url", c.SchemaRegistry.URL, vars["SR_URL"]},
		{"tables[0].name ($${, not expanding)", c.Tables[0].Spec.Name, "cost-${x}"},
		// Relative after expansion: against the file's directory.
		{"tables[1].catalog", c.Tables[1].Catalog, filepath.Join(filepath.Dir(path), "cat", "booths.json")},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.field, tc.got, tc.want)
		}
	}
	if len(c.Tables[1].Spec.Catalog) != 1 {
		t.Errorf("catalog not read from the expanded path: %v", c.Tables[1].Spec.Catalog)
	}
}

// TestExpandErrors: a ${ in a field that does not expand, an unset
// variable, a bad name and an unclosed ${ are each an *Error (exit 2 in
// the CLI) naming the line, the field and the variable.
func TestExpandErrors(t *testing.T) {
	const head = "db: t.db\nkafka:\n  brokers: k:9092\ntables:\n"
	for _, tc := range []struct {
		name string
		doc  string
		line int
		want []string
	}{
		{"topic does not expand", head + "  - name: a\n    topic: ${TOPIC}\n", 6,
			[]string{"tables[0].topic", "${TOPIC}", "does not expand", "$${"}},
		{"table name does not expand", head + "  - name: a-${X}\n    topic: t\n", 5, []string{"tables[0].name", "${X}"}},
		{"ignore_fields element", head + "  - name: a\n    topic: t\n    fold: count\n    identity_field: i\n    group_field: g\n" +
			"    ignore_fields: [x, \"${Y}\"]\n", 10, []string{"tables[0].ignore_fields[1]", "${Y}"}},
		{"max_change pointer", head + "  - name: a\n    topic: t\n    max_change: ${PCT}\n", 7, []string{"tables[0].max_change"}},
		{"listen does not expand", "db: t.db\nlisten: ${LISTEN}\n", 2, []string{"listen", "${LISTEN}"}},
		{"socket_group does not expand", "db: t.db\nsocket_group: ${G}\n", 2, []string{"socket_group"}},
		{"unclosed ${ in a literal field", "db: t.db\nsocket_group: ${G\n", 2, []string{"socket_group", "${"}},
		{"property name does not expand", "db: t.db\nkafka:\n  properties:\n    ${P}: x\n", 4, []string{"kafka.properties", `key "${P}"`}},
		{"unset in db", "db: ${KM_UNSET_STATE}/t.db\n", 1, []string{"db", "KM_UNSET_STATE is not set"}},
		{"unset in socket", "db: t.db\nsocket: ${KM_UNSET_RUN}/s\n", 2, []string{"socket", "KM_UNSET_RUN is not set"}},
		{"unset in brokers", "db: t.db\nkafka:\n  brokers: ${KM_UNSET_BROKERS}\n", 3, []string{"kafka.brokers", "KM_UNSET_BROKERS is not set"}},
		{"unset in catalog", head + "  - {name: a, topic: t, fold: count, identity_field: i, group_field: g, catalog: \"${KM_UNSET_CAT}\"}\n", 5,
			[]string{"tables[0].catalog", "KM_UNSET_CAT is not set"}},
		{"bad name", "db: ${1X}/t.db\n", 1, []string{"db", "${1X}", "not a valid environment variable name"}},
		{"unclosed", "db: t.db\nkafka:\n  brokers: ${KAFKA_BROKERS\n", 3, []string{"kafka.brokers", "without a closing }"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, tc.doc, nil)
			_, err := parse(t, path, map[string]string{"KAFKA_BROKERS": "k:9092", "TOPIC": "t"})
			var ce *config.Error
			if !errors.As(err, &ce) || !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("Parse = %v, want a *config.Error", err)
			}
			if ce.Line != tc.line {
				t.Errorf("line %d, want %d (%v)", ce.Line, tc.line, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, fmt.Sprintf("%s:%d:", path, tc.line)) {
				t.Errorf("%q does not name line %d", msg, tc.line)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q does not contain %q", msg, w)
				}
			}
		})
	}
}

// TestExpandingFieldsListed: ExpandingFields (the list messages give)
// names the fields TestExpandEveryField expands, and every other string
// field of the format refuses ${, one by one.
func TestExpandingFieldsListed(t *testing.T) {
	listed := map[string]bool{}
	for _, f := range strings.Split(config.ExpandingFields, ", ") {
		listed[strings.TrimSuffix(f, " (values)")] = true
	}
	want := map[string]bool{"db": true, "socket": true, "admin_token": true, "read_token": true, "metrics_token": true,
		"tls_cert": true, "tls_key": true, "kafka.brokers": true,
		"kafka.properties": true, "schema_registry.*": true, "tables[].catalog": true}
	if !reflect.DeepEqual(listed, want) {
		t.Fatalf("ExpandingFields %q lists %v, want %v", config.ExpandingFields, listed, want)
	}
	// Every other top-level string field refuses ${: one by one.
	for _, field := range []string{"socket_mode", "socket_group", "listen"} {
		_, err := parse(t, write(t, "db: t.db\n"+field+": ${V}\n", nil), map[string]string{"V": "0600"})
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), field+": ${V}") {
			t.Errorf("%s: ${V} = %v, want refused", field, err)
		}
	}
	for _, field := range []string{"name", "topic", "fold", "schedule", "end", "stall_timeout", "identity_field",
		"group_field", "on_bad_record", "value_format", "key_format", "follow_interval", "max_change"} {
		doc := "db: t.db\ntables:\n  - name: a\n    topic: t\n"
		if field == "name" || field == "topic" {
			doc = strings.Replace("db: t.db\ntables:\n  - name: a\n    topic: t\n", field+": ", field+": ${V}", 1)
		} else {
			doc += "    " + field + ": ${V}\n"
		}
		_, err := parse(t, write(t, doc, nil), map[string]string{"V": "v"})
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "tables[0]."+field+": ${V}") {
			t.Errorf("tables[0].%s: ${V} = %v, want refused", field, err)
		}
	}
}
