package serve

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
)

// queryRequest is a GET with the raw query s, as a client may send it.
func queryRequest(s string) *http.Request {
	return &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/v1/tables/t/rows", RawQuery: s}, Header: http.Header{}}
}

// checkAnswer asserts the parse's outcome: either accepted with nothing
// written, or refused with a 400 whose body is the API's JSON error.
func checkAnswer(t *testing.T, raw string, ok bool, rec *httptest.ResponseRecorder) {
	t.Helper()
	if ok {
		if rec.Body.Len() != 0 {
			t.Fatalf("query %q accepted, but an answer was written: %d %s", raw, rec.Code, rec.Body)
		}
		return
	}
	var e apiError
	if rec.Code != http.StatusBadRequest || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Code == "" || e.Error == "" {
		t.Fatalf("query %q refused with %d %s: want 400 and a JSON error", raw, rec.Code, rec.Body)
	}
}

// FuzzQueryParams: whatever the query of the rows and diff routes, the
// parsing never panics; it accepts the query (nothing answered yet) with
// values in their ranges, or answers 400 with the API's JSON error; and an
// accepted query written back from its values parses to the same values.
func FuzzQueryParams(f *testing.F) {
	for _, s := range []string{
		"", "limit=10&after=k1&generation=3&encoding=base64&keys_only=1", "prefix=a%2Fb&from=a&to=z",
		"limit=0", "limit=10001", "limit=-1", "generation=0", "generation=18446744073709551616",
		"encoding=latin1", "keys_only=yes", "bogus=1", "limit=5;x=1", "%zz", "from=3&to=1&limit=2",
		"from=a", "to=0", "limit=1e3", "after=%00%ff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		rec := httptest.NewRecorder()
		q, ok := parseRows(rec, queryRequest(raw))
		checkAnswer(t, raw, ok, rec)
		if ok {
			if q.limit < 1 || q.limit > MaxRowsLimit {
				t.Fatalf("query %q: limit %d outside 1..%d", raw, q.limit, MaxRowsLimit)
			}
			v := url.Values{"limit": {strconv.Itoa(q.limit)}}
			for name, b := range map[string][]byte{"prefix": q.rng.Prefix, "from": q.rng.From, "to": q.rng.To, "after": q.after} {
				if len(b) > 0 {
					v.Set(name, string(b))
				}
			}
			if q.generation != 0 {
				v.Set("generation", strconv.FormatUint(q.generation, 10))
			}
			if q.b64 {
				v.Set("encoding", "base64")
			}
			if q.keysOnly {
				v.Set("keys_only", "1")
			}
			rec2 := httptest.NewRecorder()
			q2, ok2 := parseRows(rec2, queryRequest(v.Encode()))
			if !ok2 || q2.limit != q.limit || q2.generation != q.generation || q2.b64 != q.b64 || q2.keysOnly != q.keysOnly ||
				!bytes.Equal(q2.after, q.after) || !bytes.Equal(q2.rng.Prefix, q.rng.Prefix) ||
				!bytes.Equal(q2.rng.From, q.rng.From) || !bytes.Equal(q2.rng.To, q.rng.To) {
				t.Fatalf("query %q -> %+v, written back %q -> %+v (ok %v)", raw, q, v.Encode(), q2, ok2)
			}
		}

		rec = httptest.NewRecorder()
		d, ok := parseDiff(rec, queryRequest(raw))
		checkAnswer(t, raw, ok, rec)
		if ok {
			if d.limit < 0 {
				t.Fatalf("query %q: diff limit %d", raw, d.limit)
			}
			v := url.Values{}
			if d.from != 0 {
				v.Set("from", strconv.FormatUint(d.from, 10))
			}
			if d.to != 0 {
				v.Set("to", strconv.FormatUint(d.to, 10))
			}
			if d.limit != 0 {
				v.Set("limit", strconv.Itoa(d.limit))
			}
			if d.b64 {
				v.Set("encoding", "base64")
			}
			rec2 := httptest.NewRecorder()
			d2, ok2 := parseDiff(rec2, queryRequest(v.Encode()))
			if !ok2 || d2 != d {
				t.Fatalf("diff query %q -> %+v, written back %q -> %+v (ok %v)", raw, d, v.Encode(), d2, ok2)
			}
		}
	})
}
