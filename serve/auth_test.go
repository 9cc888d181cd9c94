package serve

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/internal/apitest"
)

// bearer adds a fixed Authorization header to every request.
type bearer struct {
	auth string
	rt   http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", b.auth)
	return b.rt.RoundTrip(r)
}

// authClient is a TCP client whose every request carries auth as its
// Authorization header.
func authClient(t testing.TB, addr, auth string) *client {
	return &client{hc: &http.Client{Transport: apitest.Transport(t, bearer{auth: auth, rt: &http.Transport{}}), Timeout: 60 * time.Second}, base: "http://" + addr}
}

// TestRemoteListenerTokens: with allow_remote, every route but /healthz and
// /readyz answers 401 (WWW-Authenticate: Bearer, code unauthorized) without
// a token or with one the daemon does not know; the read token opens every
// read (rows equal to the oracle) and is 403 on POST and DELETE; the
// metrics token opens /metrics only; the admin token opens everything; the
// unix socket needs none.
func TestRemoteListenerTokens(t *testing.T) {
	topic := newTopic(t)
	recs := records(1, 60, 20)
	produce(t, topic, recs)
	want := latestOracle(nil, recs)
	const admin, read, metricsTok = "admin-tok-0123456789", "read-tok-0123456789", "metrics-tok-0123456789"
	cfg := baseConfig(t, kafkaTable("t", topic, nil))
	cfg.Listen, cfg.AllowRemote, cfg.AllowPlaintextTokens = "127.0.0.1:0", true, true
	cfg.AdminToken, cfg.ReadToken, cfg.MetricsToken = admin, read, metricsTok
	d := start(t, cfg)
	waitFor(t, "the first build", 60*time.Second, func() bool { return d.c.table(t, "t").State == StateReady })
	addr := d.s.TCPAddr().String()
	anon := tcpClient(t, addr)
	defer anon.hc.CloseIdleConnections()

	reads := []string{"/v1/tables", "/v1/tables/t", "/v1/tables/t/keys/k001", "/v1/tables/t/rows", "/v1/tables/t/export", "/v1/tables/t/count", "/v1/openapi.json", "/metrics", "/nope"}
	// Admin-only: what changes state, and the backup (it holds every
	// table) and the compaction.
	writes := []struct{ method, path string }{{"POST", "/v1/tables/t/rebuild"}, {"DELETE", "/v1/tables/t"}, {"POST", "/v1/tables/t/update"}, {"POST", "/v1/tables/t/rollback"},
		{"GET", "/v1/backup"}, {"POST", "/v1/compact"}}
	unauthorized := func(t *testing.T, c *client, method, path string, invalid bool) {
		t.Helper()
		r := c.do(t, method, path, nil)
		e := r.apiErr(t)
		ch := r.header.Get("WWW-Authenticate")
		if r.status != http.StatusUnauthorized || e.Code != api.CodeUnauthorized || !strings.HasPrefix(ch, "Bearer ") {
			t.Fatalf("%s %s: %d %q WWW-Authenticate %q, want 401 unauthorized with a Bearer challenge", method, path, r.status, r.body, ch)
		}
		if invalid != strings.Contains(ch, `error="invalid_token"`) {
			t.Fatalf("%s %s: WWW-Authenticate %q, invalid_token expected: %v", method, path, ch, invalid)
		}
		for _, tok := range []string{admin, read, metricsTok} {
			if strings.Contains(string(r.body), tok) || strings.Contains(ch, tok) {
				t.Fatalf("%s %s: the answer shows a token", method, path)
			}
		}
	}
	for _, p := range reads {
		unauthorized(t, anon, "GET", p, false)
	}
	for _, w := range writes {
		unauthorized(t, anon, w.method, w.path, false)
	}
	for _, auth := range []string{"Bearer wrong", "Bearer " + admin + "x", "Bearer " + read[:len(read)-1], "bearer nope"} {
		c := authClient(t, addr, auth)
		unauthorized(t, c, "GET", "/v1/tables", true)
		unauthorized(t, c, "POST", "/v1/tables/t/rebuild", true)
		c.hc.CloseIdleConnections()
	}
	// Not a bearer token at all: as if none was given.
	for _, auth := range []string{admin, "Basic " + admin, "Bearer"} {
		c := authClient(t, addr, auth)
		unauthorized(t, c, "GET", "/v1/tables", false)
		c.hc.CloseIdleConnections()
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if r := anon.get(t, p); r.status != 200 {
			t.Fatalf("GET %s without a token: %d %s, want 200", p, r.status, r.body)
		}
	}

	rc := authClient(t, addr, "Bearer "+read)
	defer rc.hc.CloseIdleConnections()
	rows, _, _ := rc.scan(t, "t", 7)
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Fatalf("rows with the read token (-oracle +got):\n%s", diff)
	}
	for _, p := range reads[:len(reads)-1] {
		if r := rc.get(t, p); r.status != 200 {
			t.Fatalf("GET %s with the read token: %d %s", p, r.status, r.body)
		}
	}
	if r := rc.get(t, "/nope"); r.status != http.StatusNotFound {
		t.Fatalf("GET /nope with the read token: %d, want 404 (past the token check)", r.status)
	}
	// Case-insensitive scheme (RFC 7235).
	if r := authClient(t, addr, "bearer "+read).get(t, "/v1/tables"); r.status != 200 {
		t.Fatalf("scheme in lower case: %d %s", r.status, r.body)
	}
	forbidden := func(c *client, method, path string) {
		t.Helper()
		r := c.do(t, method, path, nil)
		if e := r.apiErr(t); r.status != http.StatusForbidden || e.Code != api.CodeForbidden ||
			!strings.Contains(r.header.Get("WWW-Authenticate"), "insufficient_scope") {
			t.Fatalf("%s %s: %d %s WWW-Authenticate %q, want 403 forbidden, insufficient_scope", method, path, r.status, r.body, r.header.Get("WWW-Authenticate"))
		}
	}
	for _, w := range writes {
		forbidden(rc, w.method, w.path)
	}

	mc := authClient(t, addr, "Bearer "+metricsTok)
	defer mc.hc.CloseIdleConnections()
	if r := mc.get(t, "/metrics"); r.status != 200 || !strings.Contains(string(r.body), "kmaterialize_") {
		t.Fatalf("GET /metrics with the metrics token: %d %.200s", r.status, r.body)
	}
	for _, p := range reads[:len(reads)-2] {
		forbidden(mc, "GET", p)
	}
	forbidden(mc, "POST", "/v1/tables/t/rebuild")

	if tj := d.c.table(t, "t"); tj.Run != nil {
		t.Fatalf("a refused request started run %+v", tj.Run)
	}
	ac := authClient(t, addr, "Bearer "+admin)
	defer ac.hc.CloseIdleConnections()
	for _, p := range reads[:len(reads)-1] {
		if r := ac.get(t, p); r.status != 200 {
			t.Fatalf("GET %s with the admin token: %d %s", p, r.status, r.body)
		}
	}
	r := ac.do(t, "POST", "/v1/tables/t/rebuild?wait=1", nil)
	var res rebuildResult
	if r.status != 200 || json.Unmarshal(r.body, &res) != nil || res.ExitCode != 0 || res.Generation == nil {
		t.Fatalf("POST with the admin token: %d %s", r.status, r.body)
	}
	if g := d.c.table(t, "t").Generation; g == nil || *g != *res.Generation {
		t.Fatalf("the table's generation %v, want the admin's rebuild's %d", g, *res.Generation)
	}
	if r := d.c.do(t, "POST", "/v1/tables/t/rebuild?wait=1", nil); r.status != 200 {
		t.Fatalf("POST on the unix socket without a token: %d %s", r.status, r.body)
	}
	if r := ac.get(t, "/v1/backup"); r.status != 200 || int64(len(r.body)) != mustInt(t, r.header.Get("Content-Length")) {
		t.Fatalf("GET /v1/backup with the admin token: %d, %d bytes of %s", r.status, len(r.body), r.header.Get("Content-Length"))
	}
	if r := ac.do(t, "POST", "/v1/compact", nil); r.status != 200 {
		t.Fatalf("POST /v1/compact with the admin token: %d %s", r.status, r.body)
	}
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}
