package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/internal/apitest"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/serve"
	"github.com/kmaterialize/kmaterialize/store"
)

var broker *localkafka.Broker

// validated makes cl fail t on an answer that does not match the OpenAPI
// document (apitest.Transport).
func validated(t testing.TB, cl *client.Client) *client.Client {
	client.WrapTransport(cl, func(rt http.RoundTripper) http.RoundTripper { return apitest.Transport(t, rt) })
	return cl
}

func TestMain(m *testing.M) { os.Exit(localkafka.RunTests(m, &broker)) }

var seq atomic.Int64

// fixture is a daemon (serve.Server, in this process) keeping table "t"
// built from a topic of the test broker, and a client of its socket. Each
// build waits for a token on gate when gate is not nil.
type fixture struct {
	topic string
	cl    *client.Client
	gate  chan struct{}
	// produced is closed by the first produce: the daemon's first build
	// waits for it, or it could capture the topic's end before the test's
	// records are there and publish an empty table.
	produced     chan struct{}
	producedOnce sync.Once
}

func newFixture(t *testing.T, gated bool) *fixture { return newFixtureTCP(t, gated, "", "") }

// newFixtureTCP is newFixture with the daemon also on TCP address listen
// ("" for none) with admin token token.
func newFixtureTCP(t *testing.T, gated bool, listen, token string) *fixture {
	t.Helper()
	return newFixtureWith(t, gated, listen, token, nil)
}

