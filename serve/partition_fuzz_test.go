package serve

import (
	"bytes"
	"encoding/base64"
	"net/http/httptest"
	"net/url"
	"testing"
)

// FuzzPartitionQuery: whatever the query of GET .../partition, the parse
// never panics; it accepts (nothing answered yet) or answers 400 with the
// API's JSON error; an accepted query's key, written back as key= (and
// as base64 with encoding=base64), parses to the same bytes.
func FuzzPartitionQuery(f *testing.F) {
	for _, s := range []string{
		"key=acct-1", "key=", "key=a%2Fb&encoding=base64", "key=AAEC%2Fw%3D%3D&encoding=base64", "key=%00%ff",
		"", "key=a&key=b", "encoding=base64", "key=!!&encoding=base64", "key=a&encoding=latin1", "key=a&bogus=1",
		"key=a;b", "%zz", "key=YQ&encoding=base64", "key=YQ==&encoding=utf-8",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		rec := httptest.NewRecorder()
		q, ok := parsePartitionQuery(rec, queryRequest(raw))
		checkAnswer(t, raw, ok, rec)
		if !ok {
			return
		}
		for _, v := range []url.Values{
			{"key": {string(q.key)}},
			{"key": {base64.StdEncoding.EncodeToString(q.key)}, "encoding": {"base64"}},
		} {
			rec := httptest.NewRecorder()
			q2, ok := parsePartitionQuery(rec, queryRequest(v.Encode()))
			if !ok || !bytes.Equal(q2.key, q.key) {
				t.Fatalf("query %q -> key %q, written back %q -> %q (ok %v, %s)", raw, q.key, v.Encode(), q2.key, ok, rec.Body)
			}
		}
	})
}
