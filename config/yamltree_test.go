package config_test

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/kmaterialize/kmaterialize/config"
)

// secret is a secret-looking value of at most 10 bytes: the YAML library
// quotes such a value whole in its type errors (a longer one, its first 7
// bytes).
const secret = "Hx9s3cr3t"

// leaks reports whether s shows secret, or the part of it the library
// would quote.
func leaks(s string) bool { return strings.Contains(s, secret) || strings.Contains(s, secret[:7]) }

// chain is the messages of err and of every error it wraps.
func chain(err error) []string {
	var out []string
	for e := err; e != nil; e = errors.Unwrap(e) {
		out = append(out, e.Error())
	}
	return out
}

// libraryLine is the oracle for a syntax error's line: what the library
// itself reports when it parses doc, 0 when it names none.
var libraryLine = regexp.MustCompile(`^yaml: line (\d+): `)

// TestSyntaxErrorsQuoteNoValue: a malformed file with a secret-looking
// value in it is an *Error whose message, and every cause it wraps, never
// shows the value. Where the library names a line, the error keeps it, and
// the library's own syntax message is shown to quote nothing of the value
// (that is why it may be passed on); where it names none (an alias without
// its anchor, which it quotes), the message is ours alone.
func TestSyntaxErrorsQuoteNoValue(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		withLine  bool // the library names a line
	}{
		{"unclosed flow sequence", "db: t.db\nadmin_token: " + secret + "\ntables: [\n", true},
		{"unclosed flow mapping", "db: t.db\nkafka: {properties: {sasl.password: " + secret + "}\n", true},
		{"unclosed double quote", "db: t.db\nadmin_token: \"" + secret + "\n", true},
		{"unclosed single quote", "db: t.db\nadmin_token: '" + secret + "\n", true},
		{"unknown escape", "db: t.db\nadmin_token: \"" + secret + "\\q\"\n", true},
		{"mapping value in a plain scalar", "db: t.db\nadmin_token: " + secret + ": x\n", true},
		{"bad indentation", "db: t.db\nkafka:\n  properties:\n    sasl.password: " + secret + "\n   - x\n", true},
		{"tab indentation", "db: t.db\nkafka:\n\tsasl.password: " + secret + "\n", true},
		{"block entry after a value", "db: t.db\nadmin_token: " + secret + "\n- x\n", true},
		{"undefined tag handle", "db: t.db\nadmin_token: !x!" + secret + " v\n", true},
		{"alias without its anchor", "db: t.db\nadmin_token: *" + secret + "\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n yaml.Node
			libErr := yaml.Unmarshal([]byte(tc.doc), &n)
			if libErr == nil {
				t.Fatalf("the library parses the malformed document:\n%s", tc.doc)
			}
			libLine := 0
			if m := libraryLine.FindStringSubmatch(libErr.Error()); m != nil {
				libLine, _ = strconv.Atoi(m[1])
			}
			if (libLine > 0) != tc.withLine {
				t.Fatalf("the library's error %q: names a line %v, want %v", libErr, libLine > 0, tc.withLine)
			}
			if tc.withLine && leaks(libErr.Error()) {
				t.Fatalf("the library's syntax message quotes the value: %q", libErr)
			}
			if !tc.withLine && !leaks(libErr.Error()) {
				t.Fatalf("the library's line-less error %q does not quote the document: the case tests nothing", libErr)
			}

			ce := parseRefused(t, tc.doc)
			err := error(ce)
			if ce.Line != libLine {
				t.Errorf("line %d, want the library's %d (%v)", ce.Line, libLine, err)
			}
			if !strings.Contains(err.Error(), "not valid YAML") {
				t.Errorf("%q does not say the file is not YAML", err)
			}
		})
	}
}

func noEnv(string) (string, bool) { return "", false }

// parseRefused parses doc, which must be refused with an *Error, and
// checks that neither its message nor any cause it wraps shows the secret.
func parseRefused(t *testing.T, doc string) *config.Error {
	t.Helper()
	_, err := config.Parse([]byte(doc), config.ParseOptions{Path: "bad.yaml", LookupEnv: noEnv})
	var ce *config.Error
	if !errors.As(err, &ce) || !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("Parse = %v, want a *config.Error", err)
	}
	for _, msg := range chain(err) {
		if leaks(msg) {
			t.Errorf("%q shows the value", msg)
		}
	}
	return ce
}

// lineOf is the oracle for a position: the 1-based line of doc that holds
// marker.
func lineOf(t *testing.T, doc, marker string) int {
	t.Helper()
	for i, l := range strings.Split(doc, "\n") {
		if strings.Contains(l, marker) {
			return i + 1
		}
	}
	t.Fatalf("no line holds %q", marker)
	return 0
}

