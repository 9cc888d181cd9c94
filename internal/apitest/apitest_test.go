package apitest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"
)

// TestDocumentListsTodaysRoutes: api/openapi.json loads, is a valid
// OpenAPI document, and lists every route serve/api.go's handler() has
// registered (the route table's test at merge compares both ways), plus
// GET /v1/openapi.json itself.
func TestDocumentListsTodaysRoutes(t *testing.T) {
	if _, err := load(); err != nil {
		t.Fatal(err)
	}
	want := []Operation{
		{"GET", "/v1/tables"},
		{"GET", "/v1/tables/{table}"},
		{"GET", "/v1/tables/{table}/keys/{key...}"},
		{"GET", "/v1/tables/{table}/rows"},
		{"GET", "/v1/tables/{table}/export"},
		{"GET", "/v1/tables/{table}/count"},
		{"GET", "/v1/tables/{table}/partition"},
		{"POST", "/v1/tables/{table}/keys/{key...}"},
		{"POST", "/v1/tables/{table}/rows"},
		{"POST", "/v1/tables/{table}/count"},
		{"POST", "/v1/tables/{table}/rebuild"},
		{"POST", "/v1/tables/{table}/cancel"},
		{"DELETE", "/v1/tables/{table}"},
		{"POST", "/v1/tables/{table}/update"},
		{"POST", "/v1/tables/{table}/rollback"},
		{"GET", "/v1/tables/{table}/diff"},
		{"GET", "/v1/tables/{table}/changes"},
		{"GET", "/healthz"},
		{"GET", "/readyz"},
		{"GET", "/v1/status"},
		{"GET", "/v1/backup"},
		{"POST", "/v1/compact"},
		{"GET", "/metrics"},
		{"GET", "/v1/openapi.json"},
	}
	have := map[Operation]bool{}
	for _, op := range Operations() {
		have[op] = true
	}
	for _, op := range want {
		if !have[op] {
			t.Errorf("the document lacks %s %s", op.Method, op.Path)
		}
	}
	if len(have) != len(want) {
		t.Errorf("the document has %d operations, want %d: %v", len(have), len(want), Operations())
	}
}

// recorder is a RoundTripper answering every request with a fixed answer.
type recorder struct {
	status int
	header http.Header
	body   string
}

func (r recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	for k, v := range r.header {
		rec.Header()[k] = v
	}
	rec.WriteHeader(r.status)
	rec.WriteString(r.body)
	return rec.Result(), nil
}

// failRecorder is a testing.TB that records Errorf instead of failing.
type failRecorder struct {
	testing.TB
	errs []string
}

func (f *failRecorder) Errorf(format string, args ...any) {
	f.errs = append(f.errs, format)
	f.TB.Logf("(expected) "+format, args...)
}

func roundTrip(t *testing.T, method, path string, answer recorder) []string {
	t.Helper()
	fr := &failRecorder{TB: t}
	tr := Transport(fr, answer)
	req := httptest.NewRequest(method, "http://kmaterialize"+path, nil)
	req.RequestURI = ""
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	return fr.errs
}

