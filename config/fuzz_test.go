package config_test

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kmaterialize/kmaterialize/config"
	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/partition"
)

// fuzzEnv is the environment of the fuzz targets. B's value holds a
// reference: expansion is one pass, so it must come out as it is.
var fuzzEnv = map[string]string{"A": "alpha", "B": "${A}", "STATE_DIRECTORY": "/var/lib/km", "EMPTY": ""}

// FuzzParse: whatever the document, Parse never panics, fails only with an
// *Error (ErrInvalid, so exit 2) with a line that is not negative, asks
// the environment only for valid names, and leaves no ${ in a field that
// does not expand unless the document escaped one.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		full,
		"db: ${STATE_DIRECTORY}/t.db\nsocket: ${STATE_DIRECTORY}/s\nkafka:\n  brokers: ${A}:9092\n  properties:\n    client.id: ${B}\ntables:\n  - {name: a, topic: t}\n",
		"db: t.db\ntables:\n  - name: a\n    topic: ${A}\n",
		"db: t.db\nkafka:\n  brokers: ${UNSET}\n",
		"db: $${A}\nsocket_group: $${x}\n",
		"db: ${A\n", "db: ${}\n", "db: ${1}\n", "db: $$${A}\n",
		"db: &x ${A}\nsocket_group: *x\n",
		"kafka:\n  properties:\n    ${A}: v\n    $${A}: w\n    ${A}x: y\n",
		"db: t.db\ntables:\n  - {name: a, topic: t, partitions: 0-5, partitioner: murmur2}\n  - {name: b, topic: t, partitions: [4, 0, 2], partitioner: consistent_random, key_format: raw}\n",
		"db: t.db\ntables:\n  - name: a\n    topic: t\n    partitions: \"7, 0-2,9-11\"\n    partitioner: fnv1a\n  - name: b\n    topic: t\n    partitions:\n      - 3\n      - 1\n",
		"db: t.db\ntables:\n  - {name: a, topic: t, partitions: &p [1, 2], key_format: json, partitioner: murmur2}\n  - {name: b, topic: t, partitions: *p}\n",
		"db: t.db\ntables:\n  - {name: a, topic: t, partitions: [], partitioner: random}\n  - {name: b, topic: t, partitions: [0, [1]], partitioner: ${A}}\n",
		"db: t.db\ntables:\n  - {name: a, topic: t, partitions: {0: 1}}\n  - {name: b, topic: t, partitions: 0-3,2}\n  - {name: c, topic: t, partitions: \"\"}\n",
		"db: t.db\nfeed:\n  retain_bytes: 8MiB\n  retain_for: 1m\n  max_bytes: 16MiB\n  slow_watcher_bytes: 2MiB\n  spool_max_bytes: 1GiB\n  max_watchers: 3\n  heartbeat: 1s\n",
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, doc []byte) {
		var asked []string
		lookup := func(name string) (string, bool) {
			asked = append(asked, name)
			v, ok := fuzzEnv[name]
			return v, ok
		}
		c, err := config.Parse(doc, config.ParseOptions{Path: filepath.Join(dir, "fuzz.yaml"), LookupEnv: lookup})
		for _, name := range asked {
			if name == "" || strings.ContainsAny(name, "${}") || name[0] >= '0' && name[0] <= '9' {
				t.Fatalf("the environment was asked for %q", name)
			}
		}
		if err != nil {
			var ce *config.Error
			if !errors.As(err, &ce) || !errors.Is(err, config.ErrInvalid) || ce.Line < 0 {
				t.Fatalf("Parse error %v (%T): want a *config.Error with a line", err, err)
			}
			return
		}
		// A table's partitions are a set (sorted, distinct, in range) and
		// its partitioner a canonical name, over raw keys only.
		for _, tb := range c.Tables {
			ps := tb.Spec.Partitions
			if ps != nil && len(ps) == 0 {
				t.Fatalf("table %s: an empty partition set", tb.Spec.Name)
			}
			for i, p := range ps {
				if p < 0 || p > partition.MaxSetPartition || i > 0 && ps[i-1] >= p {
					t.Fatalf("table %s: partitions %v are not a sorted set of partition numbers", tb.Spec.Name, ps)
				}
			}
			if pp := tb.Spec.Partitioner; pp != "" {
				if canon, err := partition.Parse(pp); err != nil || string(canon) != pp {
					t.Fatalf("table %s: partitioner %q is not a canonical name", tb.Spec.Name, pp)
				}
				if kf := tb.Spec.KeyFormat; kf != "" && kf != decode.Raw {
					t.Fatalf("table %s: partitioner %s over key_format %s", tb.Spec.Name, pp, kf)
				}
			}
		}
		// A field that does not expand holds a ${ only when the document
		// wrote $${ (or an escape that decodes to it): the environment
		// never reaches it, and B's "${A}" never comes out there.
		if bytes.Contains(doc, []byte("$$")) || bytes.ContainsRune(doc, '\\') {
			return
		}
		literal := []string{c.SocketGroup, c.Listen}
		for _, tb := range c.Tables {
			literal = append(literal, tb.Spec.Name, tb.Spec.Topic, tb.Spec.IdentityField, tb.Spec.GroupField, tb.Schedule)
			literal = append(literal, tb.Spec.IgnoreFields...)
		}
		for _, v := range literal {
			if strings.Contains(v, "${") {
				t.Fatalf("a field that does not expand holds %q", v)
			}
		}
	})
}

