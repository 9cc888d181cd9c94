package config_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/config"
)

func TestParseProperties(t *testing.T) {
	doc := "\ufeff# comment\n\n  security.protocol = SASL_SSL  \nsasl.password=p=a#ss \n\t# indented comment\nsasl.username=me\r\nsasl.username=you\nempty=\n"
	got, err := config.ParseProperties([]byte(doc), "c.properties")
	if err != nil {
		t.Fatal(err)
	}
	want := config.Properties{"security.protocol": "SASL_SSL", "sasl.password": "p=a#ss", "sasl.username": "you", "empty": ""}
	if diff := cmp.Diff(map[string]string(want), map[string]string(got)); diff != "" {
		t.Fatalf("properties (-want +got):\n%s", diff)
	}
	for _, c := range []struct{ doc, msg string }{
		{"a=b\nsasl.password hunter22\n", "c.properties:2: not KEY=VALUE"},
		{"a=b\n\n = hunter22\n", "c.properties:3: a property with an empty name"},
	} {
		_, err := config.ParseProperties([]byte(c.doc), "c.properties")
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), c.msg) || strings.Contains(err.Error(), "hunter22") {
			t.Fatalf("%q: %v, want ErrInvalid with %q and no value", c.doc, err, c.msg)
		}
	}
}

func TestRedactor(t *testing.T) {
	r := config.NewRedactor()
	plain := "nothing to hide"
	if r.String(plain) != plain {
		t.Fatal("an empty Redactor changed text")
	}
	quoted := `pa"ss\word`
	r.Add("hunter22", quoted, "abc", "hunter22-long")
	r.AddProperties(map[string]string{"sasl.password": "from-props", "client.id": "not-a-secret"})
	for in, want := range map[string]string{
		"password hunter22 and hunter22-long": "password [redacted] and [redacted]",
		`raw pa"ss\word`:                      "raw [redacted]",
		"abc is too short to redact":          "abc is too short to redact",
		"from-props; client not-a-secret":     "[redacted]; client not-a-secret",
	} {
		if got := r.String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
	// A JSON log line escapes the quote and backslash.
	line, _ := json.Marshal(map[string]string{"message": "bad " + quoted})
	var buf bytes.Buffer
	w := r.Writer(&buf)
	n, err := w.Write(line)
	if err != nil || n != len(line) {
		t.Fatalf("Write: %d, %v; want %d, nil", n, err, len(line))
	}
	if strings.Contains(buf.String(), "word") || !strings.Contains(buf.String(), config.Redacted) {
		t.Fatalf("JSON line not redacted: %s", buf.String())
	}
	base := fmt.Errorf("auth: %w", errSentinel)
	err = r.Error(fmt.Errorf("login with hunter22: %w", base))
	if err.Error() != "login with [redacted]: auth: sentinel" || !errors.Is(err, errSentinel) {
		t.Fatalf("Error: %v (Is sentinel %v)", err, errors.Is(err, errSentinel))
	}
	if r.Error(nil) != nil {
		t.Fatal("Error(nil) is not nil")
	}
}

var errSentinel = errors.New("sentinel")

func TestConfigSecretsFoundByType(t *testing.T) {
	env := map[string]string{"PW": "kafka-password", "TOK": "admin-token-1"}
	doc := "db: x.db\nadmin_token: ${TOK}\nkafka:\n  brokers: b:9092\n  properties:\n    sasl.password: ${PW}\n    ssl.keystore.password: keystore-pw\n    client.id: visible-id\n"
	cfg, err := config.Parse([]byte(doc), config.ParseOptions{Path: "k.yaml", LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.Secrets()
	slices.Sort(got)
	want := []string{"admin-token-1", "kafka-password", "keystore-pw"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Secrets (-want +got):\n%s", diff)
	}
}
