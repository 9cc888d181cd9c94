package serve

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/kmaterialize/kmaterialize/api"
)

// FuzzWaitQuery: whatever a read's query (min_positions=, wait=) and, for
// a POST, its body, parseWaitQuery never panics; it accepts them (nothing
// answered yet) with positions that are not negative and a wait from 0 to
// api.MaxWait, or answers 400 with the API's JSON error; and accepted
// values written back (as a query, and as a body) parse to the same.
func FuzzWaitQuery(f *testing.F) {
	for _, s := range []struct{ query, body string }{
		{"min_positions=1:1300,4:77&wait=2s", ""}, {"min_positions=0:0", ""}, {"wait=2s", ""}, {"wait=31s&min_positions=0:1", ""},
		{"min_positions=0:1&wait=-1s", ""}, {"min_positions=", ""}, {"min_positions=0:1,0:1", ""}, {"min_positions=a", ""},
		{"wait=1h", `{"min_positions":{"0":1}}`}, {"", `{"min_positions":{"2147483647":9223372036854775807}}`},
		{"", `{"min_positions":{"-1":1}}`}, {"", `{"min_positions":{}}`}, {"", `{}`}, {"", `{"min_positions":{"0":1}} x`},
		{"min_positions=0:1", `{"min_positions":{"0":1}}`}, {"", `{"min_positions":{"0":1.5}}`},
	} {
		f.Add(s.query, s.body, false)
		f.Add(s.query, s.body, true)
	}
	f.Fuzz(func(t *testing.T, raw, body string, post bool) {
		req := queryRequest(raw)
		if post {
			req.Method = http.MethodPost
			req.Body = httpBody(body)
		}
		rec := httptest.NewRecorder()
		q, ok := parseWaitQuery(rec, req)
		checkAnswer(t, raw, ok, rec)
		if !ok {
			return
		}
		if q.wait < 0 || q.wait > api.MaxWait || (q.wait > 0 && q.min == nil) {
			t.Fatalf("query %q body %q: wait %s", raw, body, q.wait)
		}
		for p, n := range q.min {
			if p < 0 || n < 0 {
				t.Fatalf("query %q body %q: min_positions %v", raw, body, q.min)
			}
		}
		v := url.Values{}
		if q.min != nil {
			v.Set(api.ParamMinPositions, q.min.String())
		}
		if q.wait > 0 {
			v.Set(api.ParamWait, q.wait.String())
		}
		rec2 := httptest.NewRecorder()
		q2, ok2 := parseWaitQuery(rec2, queryRequest(v.Encode()))
		if !ok2 || q2.wait != q.wait || !maps.Equal(q2.min, q.min) {
			t.Fatalf("query %q body %q -> %+v, written back %q -> %+v (ok %v)", raw, body, q, v.Encode(), q2, ok2)
		}
	})
}

// httpBody is a request body of s.
func httpBody(s string) *readCloser { return &readCloser{strings.NewReader(s)} }

type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }
