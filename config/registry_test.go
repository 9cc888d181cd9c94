package config_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kmaterialize/kmaterialize/config"
	"github.com/kmaterialize/kmaterialize/decode"
)

const registryDoc = `db: t.db
kafka:
  brokers: k:9092
schema_registry:
  url: ${SR_URL}
  username: svc
  password: ${SR_PASSWORD}
tables:
  - name: orders
    topic: orders
    value_format: avro
    key_format: json
  - name: plain
    topic: plain
`

// TestSchemaRegistrySection: the schema_registry section with ${NAME}
// from the environment, and the tables' value_format and key_format; the
// password never shows in the config's JSON, %v or %+v.
func TestSchemaRegistrySection(t *testing.T) {
	const secret = "sr-Pa55-secret"
	cfg, err := parse(t, write(t, registryDoc, nil), map[string]string{"SR_URL": "http://sr:8081", "SR_PASSWORD": secret})
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.SchemaRegistry.Registry()
	if r.URL != "http://sr:8081" || r.Username != "svc" || r.Password != secret || r.BearerToken != "" {
		t.Errorf("registry %+v: want the file's values with ${NAME} expanded", cfg.SchemaRegistry)
	}
	orders, err := cfg.Table("orders")
	if err != nil {
		t.Fatal(err)
	}
	if orders.ValueFormat != decode.Avro || orders.KeyFormat != decode.JSON {
		t.Errorf("orders formats %q/%q, want avro/json", orders.ValueFormat, orders.KeyFormat)
	}
	plain, _ := cfg.Table("plain")
	if plain.ValueFormat != "" || plain.KeyFormat != "" {
		t.Errorf("plain formats %q/%q, want the default (raw)", plain.ValueFormat, plain.KeyFormat)
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, shown := range []string{string(js), fmt.Sprintf("%v", cfg.SchemaRegistry), fmt.Sprintf("%+v", *cfg),
		fmt.Sprintf("%#v", cfg.SchemaRegistry), r.String(), fmt.Sprintf("%+v", r)} {
		if strings.Contains(shown, secret) {
			t.Errorf("the password shows in %s", shown)
		}
	}
}

// TestSchemaRegistryErrors: a bad format names its table and line; an
// unset ${NAME} names the variable, not a value; conflicting credentials
// are refused.
func TestSchemaRegistryErrors(t *testing.T) {
	for _, c := range []struct {
		name, doc, want string
		env             map[string]string
	}{
		{"format", strings.Replace(registryDoc, "value_format: avro", "value_format: xml", 1),
			`tables[0].value_format: "xml": want raw|json|avro|protobuf|jsonschema`, map[string]string{"SR_URL": "http://sr:1", "SR_PASSWORD": "p"}},
		{"unset", registryDoc, "schema_registry.password: environment variable SR_PASSWORD is not set", map[string]string{"SR_URL": "http://sr:1"}},
		{"both credentials", strings.Replace(registryDoc, "  username: svc\n", "  username: svc\n  bearer_token: t0k\n", 1),
			"either a user and password or a bearer token", map[string]string{"SR_URL": "http://sr:1", "SR_PASSWORD": "p"}},
		{"url", registryDoc, "want http://HOST:PORT", map[string]string{"SR_URL": "sr:8081", "SR_PASSWORD": "p"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parse(t, write(t, c.doc, nil), c.env)
			if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want ErrInvalid with %q", err, c.want)
			}
		})
	}
}
