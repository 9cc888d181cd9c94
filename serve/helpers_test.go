package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/internal/apitest"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

var seq atomic.Int64

// unique returns a name no other test or run uses: the test's name,
// sanitized, and a counter and the process id.
func unique(t *testing.T, what string) string {
	name := regexp.MustCompile(`[^a-zA-Z0-9]+`).ReplaceAllString(t.Name(), "-")
	return fmt.Sprintf("%s-%s-%d-%d", what, name, os.Getpid(), seq.Add(1))
}

// oracle is the independent model of a latest table: a plain map.
type oracle map[string]string

// latestOracle folds recs (in offset order, one partition) as the latest
// fold promises: the last value of a key wins, a null value deletes it, a
// null key is skipped.
func latestOracle(base oracle, recs []localkafka.Record) oracle {
	o := oracle{}
	for k, v := range base {
		o[k] = v
	}
	for _, r := range recs {
		switch {
		case r.Key == nil:
		case r.Value == nil:
			delete(o, string(r.Key))
		default:
			o[string(r.Key)] = string(r.Value)
		}
	}
	return o
}

// records returns n records over keys k000..k(keys-1) with values naming
// the round, every seventh a tombstone.
func records(round, n, keys int) []localkafka.Record {
	recs := make([]localkafka.Record, n)
	for i := range recs {
		k := []byte(fmt.Sprintf("k%03d", (i*7+round)%keys))
		var v []byte
		if i%7 != 3 {
			v = []byte(fmt.Sprintf("r%d-v%d", round, i))
		}
		recs[i] = localkafka.Record{Key: k, Value: v}
	}
	return recs
}

func produce(t *testing.T, topic string, recs []localkafka.Record) {
	t.Helper()
	if _, err := broker.Produce(context.Background(), topic, recs); err != nil {
		t.Fatal(err)
	}
}

// newTopic creates a topic of one partition with a name of its own and,
// on a real Kafka, deletes it when the test ends.
func newTopic(t *testing.T) string {
	t.Helper()
	topic := unique(t, "topic")
	broker.TestTopic(t, topic, 1, nil)
	return topic
}

// marksOf is each partition's marks of topic as the broker answers
// ListOffsets and Metadata (on kfake and on Kafka alike).
func marksOf(t testing.TB, topic string) map[int32]localkafka.Marks {
	t.Helper()
	m, err := broker.Marks(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// topicID is topic's ID as metadata reports it; the topic must exist.
func topicID(t testing.TB, topic string) [16]byte {
	t.Helper()
	id, exists, err := broker.TopicID(context.Background(), topic)
	if err != nil || !exists {
		t.Fatalf("topic %s: exists %v, err %v", topic, exists, err)
	}
	return id
}

// recreate deletes topic and creates it again with parts partitions, and
// returns its IDs before and after, asserting they differ. On kfake the
// delete and the create are one instant; Kafka deletes asynchronously, so
// there the topic is awaited gone first (a follower can see it missing
// meanwhile).
func recreate(t *testing.T, topic string, parts int32) (before, after [16]byte) {
	t.Helper()
	before = topicID(t, topic)
	if broker.Real() {
		if err := broker.DeleteTopic(context.Background(), topic); err != nil {
			t.Fatal(err)
		}
		if err := broker.CreateTopic(topic, parts, nil); err != nil {
			t.Fatal(err)
		}
	} else {
		if err := broker.Cluster.DeleteTopic(topic); err != nil {
			t.Fatal(err)
		}
		if err := broker.Cluster.CreateTopic(topic, parts, nil); err != nil {
			t.Fatal(err)
		}
	}
	after = topicID(t, topic)
	if before == after || after == ([16]byte{}) {
		t.Fatalf("topic ID %x, then %x: not recreated", before, after)
	}
	return before, after
}

// kafkaTable is a table built by materialize.Rebuild from topic on the
// test broker, with the librdkafka properties props.
func kafkaTable(name, topic string, props map[string]string) Table {
	return Table{
		Name: name, Topic: topic, Fold: "latest",
		Build: func(ctx context.Context, db *store.DB, log zerolog.Logger) (materialize.Report, error) {
			return materialize.Rebuild(ctx, materialize.Options{
				DB: db, Table: name, Log: log,
				Replay: replay.Config{Brokers: broker.Addr, Topic: topic, Props: props, StallTimeout: 20 * time.Second, BatchRecords: 10, Log: log},
			})
		},
	}
}

// smallFetches are localkafka.SmallFetches, copied: a rebuild then needs a
// fetch per batch, so a fetch can be parked in its middle.
func smallFetches() map[string]string {
	m := map[string]string{}
	for k, v := range localkafka.SmallFetches {
		m[k] = v
	}
	return m
}

// testExitCode is the CLI's mapping for the errors these tests cause (the
// real one lives in cmd/kmaterialize).
func testExitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, replay.ErrTopicNotFound), errors.Is(err, replay.ErrTopicDeleted), errors.Is(err, replay.ErrUnavailable):
		return 5
	case errors.Is(err, context.Canceled):
		return 4
	}
	return 1
}

// shortDir is a directory for sockets: t.TempDir() paths can pass the
// 108-byte limit of a unix socket path.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "kms")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// baseConfig is a Config for a fresh database with a socket in a short
// directory.
func baseConfig(t *testing.T, tables ...Table) Config {
	return Config{
		DBPath:   filepath.Join(t.TempDir(), "t.db"),
		Socket:   filepath.Join(shortDir(t), "api.sock"),
		Tables:   tables,
		ExitCode: testExitCode,
		Log:      zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	}
}