// FuzzExpandRoundTrip: a value written with every ${ doubled ($${) comes
// out as it was, in a field that expands (a Kafka property) and in one
// that does not (a table's identity field); a value with ${A} spliced in
// at a point where no $ precedes it comes out with A's value there.
func FuzzExpandRoundTrip(f *testing.F) {
	for _, s := range []string{"", "plain", "${A}", "$${A}", "$", "$$", "${", "}${x}{", "a$b{c}", "${A}${B}", "$$$${", "\x00${\n"} {
		f.Add(s, 0)
		f.Add(s, len(s)/2)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, s string, at int) {
		if !utf8.ValidString(s) {
			return // YAML documents are text
		}
		quote := func(v string) string { return yamlQuote(strings.ReplaceAll(v, "${", "$${")) }
		parse := func(prop, identity string) *config.Config {
			doc := "db: t.db\nkafka:\n  properties:\n    client.id: " + prop + "\ntables:\n" +
				"  - {name: a, topic: t, fold: count, identity_field: " + identity + ", group_field: g}\n"
			c, err := config.Parse([]byte(doc), config.ParseOptions{Path: filepath.Join(dir, "fuzz.yaml"),
				LookupEnv: func(n string) (string, bool) { v, ok := fuzzEnv[n]; return v, ok }})
			if err != nil {
				// The identity field may be refused for what it is
				// (empty, say), never for a doubled ${.
				if strings.Contains(err.Error(), "${") && strings.Contains(err.Error(), "does not expand") {
					t.Fatalf("a doubled $${ was refused: %v\n%s", err, doc)
				}
				return nil
			}
			return c
		}
		if c := parse(quote(s), quote(s)); c != nil {
			if got := c.Kafka.Properties["client.id"]; got != s {
				t.Fatalf("expanding field: %q came out as %q", s, got)
			}
			if got := c.Tables[0].Spec.IdentityField; got != s {
				t.Fatalf("literal field: %q came out as %q", s, got)
			}
		}
		// Splice ${A} in between two quoted halves, where the left half
		// does not end in '$' (a $ before ${ would make it $${).
		if at < 0 || at > len(s) || !utf8.ValidString(s[:at]) {
			return
		}
		left, right := s[:at], s[at:]
		if strings.HasSuffix(left, "$") {
			return
		}
		lq, rq := quote(left), quote(right)
		prop := lq[:len(lq)-1] + "${A}" + rq[1:]
		if c := parse(prop, `"id"`); c != nil {
			if got, want := c.Kafka.Properties["client.id"], left+fuzzEnv["A"]+right; got != want {
				t.Fatalf("%q with ${A} at %d: got %q, want %q", s, at, got, want)
			}
		} else {
			t.Fatalf("%q with ${A} at %d did not parse", s, at)
		}
	})
}

// yamlQuote writes s as a YAML double-quoted scalar: printable ASCII as it
// is, everything else escaped (YAML forbids raw control characters and DEL
// in a document).
func yamlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r >= 0x20 && r < 0x7f:
			b.WriteRune(r)
		case r <= 0xffff:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			fmt.Fprintf(&b, "\\U%08x", r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
