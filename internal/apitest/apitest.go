package apitest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/kmaterialize/kmaterialize/api"
)

// muxPatterns maps the document's paths whose last parameter takes the rest
// of the path to the daemon mux's pattern.
var muxPatterns = map[string]string{
	"/v1/tables/{table}/keys/{key}": "/v1/tables/{table}/keys/{key...}",
}

// maxBody bounds the bytes of a body that is validated: a larger answer
// (an export of a large table) is checked up to its headers.
const maxBody = 64 << 20

// Operation is one route of the document: a method and a path in the
// daemon mux's syntax.
type Operation struct {
	Method, Path string
}

// spec is the loaded document and the mux that routes requests to its
// operations.
type spec struct {
	doc *openapi3.T
	mux *http.ServeMux
	ops []Operation
}

var (
	loadOnce sync.Once
	loaded   *spec
	loadErr  error
)

// load parses and validates api.OpenAPI once.
func load() (*spec, error) {
	loadOnce.Do(func() {
		openapi3filter.RegisterBodyDecoder("application/x-ndjson", ndjsonDecoder)
		loaded, loadErr = parse(api.OpenAPI)
	})
	return loaded, loadErr
}

func parse(b []byte) (*spec, error) {
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		return nil, fmt.Errorf("load api/openapi.json: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("api/openapi.json is not a valid OpenAPI document: %w", err)
	}
	s := &spec{doc: doc, mux: http.NewServeMux()}
	for path, item := range doc.Paths.Map() {
		pattern := path
		if p, ok := muxPatterns[path]; ok {
			pattern = p
		}
		for method, op := range item.Operations() {
			s.ops = append(s.ops, Operation{Method: method, Path: pattern})
			route := &routers.Route{Spec: doc, Path: path, PathItem: item, Method: method, Operation: op}
			s.mux.HandleFunc(method+" "+pattern, func(w http.ResponseWriter, r *http.Request) {
				m := w.(*match)
				m.route, m.params = route, map[string]string{}
				for _, p := range append(item.Parameters, op.Parameters...) {
					if p.Value != nil && p.Value.In == openapi3.ParameterInPath {
						m.params[p.Value.Name] = r.PathValue(p.Value.Name)
					}
				}
			})
		}
	}
	sort.Slice(s.ops, func(i, j int) bool {
		if s.ops[i].Path != s.ops[j].Path {
			return s.ops[i].Path < s.ops[j].Path
		}
		return s.ops[i].Method < s.ops[j].Method
	})
	return s, nil
}

// match is the ResponseWriter a routing pass through spec.mux fills.
type match struct {
	httptest.ResponseRecorder
	route  *routers.Route
	params map[string]string
}

// find returns the operation of r, or nil when the document has none.
func (s *spec) find(r *http.Request) (*routers.Route, map[string]string) {
	m := &match{ResponseRecorder: *httptest.NewRecorder()}
	probe := r.Clone(r.Context())
	probe.Body = http.NoBody
	s.mux.ServeHTTP(m, probe)
	return m.route, m.params
}

// Operations lists the document's operations, sorted by path and method,
// with paths in the daemon mux's syntax ("{key...}" where the document
// has "{key}"). It panics if the document does not load: the tests of
// this package say why.
func Operations() []Operation {
	s, err := load()
	if err != nil {
		panic(err)
	}
	return append([]Operation(nil), s.ops...)
}

// Transport returns a RoundTripper that sends each request through base
// (http.DefaultTransport when nil) and fails t, naming the method, path
// and status, when the request or its answer does not match the document
// (the package doc says what a mismatch is).
func Transport(t testing.TB, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	s, err := load()
	if err != nil {
		t.Fatal(err)
	}
	return &transport{t: t, base: base, spec: s}
}