// daemon is a Server running in the test.
type daemon struct {
	s      *Server
	c      *client
	cancel context.CancelFunc
	errc   chan error
	done   bool
}

// start runs a Server for cfg until stop (or the test's end), and returns
// once its socket serves.
func start(t *testing.T, cfg Config) *daemon {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return startServer(t, s)
}

func startServer(t *testing.T, s *Server) *daemon {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{s: s, cancel: cancel, errc: make(chan error, 1), c: unixClient(t, s.cfg.Socket)}
	ready := make(chan struct{})
	go func() { d.errc <- s.Run(ctx, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-d.errc:
		cancel()
		t.Fatalf("Run: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the daemon did not become ready")
	}
	t.Cleanup(func() { d.stop(t) })
	return d
}

// stop ends Run and checks it returned nil.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	if d.done {
		return
	}
	d.done = true
	d.cancel()
	select {
	case err := <-d.errc:
		if err != nil {
			t.Errorf("Run returned %v, want nil", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	d.c.hc.CloseIdleConnections()
}

// client talks to the API over the unix socket (or TCP) with net/http.
type client struct {
	hc   *http.Client
	base string
}

// unixClient and tcpClient fail t on an answer that does not match the
// OpenAPI document (apitest.Transport).
func unixClient(t testing.TB, sock string) *client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}
	return &client{hc: &http.Client{Transport: apitest.Transport(t, tr), Timeout: 60 * time.Second}, base: "http://kmaterialize"}
}

func tcpClient(t testing.TB, addr string) *client {
	return &client{hc: &http.Client{Transport: apitest.Transport(t, &http.Transport{}), Timeout: 60 * time.Second}, base: "http://" + addr}
}

// response is one answer, read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) gen(t *testing.T) uint64 {
	t.Helper()
	g, err := strconv.ParseUint(r.header.Get(HeaderGeneration), 10, 64)
	if err != nil {
		t.Fatalf("%s header %q: %v", HeaderGeneration, r.header.Get(HeaderGeneration), err)
	}
	return g
}

// apiErr decodes an error body, checking its shape.
func (r response) apiErr(t *testing.T) apiError {
	t.Helper()
	var e apiError
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error response %d has Content-Type %q, body %q", r.status, ct, r.body)
	}
	if err := json.Unmarshal(r.body, &e); err != nil || e.Error == "" || e.Code == "" {
		t.Fatalf("error body %q (%v): want {\"error\", \"code\"}", r.body, err)
	}
	return e
}

func (c *client) do(t *testing.T, method, path string, hdr http.Header) response {
	t.Helper()
	req, err := http.NewRequest(method, c.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (c *client) get(t *testing.T, path string) response { return c.do(t, "GET", path, nil) }

// table returns GET /v1/tables/{name}, decoded.
func (c *client) table(t *testing.T, name string) tableJSON {
	t.Helper()
	r := c.get(t, "/v1/tables/"+url.PathEscape(name))
	if r.status != http.StatusOK {
		t.Fatalf("GET table %s: %d %s", name, r.status, r.body)
	}
	var tj tableJSON
	if err := json.Unmarshal(r.body, &tj); err != nil {
		t.Fatal(err)
	}
	return tj
}

// scan reads every row of table through the rows route, page by page
// (pinned to the first page's generation), decoding each line
// independently of the server's formatting. ok is false when the
// generation changed between pages (409).
func (c *client) scan(t *testing.T, table string, limit int) (rows oracle, gen uint64, ok bool) {
	t.Helper()
	rows = oracle{}
	after := ""
	for page := 0; ; page++ {
		q := url.Values{"limit": {strconv.Itoa(limit)}}
		if after != "" {
			q.Set("after", after)
		}
		if page > 0 {
			q.Set("generation", strconv.FormatUint(gen, 10))
		}
		r := c.get(t, "/v1/tables/"+url.PathEscape(table)+"/rows?"+q.Encode())
		if r.status == http.StatusConflict && page > 0 {
			if e := r.apiErr(t); e.Code != api.CodeGenerationGone {
				t.Fatalf("409 code %q", e.Code)
			}
			return nil, gen, false
		}
		if r.status != http.StatusOK {
			t.Fatalf("rows page %d: %d %s", page, r.status, r.body)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/x-ndjson" {
			t.Fatalf("rows Content-Type %q", ct)
		}
		g := r.gen(t)
		if page == 0 {
			gen = g
		} else if g != gen {
			t.Fatalf("page %d answered from generation %d, pinned %d", page, g, gen)
		}
		n := 0
		for _, line := range bytes.SplitAfter(r.body, []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			if line[len(line)-1] != '\n' {
				t.Fatalf("line %q does not end in a newline", line)
			}
			var kv map[string]string
			if err := json.Unmarshal(line, &kv); err != nil || len(kv) != 2 {
				t.Fatalf("line %q: %v; want {\"key\",\"value\"}", line, err)
			}
			if _, dup := rows[kv["key"]]; dup || kv["key"] <= after {
				t.Fatalf("key %q out of order or repeated (after %q)", kv["key"], after)
			}
			rows[kv["key"]] = kv["value"]
			after = kv["key"]
			n++
		}
		more := r.header.Get(HeaderMore) == "true"
		if n > limit || (more && n != limit) {
			t.Fatalf("page of %d rows with limit %d, more=%v", n, limit, more)
		}
		if !more {
			return rows, gen, true
		}
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sortedKeys(o oracle) []string {
	ks := make([]string, 0, len(o))
	for k := range o {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