// TestPositionsFromTree: a field the format does not have, a value of the
// wrong kind and a key given twice are placed by their node: the line the
// test finds by hand, the field by its path, also through an anchor, a
// merge (<<) and a list. The decoder of the library, asked the same, quotes
// the value (the condition the walk guards against); the message here does
// not.
func TestPositionsFromTree(t *testing.T) {
	const head = "db: t.db\nkafka:\n  brokers: k:9092\ntables:\n"
	for _, tc := range []struct {
		name, doc, marker string
		field             string // "" for none
		want              string
		quotes            bool // the library's decoder quotes the value
	}{
		{"secret where a mapping goes", "db: t.db\nkafka:\n  properties: " + secret + "\n", "properties:", "kafka.properties",
			"cannot unmarshal a string into map[string]string", true},
		{"secret where a bool goes", "db: t.db\nallow_remote: " + secret + "\n", "allow_remote", "allow_remote",
			"cannot unmarshal a string into bool", true},
		{"secret where a number goes, in a table", head + "  - name: a\n    topic: t\n    keep: " + secret + "\n", "keep:", "tables[0].keep",
			"cannot unmarshal a string into int", true},
		{"secret where a list goes", head + "  - name: a\n    topic: t\n    ignore_fields: " + secret + "\n", "ignore_fields", "tables[0].ignore_fields",
			"cannot unmarshal a string into a list", true},
		{"a list where a string goes", "db: [" + secret + "]\n", "db:", "db", "cannot unmarshal a list into string", false},
		{"an unknown field holding an anchor", "x_anchor: &v " + secret + "\n", "x_anchor", "", `unknown field "x_anchor"`, false},
		{"alias of a secret where a bool goes", "db: &v " + secret + "\nsocket: t.sock\nallow_remote: *v\n", "allow_remote", "allow_remote",
			"cannot unmarshal a string into bool", true},
		{"unknown field in a merged mapping", "db: t.db\nkafka:\n  <<: {brokerz: " + secret + "}\n  brokers: k:9092\n", "brokerz", "",
			`unknown field "brokerz"; did you mean "brokers"?`, false},
		{"second table's unknown field", head + "  - {name: a, topic: t}\n  - name: b\n    topic: t\n    identity: " + secret + "\n", "identity:", "",
			`unknown field "identity"`, false},
		{"property given twice", "db: t.db\nkafka:\n  properties:\n    sasl.password: " + secret + "\n    sasl.password: other\n", "other",
			"kafka.properties", `mapping key "sasl.password" already defined at line 4`, false},
		{"a merge of a scalar", "db: t.db\nkafka:\n  <<: " + secret + "\n", "<<", "kafka", "a merge (<<) takes a mapping", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.quotes {
				var f struct {
					DB          string                                 `yaml:"db"`
					Socket      string                                 `yaml:"socket"`
					AllowRemote bool                                   `yaml:"allow_remote"`
					Kafka       struct{ Properties map[string]string } `yaml:"kafka"`
					Tables      []struct {
						Name, Topic  string
						Keep         *int     `yaml:"keep"`
						IgnoreFields []string `yaml:"ignore_fields"`
					} `yaml:"tables"`
				}
				libErr := yaml.NewDecoder(bytes.NewReader([]byte(tc.doc))).Decode(&f)
				if libErr == nil || !leaks(libErr.Error()) {
					t.Fatalf("the library's decoder, for the same document, says %v: want it to quote the value", libErr)
				}
			}
			ce := parseRefused(t, tc.doc)
			err := error(ce)
			if want := lineOf(t, tc.doc, tc.marker); ce.Line != want {
				t.Errorf("line %d, want %d (%v)", ce.Line, want, err)
			}
			if ce.Field != tc.field {
				t.Errorf("field %q, want %q (%v)", ce.Field, tc.field, err)
			}
			if !strings.Contains(ce.Msg, tc.want) {
				t.Errorf("%q does not say %q", ce.Msg, tc.want)
			}
		})
	}
}

// TestMergeAndAliasesDecode: what the walk accepts, the decode reads as the
// library does: a merged mapping's keys where the mapping does not set them
// itself, the first of a list of merges winning, an alias's value.
func TestMergeAndAliasesDecode(t *testing.T) {
	doc := "db: &d t.db\nsocket_group: *d\nkafka:\n  <<: [{brokers: first:9092, properties: {client.id: a}}, {brokers: second:9092}]\n" +
		"tables:\n  - &tb {name: a, topic: t}\n  - <<: *tb\n    name: b\n"
	c, err := config.Parse([]byte(doc), config.ParseOptions{Path: filepath.Join(t.TempDir(), "k.yaml"), LookupEnv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%s %s %s %v", c.SocketGroup, c.Kafka.Brokers, c.Kafka.Properties["client.id"], []string{c.Tables[0].Spec.Name + "/" + c.Tables[0].Spec.Topic, c.Tables[1].Spec.Name + "/" + c.Tables[1].Spec.Topic})
	if want := "t.db first:9092 a [a/t b/t]"; got != want {
		t.Errorf("decoded %q, want %q", got, want)
	}
}

// TestAliasExpansionBounded: a document whose aliases of aliases would
// expand to 10^8 mappings (a "billion laughs" through merges) is refused
// at its line once the walk has seen maxShapeVisits values, rather than
// walked to the end.
func TestAliasExpansionBounded(t *testing.T) {
	items := []string{"&a0 {k: v}"}
	for i := 1; i < 9; i++ {
		prev := fmt.Sprintf("*a%d", i-1)
		items = append(items, fmt.Sprintf("&a%d {<<: [%s%s]}", i, strings.Repeat(prev+", ", 9), prev))
	}
	doc := "db: t.db\nkafka:\n  brokers: k\n  properties: {<<: [" + strings.Join(items, ", ") + "]}\n"
	_, err := config.Parse([]byte(doc), config.ParseOptions{Path: "bad.yaml", LookupEnv: noEnv})
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Line != lineOf(t, doc, "properties:") || ce.Field != "kafka.properties" || !strings.Contains(ce.Msg, "expands to more than") {
		t.Fatalf("Parse = %v, want an *Error at kafka.properties saying the document expands too far", err)
	}
}