// newFixtureWith is newFixtureTCP with tweak (if not nil) applied to the
// daemon's Config.
func newFixtureWith(t *testing.T, gated bool, listen, token string, tweak func(*serve.Config)) *fixture {
	t.Helper()
	// Kafka's topic names are [a-zA-Z0-9._-] (a subtest's name has '/').
	name := regexp.MustCompile(`[^a-zA-Z0-9._-]+`).ReplaceAllString(t.Name(), "-")
	f := &fixture{topic: fmt.Sprintf("client-%s-%d-%d", name, os.Getpid(), seq.Add(1)), produced: make(chan struct{})}
	broker.TestTopic(t, f.topic, 1, nil)
	if gated {
		f.gate = make(chan struct{}, 10)
	}
	sockDir, err := os.MkdirTemp("", "kmc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	cfg := serve.Config{
		DBPath: filepath.Join(t.TempDir(), "t.db"),
		Socket: filepath.Join(sockDir, "api.sock"),
		Listen: listen, AdminToken: token,
		Tables: []serve.Table{{Name: "t", Topic: f.topic, Fold: "latest",
			Build: func(ctx context.Context, db *store.DB, log zerolog.Logger) (materialize.Report, error) {
				select {
				case <-f.produced:
				case <-ctx.Done():
					return materialize.Report{}, ctx.Err()
				}
				if f.gate != nil {
					select {
					case <-f.gate:
					case <-ctx.Done():
						return materialize.Report{}, ctx.Err()
					}
				}
				return materialize.Rebuild(ctx, materialize.Options{DB: db, Table: "t", Log: log,
					Replay: replay.Config{Brokers: broker.Addr, Topic: f.topic, StallTimeout: 20 * time.Second, Log: log}})
			}}},
		ExitCode: func(err error) int {
			if err != nil {
				return 1
			}
			return 0
		},
		Log: log,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := serve.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, errc := make(chan struct{}), make(chan error, 1)
	go func() { errc <- s.Run(ctx, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-errc:
		t.Fatalf("Run: %v", err)
	}
	f.cl = validated(t, client.Dial(filepath.Join(sockDir, "api.sock")))
	t.Cleanup(func() {
		f.cl.Close()
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return f
}

// produce writes kv (key, value pairs; a "" value is a tombstone) and
// folds them into o, the oracle.
func (f *fixture) produce(t *testing.T, o map[string]string, kv ...string) {
	t.Helper()
	var recs []localkafka.Record
	for i := 0; i < len(kv); i += 2 {
		r := localkafka.Record{Key: []byte(kv[i])}
		if kv[i+1] != "" {
			r.Value = []byte(kv[i+1])
			o[kv[i]] = kv[i+1]
		} else {
			delete(o, kv[i])
		}
		recs = append(recs, r)
	}
	if _, err := broker.Produce(context.Background(), f.topic, recs); err != nil {
		t.Fatal(err)
	}
	f.producedOnce.Do(func() { close(f.produced) })
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// awaitReady polls Readyz until the daemon says ready, then Table until
// the first build's run has ended too (readiness comes with the publish,
// a moment before the daemon marks the run ended).
func awaitReady(t *testing.T, cl *client.Client) client.Readiness {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := cl.Readyz(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if r.Ready {
			if len(r.Tables) != 1 || r.Tables[0].Name != "t" {
				t.Fatalf("Readyz: %+v, want table t", r)
			}
			awaitGeneration(t, cl, 0)
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %+v", r)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClient reads a table through every read method and checks it against
// the oracle: Get (keys with '/', "..", bytes that are not UTF-8), Rows in
// small pages (utf-8 and base64), Export; and the typed errors of absent
// keys and tables and of a value that is not UTF-8.
func TestClient(t *testing.T) {
	f := newFixture(t, false)
	want := map[string]string{}
	var kv []string
	for i := 0; i < 53; i++ {
		kv = append(kv, fmt.Sprintf("k%03d", i%40), fmt.Sprintf("v%d", i))
	}
	kv = append(kv, "k007", "", "a/b", "slash", "..", "dotdot", "sp ace%", "space", "\xff-bin", "binary key")
	f.produce(t, want, kv...)
	awaitReady(t, f.cl)
	if err := f.cl.Healthz(ctx(t)); err != nil {
		t.Fatal(err)
	}

	tb, err := f.cl.Table(ctx(t), "t")
	if err != nil || tb.Generation == 0 || tb.Keys != int64(len(want)) || tb.State != client.StateReady || tb.Records != int64(len(kv)/2) || len(tb.Partitions) != 1 || tb.BuiltAt.IsZero() {
		t.Fatalf("Table: %+v, %v; want ready with %d keys from %d records", tb, err, len(want), len(kv)/2)
	}
	ts, err := f.cl.Tables(ctx(t))
	if err != nil || len(ts) != 1 || ts[0].Name != "t" || ts[0].Generation != tb.Generation {
		t.Fatalf("Tables: %+v, %v", ts, err)
	}

	for k, v := range want {
		got, gen, err := f.cl.Get(ctx(t), "t", []byte(k))
		if err != nil || string(got) != v || gen != tb.Generation {
			t.Fatalf("Get %q: %q, generation %d, %v; oracle %q, generation %d", k, got, gen, err, v, tb.Generation)
		}
	}
	var ce *client.Error
	if _, _, err := f.cl.Get(ctx(t), "t", []byte("k007")); !errors.As(err, &ce) || ce.Status != 404 || ce.Code != client.CodeKeyNotFound {
		t.Fatalf("Get of a deleted key: %v, want 404 %s", err, client.CodeKeyNotFound)
	}
	if _, _, err := f.cl.Get(ctx(t), "nope", []byte("k001")); !client.IsCode(err, client.CodeTableNotFound) {
		t.Fatalf("Get of an unknown table: %v, want %s", err, client.CodeTableNotFound)
	}
	if _, err := f.cl.Table(ctx(t), "nope"); !client.IsCode(err, client.CodeTableNotFound) {
		t.Fatalf("Table of an unknown table: %v", err)
	}

	// Rows in pages of 7, base64 (the table has a key that is not UTF-8).
	var keys []string
	got := map[string]string{}
	gen, err := f.cl.Rows(ctx(t), "t", client.RowsOptions{PageSize: 7, Base64: true}, func(r client.Row) error {
		keys = append(keys, string(r.Key))
		got[string(r.Key)] = string(r.Value)
		return nil
	})
	if err != nil || gen != tb.Generation {
		t.Fatalf("Rows: generation %d, %v", gen, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Rows vs the oracle (-want +got):\n%s", diff)
	}
	if !sort.StringsAreSorted(keys) || len(keys) != len(want) {
		t.Fatalf("Rows: keys not in order or repeated: %q", keys)
	}
	// UTF-8, a prefix and a limit across pages: each Line is the row as
	// scan --format jsonl prints it.
	var lines []string
	if _, err := f.cl.Rows(ctx(t), "t", client.RowsOptions{Prefix: []byte("k0"), Limit: 15, PageSize: 4}, func(r client.Row) error {
		l, _ := json.Marshal(struct {
			Key   string `json:"key"`
			Value string `json:"value"`
		}{string(r.Key), string(r.Value)})
		if string(r.Line) != string(l)+"\n" {
			t.Errorf("Line %q, want %q", r.Line, l)
		}
		lines = append(lines, string(r.Key))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var wantK []string
	for _, k := range keys {
		if len(k) > 1 && k[:2] == "k0" && len(wantK) < 15 {
			wantK = append(wantK, k)
		}
	}
	if diff := cmp.Diff(wantK, lines); diff != "" {
		t.Fatalf("Rows with prefix k0, limit 15 (-want +got):\n%s", diff)
	}
	// A limit above the most rows a page may have (a scan --limit 20000)
	// is paged, not sent as is: every row.
	n := 0
	if _, err := f.cl.Rows(ctx(t), "t", client.RowsOptions{Limit: 20000, PageSize: 50000, Base64: true}, func(client.Row) error { n++; return nil }); err != nil || n != len(want) {
		t.Fatalf("Rows with limit 20000: %d rows, %v; want %d", n, err, len(want))
	}
	// Without base64 the key that is not UTF-8 fails the page: 422.
	if _, err := f.cl.Rows(ctx(t), "t", client.RowsOptions{}, func(client.Row) error { return nil }); !client.IsCode(err, client.CodeNotUTF8) {
		t.Fatalf("Rows of a table with a key that is not UTF-8: %v, want %s", err, client.CodeNotUTF8)
	}

	// Export: nothing written on 422; with base64 a document whose rows
	// are the oracle's.
	var buf bytes.Buffer
	if _, err := f.cl.Export(ctx(t), "t", client.ExportOptions{}, &buf); !client.IsCode(err, client.CodeNotUTF8) || buf.Len() != 0 {
		t.Fatalf("Export without base64: %v, %d bytes written", err, buf.Len())
	}
	gen, err = f.cl.Export(ctx(t), "t", client.ExportOptions{Base64: true}, &buf)
	if err != nil || gen != tb.Generation {
		t.Fatalf("Export: generation %d, %v", gen, err)
	}
	var doc struct {
		Table    string `json:"table"`
		Encoding string `json:"encoding"`
		Rows     any    `json:"rows"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil || doc.Table != "t" || doc.Encoding != "base64" || doc.Rows == nil {
		t.Fatalf("Export document: %v, %.300s", err, buf.String())
	}

	// Nobody on a socket: ErrUnreachable.
	dead := validated(t, client.Dial(filepath.Join(t.TempDir(), "none.sock")))
	defer dead.Close()
	if err := dead.Healthz(ctx(t)); !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("Healthz of no daemon: %v, want ErrUnreachable", err)
	}
}

// TestClientRowsPinnedAndRebuild: a publish between two pages of Rows makes
// the next page fail with generation_gone (409) instead of mixing two
// generations, and the rows seen are all of the first; a rebuild requested
// while one runs is 409 run_in_progress; Rebuild with wait reports the new
// generation, which Rows then reads whole.
func TestClientRowsPinnedAndRebuild(t *testing.T) {
	f := newFixture(t, true)
	old := map[string]string{}
	var kv []string
	for i := 0; i < 30; i++ {
		kv = append(kv, fmt.Sprintf("k%03d", i), "old")
	}
	f.produce(t, old, kv...)
	// The first build waits at the gate: not ready, and reads are 503.
	if r, err := f.cl.Readyz(ctx(t)); err != nil || r.Ready || len(r.Tables) != 1 || r.Tables[0].Name != "t" || r.Tables[0].Reason == "" {
		t.Fatalf("Readyz before the first build: %+v, %v; want not ready naming t and why", r, err)
	}
	var nr *client.Error
	if _, _, err := f.cl.Get(ctx(t), "t", []byte("k001")); !errors.As(err, &nr) || nr.Status != 503 || nr.Code != client.CodeTableNotReady || nr.RetryAfter <= 0 {
		t.Fatalf("Get before the first build: %v, want 503 %s with Retry-After", err, client.CodeTableNotReady)
	}
	f.gate <- struct{}{} // the first build
	awaitReady(t, f.cl)
	tb, err := f.cl.Table(ctx(t), "t")
	if err != nil {
		t.Fatal(err)
	}
	cur := map[string]string{}
	for k, v := range old {
		cur[k] = v
	}
	f.produce(t, cur, "k000", "new", "k029", "new", "k100", "new")

	// A run held at the gate: a second request is 409.
	started, err := f.cl.Rebuild(ctx(t), "t", false)
	if err != nil || started.Done || started.Run == 0 {
		t.Fatalf("Rebuild without wait: %+v, %v", started, err)
	}
	var ce *client.Error
	if _, err := f.cl.Rebuild(ctx(t), "t", true); !errors.As(err, &ce) || ce.Status != 409 || ce.Code != client.CodeRunInProgress || ce.Run != started.Run {
		t.Fatalf("Rebuild while run %d runs: %v, want 409 %s naming it", started.Run, err, client.CodeRunInProgress)
	}

	// Page 1 (10 rows) from the old generation; the run publishes; the
	// next page is refused.
	seen := map[string]string{}
	rows := 0
	_, err = f.cl.Rows(ctx(t), "t", client.RowsOptions{PageSize: 10}, func(r client.Row) error {
		seen[string(r.Key)] = string(r.Value)
		rows++
		if rows == 10 {
			f.gate <- struct{}{}
			awaitGeneration(t, f.cl, tb.Generation)
		}
		return nil
	})
	if !errors.As(err, &ce) || ce.Status != 409 || ce.Code != client.CodeGenerationGone {
		t.Fatalf("Rows across a publish: %v after %d rows, want 409 %s", err, rows, client.CodeGenerationGone)
	}
	for k, v := range seen {
		if old[k] != v {
			t.Fatalf("Rows across a publish: row %s=%s is not of the first generation", k, v)
		}
	}
	if rows != 10 {
		t.Fatalf("Rows across a publish: %d rows before the error, want the first page's 10", rows)
	}

	// Rebuild with wait: the new generation, read whole.
	f.gate <- struct{}{}
	f.produce(t, cur, "k001", "")
	res, err := f.cl.Rebuild(ctx(t), "t", true)
	if err != nil || !res.Done || res.ExitCode != 0 || res.Error != "" || res.Generation <= tb.Generation {
		t.Fatalf("Rebuild with wait: %+v, %v", res, err)
	}
	got := map[string]string{}
	gen, err := f.cl.Rows(ctx(t), "t", client.RowsOptions{PageSize: 3}, func(r client.Row) error {
		got[string(r.Key)] = string(r.Value)
		return nil
	})
	if err != nil || gen != res.Generation {
		t.Fatalf("Rows after the rebuild: generation %d, %v; want %d", gen, err, res.Generation)
	}
	if diff := cmp.Diff(cur, got); diff != "" {
		t.Fatalf("Rows after the rebuild vs the oracle (-want +got):\n%s", diff)
	}
}

// awaitGeneration polls Table until the published generation is past gen.
func awaitGeneration(t *testing.T, cl *client.Client, gen uint64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		tb, err := cl.Table(ctx(t), "t")
		if err != nil {
			t.Fatal(err)
		}
		if tb.Generation > gen && tb.Run == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("generation still %d (state %s, last error %+v)", tb.Generation, tb.State, tb.LastError)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClientTCP: DialURL reads over the TCP listener; a rebuild there
// without the admin token is 403 forbidden, with it the run happens.
func TestClientTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // the daemon listens there next
	token := fmt.Sprintf("token-%d", seq.Add(1))
	f := newFixtureTCP(t, false, addr, token)
	want := map[string]string{}
	f.produce(t, want, "a", "1", "b", "2")
	awaitReady(t, f.cl)

	anon, err := client.DialURL("http://"+addr, "")
	if err != nil {
		t.Fatal(err)
	}
	validated(t, anon)
	defer anon.Close()
	v, _, err := anon.Get(ctx(t), "t", []byte("b"))
	if err != nil || string(v) != "2" {
		t.Fatalf("Get over TCP: %q, %v", v, err)
	}
	var ce *client.Error
	if _, err := anon.Rebuild(ctx(t), "t", true); !errors.As(err, &ce) || ce.Status != 403 || ce.Code != client.CodeForbidden {
		t.Fatalf("Rebuild over TCP without the token: %v, want 403 %s", err, client.CodeForbidden)
	}
	admin, err := client.DialURL("http://"+addr+"/", token)
	if err != nil {
		t.Fatal(err)
	}
	validated(t, admin)
	defer admin.Close()
	f.produce(t, want, "a", "")
	res, err := admin.Rebuild(ctx(t), "t", true)
	if err != nil || res.ExitCode != 0 || !res.Done {
		t.Fatalf("Rebuild over TCP with the token: %+v, %v", res, err)
	}
	if _, _, err := admin.Get(ctx(t), "t", []byte("a")); !client.IsCode(err, client.CodeKeyNotFound) {
		t.Fatalf("Get of a key deleted before the rebuild: %v", err)
	}
	if _, err := client.DialURL("unix:///x.sock", ""); err == nil {
		t.Fatal("DialURL accepted a unix URL")
	}
}
