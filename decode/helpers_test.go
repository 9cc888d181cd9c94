package decode_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// newRegistry starts an in-process Schema Registry (srfake speaks the
// registry's REST API over HTTP) that the test closes.
func newRegistry(t *testing.T, opts ...srfake.Option) *srfake.Registry {
	t.Helper()
	r := srfake.New(opts...)
	t.Cleanup(r.Close)
	return r
}

var seq atomic.Int64

// topicName is unique per test and run, so subjects never collide.
func topicName(t *testing.T) string {
	return fmt.Sprintf("%s-%d", strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()), seq.Add(1))
}

// register registers a schema under subject and returns its id.
func register(t *testing.T, reg *srfake.Registry, subject string, typ sr.SchemaType, text string) int {
	t.Helper()
	id, _, err := reg.RegisterSchema(subject, sr.Schema{Schema: text, Type: typ})
	if err != nil {
		t.Fatalf("register %s: %v", subject, err)
	}
	return id
}

// framed is body behind franz-go's Confluent wire header (magic byte 0,
// the schema id, and for Protobuf the message indexes).
func framed(t *testing.T, id int, index []int, body []byte) []byte {
	t.Helper()
	var h sr.ConfluentHeader
	b, err := h.AppendEncode(nil, id, index)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, body...)
}

// checkJSON asserts that got is canonical JSON (no whitespace, keys
// sorted) and denotes want: numbers compare by exact decimal value, so a
// float that lost digits fails.
func checkJSON(t *testing.T, what string, got []byte, want any) {
	t.Helper()
	v, err := decodeNumbers(got)
	if err != nil {
		t.Fatalf("%s: %q is not JSON: %v", what, got, err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	if c := bytes.TrimSuffix(buf.Bytes(), []byte("\n")); !bytes.Equal(c, got) {
		t.Errorf("%s: %s is not in canonical form (%s)", what, got, c)
	}
	if path, ok := sameJSON("$", v, want); !ok {
		t.Errorf("%s: got %s\nwant %#v\nfirst difference at %s", what, got, want, path)
	}
}

func decodeNumbers(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// num is an expected JSON number, compared by exact value.
type num string

func sameJSON(path string, got, want any) (string, bool) {
	switch w := want.(type) {
	case num:
		g, ok := got.(json.Number)
		if !ok {
			return path, false
		}
		a, ok1 := new(big.Rat).SetString(string(g))
		b, ok2 := new(big.Rat).SetString(string(w))
		return path, ok1 && ok2 && a.Cmp(b) == 0
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(g) != len(w) {
			return path + fmt.Sprintf(" (keys %v, want %v)", keys(g), keys(w)), false
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return path + "." + k + " (missing)", false
			}
			if p, ok := sameJSON(path+"."+k, gv, wv); !ok {
				return p, false
			}
		}
		return path, true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return path, false
		}
		for i := range w {
			if p, ok := sameJSON(fmt.Sprintf("%s[%d]", path, i), g[i], w[i]); !ok {
				return p, false
			}
		}
		return path, true
	}
	return path, reflect.DeepEqual(got, want)
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
