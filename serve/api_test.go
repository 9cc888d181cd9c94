package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/exportdoc"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/store"
)

// TestAPIContract checks every route and status of the API against the
// oracle tables of the produced records: a ready table (main), a table with
// a value that is not UTF-8 (raw), and a configured table whose first build
// never ends during the test (pending).
func TestAPIContract(t *testing.T) {
	mainTopic, rawTopic := newTopic(t), newTopic(t)
	recs := append(records(1, 300, 50), localkafka.Record{Key: []byte("a/b"), Value: []byte("slash")},
		localkafka.Record{Key: []byte("sp ace%"), Value: []byte("")})
	produce(t, mainTopic, recs)
	want := latestOracle(nil, recs)
	rawRecs := []localkafka.Record{{Key: []byte("ok"), Value: []byte("fine")}, {Key: []byte("bin"), Value: []byte("\xff\xfe")}}
	produce(t, rawTopic, rawRecs)

	gate := make(chan struct{})
	defer close(gate)
	pending := Table{Name: "pending", Topic: "nowhere", Fold: "latest",
		Build: func(ctx context.Context, db *store.DB, log zerolog.Logger) (materialize.Report, error) {
			select {
			case <-gate:
			case <-ctx.Done():
			}
			return materialize.Report{}, fmt.Errorf("pending never builds: %w", context.Canceled)
		}}
	cfg := baseConfig(t, kafkaTable("main", mainTopic, nil), kafkaTable("raw", rawTopic, nil), pending)
	cfg.MaxConcurrentRuns = 3 // pending never ends: the others must not queue behind it
	d := start(t, cfg)
	c := d.c
	waitFor(t, "main and raw published", 60*time.Second, func() bool {
		return c.table(t, "main").State == StateReady && c.table(t, "raw").State == StateReady
	})
	mainGen := c.get(t, "/v1/tables/main/rows?limit=1").gen(t)
	hw := marksOf(t, mainTopic)[0].High

	type check func(t *testing.T, r response)
	body := func(want string) check {
		return func(t *testing.T, r response) {
			if string(r.body) != want {
				t.Fatalf("body %q, want %q", r.body, want)
			}
			if r.gen(t) != mainGen {
				t.Fatalf("generation %d, want %d", r.gen(t), mainGen)
			}
		}
	}
	long := strings.Repeat("x", maxNameLen+1)
	cases := []struct {
		name, method, path string
		hdr                http.Header
		status             int
		code               string // for errors
		check              check
	}{
		{name: "list", method: "GET", path: "/v1/tables", status: 200, check: func(t *testing.T, r response) {
			var l struct{ Tables []tableJSON }
			if err := json.Unmarshal(r.body, &l); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tj := range l.Tables {
				names = append(names, tj.Name+":"+tj.State)
			}
			if diff := cmp.Diff([]string{"main:ready", "pending:building", "raw:ready"}, names); diff != "" {
				t.Fatalf("tables (-want +got):\n%s", diff)
			}
		}},
		{name: "table", method: "GET", path: "/v1/tables/main", status: 200, check: func(t *testing.T, r response) {
			var tj map[string]any
			if err := json.Unmarshal(r.body, &tj); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"name", "topic", "fold", "state", "generation", "keys", "built_at", "took_ms", "records", "skipped", "partitions", "last_error", "next_run"} {
				if _, ok := tj[f]; !ok {
					t.Errorf("field %q missing from %s", f, r.body)
				}
			}
			if tj["name"] != "main" || tj["topic"] != mainTopic || tj["fold"] != "latest" || tj["state"] != StateReady ||
				tj["generation"] != float64(mainGen) || tj["keys"] != float64(len(want)) || tj["records"] != float64(len(recs)) ||
				tj["skipped"] != float64(0) || tj["last_error"] != nil || tj["next_run"] != nil {
				t.Errorf("table %s: want main/%s/latest ready, generation %d, %d keys, %d records", r.body, mainTopic, mainGen, len(want), len(recs))
			}
			if _, err := time.Parse(time.RFC3339, tj["built_at"].(string)); err != nil {
				t.Errorf("built_at: %v", err)
			}
			wantParts := []any{map[string]any{"partition": float64(0), "low": float64(0), "start": float64(0), "high": float64(hw), "end": float64(hw)}}
			if diff := cmp.Diff(wantParts, tj["partitions"]); diff != "" {
				t.Errorf("partitions (-broker +got):\n%s", diff)
			}
		}},
		{name: "table building", method: "GET", path: "/v1/tables/pending", status: 200, check: func(t *testing.T, r response) {
			var tj map[string]any
			json.Unmarshal(r.body, &tj)
			if tj["state"] != StateBuilding || tj["generation"] != nil || tj["run"] == nil {
				t.Fatalf("pending: %s", r.body)
			}
		}},
		{name: "table unknown", method: "GET", path: "/v1/tables/nope", status: 404, code: api.CodeTableNotFound},
		{name: "table name too long", method: "GET", path: "/v1/tables/" + long, status: 400, code: api.CodeBadTableName},
		{name: "table name control char", method: "GET", path: "/v1/tables/a%01b", status: 400, code: api.CodeBadTableName},
		{name: "key", method: "GET", path: "/v1/tables/main/keys/k007", status: 200, check: body(want["k007"])},
		{name: "key with slash", method: "GET", path: "/v1/tables/main/keys/a%2Fb", status: 200, check: body("slash")},
		{name: "key percent-encoded, empty value", method: "GET", path: "/v1/tables/main/keys/" + url.PathEscape("sp ace%"), status: 200, check: body("")},
		{name: "key absent", method: "GET", path: "/v1/tables/main/keys/zzz", status: 404, code: api.CodeKeyNotFound},
		{name: "key of unknown table", method: "GET", path: "/v1/tables/nope/keys/k007", status: 404, code: api.CodeTableNotFound},
		{name: "key never published", method: "GET", path: "/v1/tables/pending/keys/k007", status: 503, code: api.CodeTableNotReady, check: func(t *testing.T, r response) {
			if r.header.Get("Retry-After") == "" {
				t.Fatal("no Retry-After")
			}
		}},
		{name: "rows prefix", method: "GET", path: "/v1/tables/main/rows?prefix=k00&limit=3", status: 200, check: func(t *testing.T, r response) {
			var lines []string
			for _, k := range sortedKeys(want) {
				if strings.HasPrefix(k, "k00") && len(lines) < 3 {
					b, _ := json.Marshal(map[string]string{"key": k, "value": want[k]})
					lines = append(lines, string(b)+"\n")
				}
			}
			if string(r.body) != strings.Join(lines, "") || r.header.Get(HeaderMore) != "true" {
				t.Fatalf("body %q more %q, want %q", r.body, r.header.Get(HeaderMore), strings.Join(lines, ""))
			}
		}},
		{name: "rows limit 0", method: "GET", path: "/v1/tables/main/rows?limit=0", status: 400, code: api.CodeBadLimit},
		{name: "rows limit too big", method: "GET", path: "/v1/tables/main/rows?limit=10001", status: 400, code: api.CodeBadLimit},
		{name: "rows limit max", method: "GET", path: "/v1/tables/main/rows?limit=10000", status: 200},
		{name: "rows limit not a number", method: "GET", path: "/v1/tables/main/rows?limit=ten", status: 400, code: api.CodeBadLimit},
		{name: "rows bad generation", method: "GET", path: "/v1/tables/main/rows?generation=-1", status: 400, code: api.CodeBadGeneration},
		{name: "rows bad encoding", method: "GET", path: "/v1/tables/main/rows?encoding=hex", status: 400, code: api.CodeBadEncoding},
		{name: "rows unknown parameter", method: "GET", path: "/v1/tables/main/rows?format=tsv", status: 400, code: api.CodeBadRequest},
		{name: "rows generation not published", method: "GET", path: fmt.Sprintf("/v1/tables/main/rows?generation=%d", mainGen+1000), status: 409, code: api.CodeGenerationGone},
		{name: "rows not UTF-8", method: "GET", path: "/v1/tables/raw/rows", status: 422, code: api.CodeNotUTF8},
		{name: "rows base64", method: "GET", path: "/v1/tables/raw/rows?encoding=base64", status: 200, check: func(t *testing.T, r response) {
			b64 := base64.StdEncoding.EncodeToString
			w := fmt.Sprintf("{\"key\":%q,\"value\":%q}\n{\"key\":%q,\"value\":%q}\n", b64([]byte("bin")), b64([]byte("\xff\xfe")), b64([]byte("ok")), b64([]byte("fine")))
			if string(r.body) != w {
				t.Fatalf("body %q, want %q", r.body, w)
			}
		}},
		{name: "rows never published", method: "GET", path: "/v1/tables/pending/rows", status: 503, code: api.CodeTableNotReady},
		{name: "export", method: "GET", path: "/v1/tables/main/export", status: 200, check: func(t *testing.T, r response) {
			var doc struct {
				Table string
				Rows  map[string]string
			}
			if err := json.Unmarshal(r.body, &doc); err != nil || doc.Table != "main" {
				t.Fatalf("export %v: %.200s", err, r.body)
			}
			if diff := cmp.Diff(map[string]string(want), doc.Rows); diff != "" {
				t.Fatalf("export rows (-oracle +got):\n%s", diff)
			}
			// The same bytes as `kmaterialize export` (exportdoc.Write) of
			// the same generation.
			var cli bytes.Buffer
			if err := exportdoc.Write(d.s.db, "main", &cli, exportdoc.Options{}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(cli.Bytes(), r.body) || r.gen(t) != mainGen {
				t.Fatalf("export differs from exportdoc.Write's (generation %d)", r.gen(t))
			}
		}},
		{name: "export not UTF-8", method: "GET", path: "/v1/tables/raw/export", status: 422, code: api.CodeNotUTF8},
		{name: "export base64", method: "GET", path: "/v1/tables/raw/export?encoding=base64", status: 200, check: func(t *testing.T, r response) {
			var doc struct {
				Encoding string
				Rows     map[string]string
			}
			json.Unmarshal(r.body, &doc)
			b64 := base64.StdEncoding.EncodeToString
			if doc.Encoding != "base64" || doc.Rows[b64([]byte("bin"))] != b64([]byte("\xff\xfe")) || len(doc.Rows) != 2 {
				t.Fatalf("export %s", r.body)
			}
		}},
		{name: "export unknown table", method: "GET", path: "/v1/tables/nope/export", status: 404, code: api.CodeTableNotFound},
		{name: "rebuild unknown table", method: "POST", path: "/v1/tables/nope/rebuild", status: 404, code: api.CodeTableNotConfigured},
		{name: "rebuild with options", method: "POST", path: "/v1/tables/main/rebuild?from=0", status: 400, code: api.CodeBadRequest},
		{name: "rebuild bad wait", method: "POST", path: "/v1/tables/main/rebuild?wait=maybe", status: 400, code: api.CodeBadRequest},
		{name: "rebuild while building", method: "POST", path: "/v1/tables/pending/rebuild", status: 409, code: api.CodeRunInProgress},
		{name: "wrong method", method: "PUT", path: "/v1/tables/main", status: 405, code: api.CodeMethodNotAllowed},
		{name: "drop a configured table", method: "DELETE", path: "/v1/tables/main", status: 409, code: api.CodeTableConfigured},
		{name: "drop a missing table", method: "DELETE", path: "/v1/tables/nope", status: 404, code: api.CodeTableNotFound},
		{name: "count with a bad parameter", method: "GET", path: "/v1/tables/main/count?limit=3", status: 400, code: api.CodeBadRequest},
		{name: "rows keys_only bad", method: "GET", path: "/v1/tables/main/rows?keys_only=yes", status: 400, code: api.CodeBadRequest},
		{name: "GET on rebuild", method: "GET", path: "/v1/tables/main/rebuild", status: 405, code: api.CodeMethodNotAllowed},
		{name: "unknown route", method: "GET", path: "/v2/tables", status: 404, code: api.CodeRouteNotFound},
		{name: "huge header", method: "GET", path: "/healthz", hdr: http.Header{"X-Big": {strings.Repeat("h", 64<<10)}}, status: 431},
		{name: "healthz", method: "GET", path: "/healthz", status: 200},
		{name: "readyz not ready", method: "GET", path: "/readyz", status: 503, code: api.CodeNotReady, check: func(t *testing.T, r response) {
			e := r.apiErr(t)
			if len(e.Tables) != 1 || e.Tables[0].Name != "pending" || e.Tables[0].State != StateBuilding || e.Tables[0].Reason == "" {
				t.Fatalf("readyz tables %+v: want pending, building, with a reason", e.Tables)
			}
		}},
		{name: "metrics", method: "GET", path: "/metrics", status: 200, check: func(t *testing.T, r response) {
			for _, line := range []string{
				fmt.Sprintf("kmaterialize_table_generation{table=\"main\"} %d\n", mainGen),
				fmt.Sprintf("kmaterialize_table_keys{table=\"main\"} %d\n", len(want)),
				fmt.Sprintf("kmaterialize_rebuild_records_read_total{table=\"main\"} %d\n", len(recs)),
				"kmaterialize_rebuilds_total{outcome=\"success\",table=\"main\"} 1\n",
				"kmaterialize_rebuild_duration_seconds_count{outcome=\"success\",table=\"main\"} 1\n",
				"kmaterialize_rebuild_last_success_timestamp_seconds{table=\"main\"}",
				"kmaterialize_http_request_duration_seconds_count{code=\"200\",route=\"GET /v1/tables/{table}\"}",
				"kmaterialize_go_sched_latencies_seconds_bucket{le=\"+Inf\"}",
			} {
				if !bytes.Contains(r.body, []byte(line)) {
					t.Errorf("metrics lack %q", line)
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := c.do(t, tc.method, tc.path, tc.hdr)
			if r.status != tc.status {
				t.Fatalf("%s %s: status %d, want %d; body %.300s", tc.method, tc.path, r.status, tc.status, r.body)
			}
			if tc.code != "" {
				if e := r.apiErr(t); e.Code != tc.code {
					t.Fatalf("code %q, want %q (%s)", e.Code, tc.code, e.Error)
				}
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}

	// The whole table through the rows route, paged, against the oracle.
	got, gen, ok := c.scan(t, "main", 7)
	if !ok || gen != mainGen {
		t.Fatalf("scan: generation %d (ok %v), want %d", gen, ok, mainGen)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("rows (-oracle +got):\n%s", diff)
	}
	for _, k := range sortedKeys(want) {
		r := c.get(t, "/v1/tables/main/keys/"+url.PathEscape(k))
		if r.status != 200 || string(r.body) != want[k] || r.header.Get("Content-Type") != "application/octet-stream" {
			t.Fatalf("key %q: %d %q (%s), oracle %q", k, r.status, r.body, r.header.Get("Content-Type"), want[k])
		}
	}
	// A key the latest fold deleted (a tombstone) is absent.
	for _, r := range recs {
		if r.Value == nil {
			if _, present := want[string(r.Key)]; !present {
				if got := c.get(t, "/v1/tables/main/keys/"+string(r.Key)); got.status != 404 {
					t.Fatalf("deleted key %s: %d", r.Key, got.status)
				}
				break
			}
		}
	}

	// A rebuild request carries no options, not even in a body.
	resp, err := c.hc.Post(c.base+"/v1/tables/main/rebuild", "application/json", strings.NewReader(`{"from":"0"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if r := (response{status: resp.StatusCode, header: resp.Header, body: b}); r.status != 400 || r.apiErr(t).Code != api.CodeBadRequest {
		t.Fatalf("rebuild with a body: %d %s, want 400", r.status, b)
	}
	if tj := c.table(t, "main"); tj.Run != nil || *tj.Generation != mainGen {
		t.Fatalf("a refused rebuild request started run %+v", tj.Run)
	}

	// A path the Go client refuses to send: bad percent-encoding, sent raw.
	if status := rawStatus(t, d.s.cfg.Socket, "GET /v1/tables/main/keys/%zz HTTP/1.1\r\nHost: k\r\n\r\n"); status != 400 {
		t.Fatalf("bad percent-encoding: status %d, want 400", status)
	}
}

// rawStatus sends req as is over the unix socket and returns the status
// code of the answer.
func rawStatus(t *testing.T, sock, req string) int {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
