package fold

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

func TestCanonicalNumber(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0", "0"}, {"-0", "0"}, {"0.000", "0"}, {"-0e5", "0"},
		{"1", "1"}, {"1.0", "1"}, {"10e-1", "1"}, {"0.1e1", "1"}, {"1E0", "1"}, {"1e+0", "1"},
		{"-17", "-17"}, {"1.50", "1.5"}, {"150e-2", "1.5"}, {"100", "100"}, {"1e2", "100"},
		{"0.001", "0.001"}, {"1e-3", "0.001"}, {"-2.5e-7", "-0.00000025"},
		{"123456789012345678901", "123456789012345678901"}, {"1e20", "100000000000000000000"}, {"1e21", "1e21"},
		{"1e22", "1e22"}, {"1e30", "1e30"}, {"12.5e30", "1.25e31"}, {"1e-30", "1e-30"}, {"-1.5e-20", "-1.5e-20"},
		{"1e400", "1e400"},
	}
	for _, tc := range tests {
		got, err := canonicalNumber(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("canonicalNumber(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			continue
		}
		again, err := canonicalNumber(got)
		if err != nil || again != got {
			t.Errorf("canonicalNumber(%q) = %q, %v; not idempotent", got, again, err)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("canonicalNumber(%q) = %q is not valid JSON", tc.in, got)
		}
	}
}

func TestCanonicalJSON(t *testing.T) {
	tests := []struct{ a, b string }{
		{`{"b":1,"a":[true,null,"x"]}`, ` { "a" : [ true , null , "x" ] , "b" : 1.0 } `},
		{`{"s":"\u0041\n\"\\\u00e9\u2028"}`, `{"s":"A\n\"\\é` + "\u2028" + `"}`},
		{`{"a":{"y":1,"x":2}}`, `{"a":{"x":2e0,"y":10e-1}}`},
		{`{"a":1,"a":2}`, `{"a":2}`}, // a repeated key keeps the last
	}
	for _, tc := range tests {
		ca, err := canonicalJSON([]byte(tc.a))
		if err != nil {
			t.Fatal(err)
		}
		cb, err := canonicalJSON([]byte(tc.b))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ca, cb) {
			t.Errorf("canonical forms differ:\n%s\n%s", ca, cb)
		}
	}
	for _, bad := range []string{``, `{`, `{} x`, `[1,]`, `nul`} {
		if c, err := canonicalJSON([]byte(bad)); err == nil {
			t.Errorf("canonicalJSON(%q) = %q, want an error", bad, c)
		}
	}
}

// reorderedObject writes the JSON object v with its keys in reverse sorted
// order and values as encoding/json writes them (json.Number verbatim).
func reorderedObject(t *testing.T, v map[string]any) []byte {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	slices.Reverse(keys)
	var b bytes.Buffer
	b.WriteString("{ ")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" ,\n")
		}
		kb, err := json.Marshal(k)
		if err != nil {
			t.Fatal(err)
		}
		vb, err := json.Marshal(v[k])
		if err != nil {
			t.Fatal(err)
		}
		b.Write(kb)
		b.WriteString(" : ")
		b.Write(vb)
	}
	b.WriteString(" }")
	return b.Bytes()
}

// FuzzCanonicalJSON checks, for any input that decodes: the canonical form is
// valid JSON, canonicalization is idempotent, it denotes the same value
// (as encoding/json reads it), and an object written with its keys in another
// order and other spacing has the same canonical form.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{
		`{"event_id":"v-17","booth":"cedar","voter":"u-4"}`,
		`{"b":[1,2.50,{"z":null,"a":false}],"a":"\u00e9\t"}`,
		`[1e3,-0,0.0001,1E-9]`, `"x"`, `12.5e30`, `{"a":{"b":{"c":[]}}}`, `{"":1,"\u0000":2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := canonicalJSON(data)
		if err != nil {
			return
		}
		if !json.Valid(c) {
			t.Fatalf("canonical form %q of %q is not valid JSON", c, data)
		}
		c2, err := canonicalJSON(c)
		if err != nil || !bytes.Equal(c, c2) {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", data, c, c2, err)
		}
		var orig, canon any
		if json.Unmarshal(data, &orig) == nil && json.Unmarshal(c, &canon) == nil && !reflect.DeepEqual(orig, canon) {
			t.Fatalf("canonical form %q of %q denotes another value: %#v vs %#v", c, data, canon, orig)
		}
		v, err := decodeJSON(data)
		if err != nil {
			t.Fatal(err)
		}
		if obj, ok := v.(map[string]any); ok {
			r := reorderedObject(t, obj)
			cr, err := canonicalJSON(r)
			if err != nil || !bytes.Equal(c, cr) {
				t.Fatalf("reordered %q canonicalizes to %q, %v; want %q", r, cr, err, c)
			}
		}
	})
}