type transport struct {
	t    testing.TB
	base http.RoundTripper
	spec *spec
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	route, params := tr.spec.find(req)
	var in *openapi3filter.RequestValidationInput
	var reqErr error
	if route != nil {
		probe := req.Clone(req.Context())
		probe.Body = http.NoBody
		if req.GetBody != nil {
			// A body the request can send again (bytes, strings): the
			// document checks it too.
			if b, err := req.GetBody(); err == nil {
				probe.Body = b
			}
		}
		in = &openapi3filter.RequestValidationInput{Request: probe, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}}
		reqErr = openapi3filter.ValidateRequest(req.Context(), in)
	}
	resp, err := tr.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	fail := func(format string, args ...any) {
		tr.t.Errorf("apitest: %s %s: %d: %s", req.Method, req.URL.RequestURI(), resp.StatusCode, fmt.Sprintf(format, args...))
	}
	if serverRefused(resp) {
		return resp, nil
	}
	if route == nil {
		tr.unrouted(resp, fail)
		return resp, nil
	}
	if reqErr != nil && (resp.StatusCode < 400 || resp.StatusCode >= 500) {
		fail("the document rejects the request (%v), the daemon accepted it", reqErr)
	}
	head := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: true}}
	if err := openapi3filter.ValidateResponse(req.Context(), head); err != nil {
		fail("%v", err)
		return resp, nil
	}
	resp.Body = &checkedBody{body: resp.Body, length: resp.ContentLength, check: func(body []byte) {
		full := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
			Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
		full.SetBodyBytes(body)
		if err := openapi3filter.ValidateResponse(context.Background(), full); err != nil {
			fail("%v", err)
		}
	}}
	return resp, nil
}

// serverRefused reports whether resp is net/http's own answer to a request
// its server refused before any handler ran (431 for headers past
// MaxHeaderBytes, 400 for a malformed request or plain HTTP to a TLS
// listener): not JSON, and the connection closed. Those are the HTTP
// server's, on any path, not the API's.
func serverRefused(resp *http.Response) bool {
	return (resp.StatusCode == http.StatusRequestHeaderFieldsTooLarge || resp.StatusCode == http.StatusBadRequest) &&
		resp.Close && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json")
}

// unrouted checks the answer to a request the document has no route for:
// the mux's JSON 404 or 405, a redirect, or, on the TCP listener, whose
// token check runs before routing, a 401 or 403.
func (tr *transport) unrouted(resp *http.Response, fail func(string, ...any)) {
	want := map[int]string{http.StatusNotFound: "route_not_found", http.StatusMethodNotAllowed: "method_not_allowed",
		http.StatusUnauthorized: "unauthorized", http.StatusForbidden: "forbidden"}
	switch code, ok := want[resp.StatusCode]; {
	case resp.StatusCode == http.StatusMovedPermanently || resp.StatusCode == http.StatusTemporaryRedirect || resp.StatusCode == http.StatusPermanentRedirect:
	case !ok:
		fail("the document has no route for the request, the daemon answered it")
	default:
		resp.Body = &checkedBody{body: resp.Body, length: resp.ContentLength, check: func(body []byte) {
			var e struct {
				Error string `json:"error"`
				Code  string `json:"code"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Code != code || e.Error == "" {
				fail("want an error with code %s, got %q", code, body)
			}
		}}
	}
}

// checkedBody passes the answer's body through, keeping a copy of up to
// maxBody bytes, and calls check with it once, when the reader reaches its
// end.
type checkedBody struct {
	body    io.ReadCloser
	length  int64 // the Content-Length, -1 when unknown
	buf     bytes.Buffer
	tooLong bool
	checked bool
	check   func([]byte)
}

func (c *checkedBody) Read(p []byte) (int, error) {
	n, err := c.body.Read(p)
	if !c.tooLong {
		if c.buf.Len()+n > maxBody {
			c.tooLong, c.buf = true, bytes.Buffer{}
		} else {
			c.buf.Write(p[:n])
		}
	}
	if errors.Is(err, io.EOF) && !c.checked && !c.tooLong {
		c.checked = true
		c.check(c.buf.Bytes())
	}
	return n, err
}

// Close checks a body read to its Content-Length but not to EOF (a JSON
// decoder stops at the value's end) before closing it.
func (c *checkedBody) Close() error {
	if !c.checked && !c.tooLong && c.length >= 0 && int64(c.buf.Len()) == c.length {
		c.checked = true
		c.check(c.buf.Bytes())
	}
	return c.body.Close()
}

// ndjsonDecoder decodes a body of JSON lines into the array of its lines'
// values (the package doc's convention).
func ndjsonDecoder(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	lines := []any{}
	if len(data) == 0 {
		return lines, nil
	}
	if data[len(data)-1] != '\n' {
		return nil, errors.New("JSON lines: the body does not end with a newline")
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			return nil, fmt.Errorf("JSON lines: line %d is blank", n)
		}
		var v any
		if err := json.Unmarshal(line, &v); err != nil {
			return nil, fmt.Errorf("JSON lines: line %d: %w", n, err)
		}
		lines = append(lines, v)
	}
	return lines, sc.Err()
}

// CloseIdleConnections closes base's idle connections, so that
// http.Client.CloseIdleConnections reaches them through the wrapper.
func (tr *transport) CloseIdleConnections() {
	if c, ok := tr.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
