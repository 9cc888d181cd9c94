package config_test

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/kmaterialize/kmaterialize/config"
)

// FuzzParseProperties: whatever the bytes of a -F properties file,
// ParseProperties never panics; it fails only with an *Error (exit 2) at a
// line of the file whose message never holds that line's text (it may be a
// secret); and what it parses is trimmed, non-empty names without '=',
// which written back one KEY=VALUE a line parse to the same properties.
func FuzzParseProperties(f *testing.F) {
	for _, seed := range []string{
		"bootstrap.servers=localhost:9092\n# comment\n\nsasl.password = s3cr=t#x \n",
		"\ufeffsecurity.protocol=SASL_SSL\r\nsasl.mechanism=PLAIN\r\n",
		"no equals sign here\n", "=value-without-name\n", "a=1\na=2\n", "  # indented comment\n\tk\t=\tv\t\n",
		strings.Repeat("x", 70<<10) + "=long\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		props, err := config.ParseProperties(data, "client.properties")
		if err != nil {
			var ce *config.Error
			if !errors.As(err, &ce) || !errors.Is(err, config.ErrInvalid) || ce.Line < 1 || ce.Path != "client.properties" {
				t.Fatalf("error %v (%T): want a *config.Error at a line of client.properties", err, err)
			}
			lines := strings.Split(string(data), "\n")
			if ce.Line <= len(lines) {
				if text := strings.TrimSpace(lines[ce.Line-1]); len(text) >= 12 && strings.Contains(err.Error(), text) {
					t.Fatalf("error %q shows line %d's text", err, ce.Line)
				}
			}
			return
		}
		var b strings.Builder
		b.WriteString("# written back\n") // no byte order mark to strip from a first key
		for _, k := range slices.Sorted(maps.Keys(props)) {
			v := props[k]
			if k == "" || k != strings.TrimSpace(k) || strings.ContainsAny(k, "=\n") || strings.HasPrefix(k, "#") {
				t.Fatalf("name %q: want a trimmed name without '=', newline or a leading '#'", k)
			}
			if v != strings.TrimSpace(v) || strings.Contains(v, "\n") {
				t.Fatalf("value of %q is %q: want it trimmed, on one line", k, v)
			}
			b.WriteString(k + "=" + v + "\n")
		}
		again, err := config.ParseProperties([]byte(b.String()), "again")
		if err != nil {
			t.Fatalf("written back %q: %v", b.String(), err)
		}
		if !maps.Equal(props, again) {
			t.Fatalf("written back and parsed again: %v, want %v", again, props)
		}
	})
}