// TestTransportFindsMismatches: the transport passes answers the document
// describes and fails on each kind of mismatch: a JSON line that is not a
// row, a missing required header, an undocumented status, a daemon that
// accepts a query value the document forbids, and an answer to a route the
// document lacks.
func TestTransportFindsMismatches(t *testing.T) {
	nd := http.Header{"Content-Type": {"application/x-ndjson"}, "Kmaterialize-Generation": {"3"}, "Kmaterialize-More": {"false"}}
	js := http.Header{"Content-Type": {"application/json"}}
	cases := []struct {
		name, method, path string
		answer             recorder
		fails              bool
	}{
		{"rows", "GET", "/v1/tables/t/rows?limit=2", recorder{200, nd, "{\"key\":\"a\",\"value\":\"1\"}\n{\"key\":\"b\",\"value\":\"2\"}\n"}, false},
		{"keys only", "GET", "/v1/tables/t/rows?keys_only=1", recorder{200, nd, "{\"key\":\"a\"}\n"}, false},
		{"no rows", "GET", "/v1/tables/t/rows", recorder{200, nd, ""}, false},
		{"bad line", "GET", "/v1/tables/t/rows", recorder{200, nd, "{\"key\":\"a\",\"value\":1}\n"}, true},
		{"unterminated line", "GET", "/v1/tables/t/rows", recorder{200, nd, "{\"key\":\"a\",\"value\":\"1\"}"}, true},
		{"no More header", "GET", "/v1/tables/t/rows", recorder{200, http.Header{"Content-Type": {"application/x-ndjson"}, "Kmaterialize-Generation": {"3"}}, ""}, true},
		{"undocumented status", "GET", "/v1/tables/t/rows", recorder{418, js, "{\"error\":\"x\",\"code\":\"internal\"}\n"}, true},
		{"error code of another status", "GET", "/v1/tables/t/rows", recorder{404, js, "{\"error\":\"x\",\"code\":\"bad_limit\"}\n"}, true},
		{"limit refused", "GET", "/v1/tables/t/rows?limit=0", recorder{400, js, "{\"error\":\"x\",\"code\":\"bad_limit\"}\n"}, false},
		{"limit accepted", "GET", "/v1/tables/t/rows?limit=0", recorder{200, nd, ""}, true},
		{"key with slash", "GET", "/v1/tables/t/keys/a/b", recorder{200, http.Header{"Content-Type": {"application/octet-stream"}, "Kmaterialize-Generation": {"1"}}, "\x00\xff"}, false},
		{"no route", "GET", "/v2/x", recorder{404, js, "{\"error\":\"no such route\",\"code\":\"route_not_found\"}\n"}, false},
		{"no route answered", "GET", "/v2/x", recorder{200, js, "{}\n"}, true},
		{"wrong method", "PUT", "/v1/tables/t", recorder{405, js, "{\"error\":\"x\",\"code\":\"method_not_allowed\"}\n"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := roundTrip(t, c.method, c.path, c.answer)
			if got := len(errs) > 0; got != c.fails {
				t.Errorf("failed %v (%v), want %v", got, errs, c.fails)
			}
		})
	}
}

// TestNDJSONDecoderRegistered: loading the document registers the JSON
// lines decoder with the validator.
func TestNDJSONDecoderRegistered(t *testing.T) {
	if _, err := load(); err != nil {
		t.Fatal(err)
	}
	if openapi3filter.RegisteredBodyDecoder("application/x-ndjson") == nil {
		t.Fatal("no decoder for application/x-ndjson")
	}
}

// TestTableNamePattern: the document's table name pattern refuses what the
// daemon's checkTableName refuses (control characters, U+FFFD) and passes
// printable names, so a request the daemon accepts is never one the
// document rejects.
func TestTableNamePattern(t *testing.T) {
	js := http.Header{"Content-Type": {"application/json"}}
	bad := recorder{400, js, "{\"error\":\"x\",\"code\":\"bad_table_name\"}\n"}
	accepted := recorder{404, js, "{\"error\":\"x\",\"code\":\"table_not_found\"}\n"}
	for _, name := range []string{"a%01b", "a%7Fb", "%EF%BF%BD"} {
		if errs := roundTrip(t, "GET", "/v1/tables/"+name, bad); len(errs) > 0 {
			t.Errorf("%s refused: %v", name, errs)
		}
		if errs := roundTrip(t, "GET", "/v1/tables/"+name, recorder{200, js, "{}\n"}); len(errs) == 0 {
			t.Errorf("%s: the document accepts a name the daemon refuses", name)
		}
	}
	for _, name := range []string{"balances", "a%20b", "%C3%A9t%C3%A9"} {
		if errs := roundTrip(t, "GET", "/v1/tables/"+name, accepted); len(errs) > 0 {
			t.Errorf("%s: %v", name, errs)
		}
	}
}

// TestBodyCheckedOnClose: a body read to its Content-Length by a JSON
// decoder, which stops before EOF, is checked when it is closed.
func TestBodyCheckedOnClose(t *testing.T) {
	body := "{\"status\":1}\n"
	answer := recorder{200, http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(body))}}, body}
	fr := &failRecorder{TB: t}
	req := httptest.NewRequest("GET", "http://kmaterialize/healthz", nil)
	req.RequestURI = ""
	resp, err := Transport(fr, answer).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Status any }
	if err := json.NewDecoder(io.LimitReader(resp.Body, int64(len(body)))).Decode(&v); err != nil {
		t.Fatal(err)
	}
	if len(fr.errs) != 0 {
		t.Fatalf("checked before Close: %v", fr.errs)
	}
	resp.Body.Close()
	if len(fr.errs) != 1 {
		t.Fatalf("Close checked %d times, want one failure: %v", len(fr.errs), fr.errs)
	}
}
