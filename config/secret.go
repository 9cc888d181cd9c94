package config

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/rs/zerolog"
)

// Redacted is what a secret is shown as.
const Redacted = "[redacted]"

// Secret is a string that is never shown: String, GoString, MarshalJSON
// and MarshalText give Redacted (or "" when empty). Reveal returns it.
type Secret string

// Reveal returns the secret itself, for the one place that uses it.
func (s Secret) Reveal() string { return string(s) }

func (s Secret) shown() string {
	if s == "" {
		return ""
	}
	return Redacted
}

// String returns Redacted, or "" for an empty secret.
func (s Secret) String() string { return s.shown() }

// GoString returns Redacted, so %#v does not show the secret either.
func (s Secret) GoString() string { return fmt.Sprintf("%q", s.shown()) }

// MarshalJSON returns Redacted as a JSON string.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.shown()) }

// MarshalText returns Redacted.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.shown()), nil }

// secretKeys are librdkafka properties that hold secrets without saying so
// in their name.
var secretKeys = map[string]bool{
	"sasl.jaas.config":        true,
	"sasl.oauthbearer.config": true,
	"ssl.key.pem":             true,
	"ssl_key":                 true, // confluent-kafka-go alias
}

// IsSecretKey reports whether a librdkafka property's value is a secret:
// its name contains password, secret, token or credential, or it is one of
// the properties that carry key material or login modules
// (sasl.jaas.config, sasl.oauthbearer.config, ssl.key.pem).
func IsSecretKey(key string) bool {
	k := strings.ToLower(strings.TrimSpace(key))
	if secretKeys[k] {
		return true
	}
	for _, w := range []string{"password", "secret", "token", "credential"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// Properties are librdkafka properties. Shown (String, MarshalJSON,
// zerolog), secret values are Redacted; the map itself holds the real
// values for the Kafka clients.
type Properties map[string]string

// Redacted returns a copy with secret values replaced by Redacted.
func (p Properties) Redacted() map[string]string {
	out := make(map[string]string, len(p))
	for k, v := range p {
		if IsSecretKey(k) {
			v = Redacted
		}
		out[k] = v
	}
	return out
}

// String returns the properties as key=value in key order, secrets
// redacted.
func (p Properties) String() string {
	r := p.Redacted()
	parts := make([]string, 0, len(r))
	for _, k := range slices.Sorted(maps.Keys(r)) {
		parts = append(parts, k+"="+r[k])
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// GoString is String, so %#v does not show secrets either.
func (p Properties) GoString() string { return p.String() }

// MarshalJSON encodes the redacted properties.
func (p Properties) MarshalJSON() ([]byte, error) { return json.Marshal(p.Redacted()) }

// MarshalZerologObject logs the redacted properties.
func (p Properties) MarshalZerologObject(e *zerolog.Event) {
	r := p.Redacted()
	for _, k := range slices.Sorted(maps.Keys(r)) {
		e.Str(k, r[k])
	}
}

// Scrub returns err with every secret value of props removed from its
// message (as Redacted), for errors from code that names properties with
// their values (librdkafka, replay.CheckProps). The result unwraps to err,
// so errors.Is and errors.As still classify it. nil stays nil.
func Scrub(err error, props map[string]string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	out := msg
	for k, v := range props {
		if v == "" || !IsSecretKey(k) {
			continue
		}
		// key=value as replay.CheckProps writes it, then the bare value
		// wherever else it appears (librdkafka quoting it).
		out = strings.ReplaceAll(out, k+"="+v, k+"="+Redacted)
		out = strings.ReplaceAll(out, v, Redacted)
	}
	if out == msg {
		return err
	}
	return &scrubbedError{msg: out, err: err}
}

type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }
