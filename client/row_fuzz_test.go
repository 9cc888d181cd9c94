package client

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzParseRow: whatever line a daemon (or something answering in its
// place) sends on the rows route, parseRow never panics; it fails, or
// returns a row whose key and value, written back as a line in the same
// encoding, parse to the same row.
func FuzzParseRow(f *testing.F) {
	for _, s := range []string{`{"key":"k1","value":"v1"}`, `{"key":"azE=","value":""}`, `{"key":"k"}`, `{"key":null,"value":"x"}`, `{"key":"a\u0000b","value":"\ud800"}`, `[]`, `{"key":"!!","value":"x"}`, ``} {
		f.Add([]byte(s), false, false)
		f.Add([]byte(s), true, false)
		f.Add([]byte(s), false, true)
	}
	f.Fuzz(func(t *testing.T, line []byte, b64, keysOnly bool) {
		row, err := parseRow(line, b64, keysOnly)
		if err != nil {
			return
		}
		if !b64 && (!utf8.Valid(row.Key) || !utf8.Valid(row.Value)) {
			t.Fatalf("%q: a utf-8 row that is not UTF-8: %q %q", line, row.Key, row.Value)
		}
		if keysOnly && row.Value != nil {
			t.Fatalf("%q: keys only, yet value %q", line, row.Value)
		}
		text := func(b []byte) string {
			if b64 {
				return base64.StdEncoding.EncodeToString(b)
			}
			return string(b)
		}
		m := map[string]string{"key": text(row.Key)}
		if !keysOnly {
			m["value"] = text(row.Value)
		}
		back, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseRow(back, b64, keysOnly)
		if err != nil || !bytes.Equal(again.Key, row.Key) || !bytes.Equal(again.Value, row.Value) {
			t.Fatalf("%q -> %q %q -> %s -> %q %q, %v", line, row.Key, row.Value, back, again.Key, again.Value, err)
		}
	})
}
