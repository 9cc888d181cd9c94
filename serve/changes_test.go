package serve

// Tests of the change feed route (changes.go): an independent consumer
// lists a table, watches from the list's cursor, and after every commit
// line its copy equals the oracle fold of what the test produced up to
// that commit's positions; a publish (rebuild) and a rollback come as
// changes; refusals before the stream (400, 404, 410, 503); a watcher that
// does not read is cut off while another goes on; shutdown ends streams.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// produced is every record a test produced, with its offset: the oracle's
// input.
type produced struct {
	recs    []localkafka.Record
	offsets []int64
}

func (p *produced) write(t *testing.T, topic string, recs []localkafka.Record) {
	t.Helper()
	offs, err := broker.Produce(context.Background(), topic, recs)
	if err != nil {
		t.Fatal(err)
	}
	p.recs, p.offsets = append(p.recs, recs...), append(p.offsets, offs...)
}

// foldAt is the latest fold of the records below pos (per partition,
// offset < pos[partition]), in offset order per partition. Keys are
// partition-specific in these tests, so the order across partitions does
// not matter.
func (p *produced) foldAt(pos api.Positions) oracle {
	type at struct {
		off int64
		r   localkafka.Record
	}
	byPart := map[int32][]at{}
	for i, r := range p.recs {
		if p.offsets[i] < pos[r.Partition] {
			byPart[r.Partition] = append(byPart[r.Partition], at{p.offsets[i], r})
		}
	}
	o := oracle{}
	for _, recs := range byPart {
		// Produce returns offsets in increasing order per partition.
		var in []localkafka.Record
		for _, a := range recs {
			in = append(in, a.r)
		}
		o = latestOracle(o, in)
	}
	return o
}

// ends are the positions after every produced record.
func (p *produced) ends() api.Positions {
	out := api.Positions{}
	for i, r := range p.recs {
		out[r.Partition] = max(out[r.Partition], p.offsets[i]+1)
	}
	return out
}

// keyed are n records over partitions 0..parts-1 with keys of their own
// partition, every fifth a tombstone of a key written before.
func keyed(round, n int, parts int32, keys int) []localkafka.Record {
	recs := make([]localkafka.Record, n)
	for i := range recs {
		p := int32(i) % parts
		r := localkafka.Record{Partition: p, Key: []byte(fmt.Sprintf("p%d-k%03d", p, (i*3+round)%keys))}
		if i%5 != 2 {
			r.Value = []byte(fmt.Sprintf("r%d-v%d", round, i))
		}
		recs[i] = r
	}
	return recs
}

// feedStream is an open change feed: a goroutine (ended by closing the
// body, at the latest at the test's end) reads its lines into lines.
type feedStream struct {
	t      *testing.T
	resp   *http.Response
	lines  chan api.FeedLine
	errc   chan error
	cancel context.CancelFunc
}

// watchRaw opens GET .../changes?query without reading it.
func watchRaw(t *testing.T, c *client, table, query string) (*http.Response, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+"/v1/tables/"+table+"/changes?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	// No client timeout: the stream stays open.
	resp, err := (&http.Client{Transport: c.hc.Transport}).Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	return resp, cancel
}

// watch opens the feed from from (a cursor or "now") and fails t unless
// it is 200.
func watch(t *testing.T, c *client, table, from string) *feedStream {
	t.Helper()
	resp, cancel := watchRaw(t, c, table, "from="+url.QueryEscape(from))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET changes from %s: %d", from, resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("GET changes: Content-Type %q", ct)
	}
	fs := &feedStream{t: t, resp: resp, lines: make(chan api.FeedLine, 1<<16), errc: make(chan error, 1), cancel: cancel}
	fs.start()
	return fs
}

func (fs *feedStream) start() {
	go func() {
		br := bufio.NewReaderSize(fs.resp.Body, 64<<10)
		for {
			line, err := br.ReadBytes('\n')
			if err != nil {
				fs.errc <- err
				close(fs.lines)
				return
			}
			var l api.FeedLine
			if err := json.Unmarshal(line, &l); err != nil {
				fs.errc <- fmt.Errorf("line %q: %w", line, err)
				close(fs.lines)
				return
			}
			fs.lines <- l
		}
	}()
}

// next is the stream's next line; ok false at its end.
func (fs *feedStream) next() (api.FeedLine, bool) {
	fs.t.Helper()
	select {
	case l, ok := <-fs.lines:
		return l, ok
	case <-time.After(60 * time.Second):
		fs.t.Fatal("no line from the change feed in 60s")
	}
	return api.FeedLine{}, false
}

// copyOf is a consumer's copy of a table: rows and the state it holds.
type copyOf struct {
	rows oracle
	at   api.Positions
}

// list reads table's rows in one page with the page's cursor.
func list(t *testing.T, c *client, table string) (copyOf, string) {
	t.Helper()
	r := c.get(t, "/v1/tables/"+table+"/rows?limit=10000")
	if r.status != http.StatusOK || r.header.Get(HeaderMore) != "false" {
		t.Fatalf("GET rows: %d more=%s %s", r.status, r.header.Get(HeaderMore), r.body)
	}
	cp := copyOf{rows: oracle{}}
	for _, line := range strings.Split(strings.TrimSpace(string(r.body)), "\n") {
		if line == "" {
			continue
		}
		var row struct{ Key, Value string }
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatal(err)
		}
		cp.rows[row.Key] = row.Value
	}
	pos, err := api.ParsePositions(r.header.Get(HeaderPositions))
	if err != nil {
		t.Fatal(err)
	}
	cp.at = pos
	return cp, r.header.Get(HeaderCursor)
}

// untilCommit applies change lines to cp up to the next commit line and
// returns it. Heartbeats must name the state cp holds; an error line
// fails t.
func (fs *feedStream) untilCommit(cp *copyOf) api.FeedState {
	fs.t.Helper()
	for {
		l, ok := fs.next()
		switch {
		case !ok:
			fs.t.Fatalf("the feed ended: %v", <-fs.errc)
		case l.Key != nil && l.Value == nil:
			delete(cp.rows, *l.Key)
		case l.Key != nil:
			cp.rows[*l.Key] = *l.Value
		case l.Heartbeat != nil:
			if cp.at != nil && !maps.Equal(l.Heartbeat.Positions, cp.at) {
				fs.t.Fatalf("a heartbeat at %v while the copy holds %v", l.Heartbeat.Positions, cp.at)
			}
		case l.Commit != nil:
			cp.at = l.Commit.Positions
			return *l.Commit
		case l.Error != nil:
			fs.t.Fatalf("the feed ended with %+v", *l.Error)
		default:
			fs.t.Fatalf("a line of no known kind: %+v", l)
		}
	}
}

// endsWith reads the stream to its end and returns its error line's code.
func (fs *feedStream) endsWith() string {
	fs.t.Helper()
	code := ""
	for {
		l, ok := fs.next()
		if !ok {
			return code
		}
		if l.Error != nil {
			code = l.Error.Code
		}
	}
}

func checkCopy(t *testing.T, what string, cp copyOf, want oracle) {
	t.Helper()
	if !maps.Equal(cp.rows, want) {
		t.Fatalf("%s: the copy (%d rows) differs from the oracle (%d rows) at %v:\ncopy   %v\noracle %v", what, len(cp.rows), len(want), cp.at, cp.rows, want)
	}
}

// TestChangesFollowed: a consumer lists a followed table and watches from
// the list's cursor while a producer writes keyed records with
// tombstones: after every commit line the copy equals the oracle fold of
// the log up to the commit's positions, until it holds every record.
func TestChangesFollowed(t *testing.T) {
	topic := unique(t, "topic")
	broker.TestTopic(t, topic, 2, nil)
	var p produced
	p.write(t, topic, keyed(0, 60, 2, 20))
	cfg := baseConfig(t, followedTable("live", topic, FollowSettings{}))
	cfg.FeedHeartbeat = 100 * time.Millisecond
	d := start(t, cfg)
	waitFor(t, "state following", 60*time.Second, func() bool { return d.c.table(t, "live").State == StateFollowing })

	cp, cursor := list(t, d.c, "live")
	checkCopy(t, "the list", cp, p.foldAt(cp.at))
	fs := watch(t, d.c, "live", cursor)
	commits, lastCursor := 0, ""
	for round := 1; round <= 8; round++ {
		p.write(t, topic, keyed(round, 25, 2, 20))
		want := p.ends()
		for {
			st := fs.untilCommit(&cp)
			commits++
			if st.Cursor == "" || st.Generation == 0 {
				t.Fatalf("commit %+v without cursor or generation", st)
			}
			checkCopy(t, fmt.Sprintf("round %d, commit %d", round, commits), cp, p.foldAt(st.Positions))
			lastCursor = st.Cursor
			if reached, _ := st.Positions.Reached(want); reached {
				break
			}
		}
	}
	t.Logf("%d commits, %d rows", commits, len(cp.rows))
	// A watcher that goes away resumes from its last commit's cursor and
	// misses nothing.
	fs.cancel()
	waitFor(t, "the watcher to end", 30*time.Second, func() bool { return d.s.feeds.Watchers() == 0 })
	p.write(t, topic, keyed(9, 25, 2, 20))
	fs = watch(t, d.c, "live", lastCursor)
	want := p.ends()
	for {
		st := fs.untilCommit(&cp)
		checkCopy(t, "after the resume", cp, p.foldAt(st.Positions))
		if reached, _ := st.Positions.Reached(want); reached {
			break
		}
	}
}

// errorOf reads an error answer of the changes route.
func errorOf(t *testing.T, resp *http.Response) api.ErrorBody {
	t.Helper()
	var e api.ErrorBody
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("%d: %v", resp.StatusCode, err)
	}
	return e
}

// TestChangesRebuildRollback: a watcher of a table that is not followed
// gets a requested rebuild's publish as the changes between the two
// generations, then a rollback's: after each commit its copy is the
// oracle of the generation published. The list's cursor, of the epoch
// before the rollback, is then 410 with the table's cursor, from which a
// watch starts; a cursor the daemon never gave is 410, a bad one 400, an
// unknown table 404.
func TestChangesRebuildRollback(t *testing.T) {
	topic := unique(t, "topic")
	broker.TestTopic(t, topic, 2, nil)
	var p produced
	p.write(t, topic, keyed(0, 60, 2, 20))
	tbl := kafkaTable("t", topic, nil)
	tbl.Build = func(ctx context.Context, db *store.DB, log zerolog.Logger) (materialize.Report, error) {
		return materialize.Rebuild(ctx, materialize.Options{DB: db, Table: "t", Log: log, Keep: 1,
			Replay: replay.Config{Brokers: broker.Addr, Topic: topic, StallTimeout: 20 * time.Second, Log: log}})
	}
	d := start(t, baseConfig(t, tbl))
	waitFor(t, "the first build", 60*time.Second, func() bool { return d.c.table(t, "t").Generation != nil })
	cp, cursor := list(t, d.c, "t")
	first := p.ends()
	checkCopy(t, "the list", cp, p.foldAt(first))
	fs := watch(t, d.c, "t", cursor)

	p.write(t, topic, keyed(1, 40, 2, 30))
	if r := d.c.post(t, "/v1/tables/t/rebuild?wait=1", ""); r.status != http.StatusOK {
		t.Fatalf("rebuild: %d %s", r.status, r.body)
	}
	st := fs.untilCommit(&cp)
	if !maps.Equal(st.Positions, p.ends()) {
		t.Fatalf("the rebuild's commit at %v, want %v", st.Positions, p.ends())
	}
	checkCopy(t, "after the rebuild", cp, p.foldAt(st.Positions))

	if r := d.c.post(t, "/v1/tables/t/rollback", ""); r.status != http.StatusOK {
		t.Fatalf("rollback: %d %s", r.status, r.body)
	}
	st = fs.untilCommit(&cp)
	if !maps.Equal(st.Positions, first) {
		t.Fatalf("the rollback's commit at %v, want %v", st.Positions, first)
	}
	checkCopy(t, "after the rollback", cp, p.foldAt(first))

	resp, _ := watchRaw(t, d.c, "t", "from="+cursor)
	e := errorOf(t, resp)
	if resp.StatusCode != http.StatusGone || e.Code != api.CodeCursorGone || e.Cursor != st.Cursor || !maps.Equal(e.Positions, first) {
		t.Fatalf("a cursor of the epoch before the rollback: %d %+v, want 410 cursor_gone with cursor %s", resp.StatusCode, e, st.Cursor)
	}
	fs2 := watch(t, d.c, "t", e.Cursor)
	c2 := copyOf{rows: maps.Clone(cp.rows), at: st.Positions}

	p.write(t, topic, keyed(2, 10, 2, 30))
	if r := d.c.post(t, "/v1/tables/t/rebuild?wait=1", ""); r.status != http.StatusOK {
		t.Fatalf("rebuild: %d %s", r.status, r.body)
	}
	for _, f := range []*feedStream{fs, fs2} {
		c := &cp
		if f == fs2 {
			c = &c2
		}
		st := f.untilCommit(c)
		checkCopy(t, "after the second rebuild", *c, p.foldAt(st.Positions))
	}

	cur, err := api.ParseCursor(cursor)
	if err != nil {
		t.Fatal(err)
	}
	cur.Epoch += 1000
	for _, tc := range []struct {
		table, query string
		status       int
		code         string
	}{
		{"t", "from=" + cur.String(), http.StatusGone, api.CodeCursorGone},
		{"t", "from=x!", http.StatusBadRequest, api.CodeBadCursor},
		{"t", "", http.StatusBadRequest, api.CodeBadCursor},
		{"t", "from=now&from=now", http.StatusBadRequest, api.CodeBadCursor},
		{"t", "from=now&encoding=latin1", http.StatusBadRequest, api.CodeBadEncoding},
		{"t", "from=now&limit=1", http.StatusBadRequest, api.CodeBadRequest},
		{"nope", "from=now", http.StatusNotFound, api.CodeTableNotFound},
	} {
		resp, _ := watchRaw(t, d.c, tc.table, tc.query)
		if e := errorOf(t, resp); resp.StatusCode != tc.status || e.Code != tc.code {
			t.Errorf("%s?%s: %d %+v, want %d %s", tc.table, tc.query, resp.StatusCode, e, tc.status, tc.code)
		}
	}
}

// TestChangesMaxWatchers: past max_watchers a watch is 503
// too_many_watchers; once one ends, a watch is served again. The
// kmaterialize_feed_watchers gauge counts the open watchers throughout.
func TestChangesMaxWatchers(t *testing.T) {
	topic := newTopic(t)
	produce(t, topic, records(1, 20, 10))
	cfg := baseConfig(t, kafkaTable("t", topic, nil))
	cfg.MaxWatchers = 2
	d := start(t, cfg)
	waitFor(t, "the first build", 60*time.Second, func() bool { return d.c.table(t, "t").Generation != nil })
	a := watch(t, d.c, "t", "now")
	watch(t, d.c, "t", "now")
	resp, _ := watchRaw(t, d.c, "t", "from=now")
	if e := errorOf(t, resp); resp.StatusCode != http.StatusServiceUnavailable || e.Code != api.CodeTooManyWatchers || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a third watcher: %d %+v", resp.StatusCode, e)
	}
	checkWatchersGauge(t, d.c, 2)
	a.cancel()
	waitFor(t, "a watcher to end", 30*time.Second, func() bool { return d.s.feeds.Watchers() == 1 })
	checkWatchersGauge(t, d.c, 1)
	watch(t, d.c, "t", "now")
	checkWatchersGauge(t, d.c, 2)
}

// checkWatchersGauge fails t unless /metrics reports want open watchers.
func checkWatchersGauge(t *testing.T, c *client, want int) {
	t.Helper()
	r := c.get(t, "/metrics")
	line := fmt.Sprintf("\nkmaterialize_feed_watchers %d\n", want)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), line) {
		t.Fatalf("/metrics: %d, want the line %q", r.status, strings.TrimSpace(line))
	}
}

// TestChangesSlowWatcher: a watcher that stops reading, with a small
// slow-watcher bound, is cut off with watcher_too_slow once it reads
// again, while another watcher follows every commit and reads answer;
// then it resumes from its last commit's cursor.
func TestChangesSlowWatcher(t *testing.T) {
	topic := unique(t, "topic")
	broker.TestTopic(t, topic, 1, nil)
	var p produced
	p.write(t, topic, keyed(0, 10, 1, 50))
	cfg := baseConfig(t, followedTable("live", topic, FollowSettings{}))
	cfg.FeedSlowBytes = 32 << 10
	// Cut off while it does not read (TestChangesStuckWatcherCut), it
	// still gets its last line when it reads within the grace.
	cfg.FeedCutGrace = 10 * time.Minute
	d := start(t, cfg)
	waitFor(t, "state following", 60*time.Second, func() bool { return d.c.table(t, "live").State == StateFollowing })
	cp, cursor := list(t, d.c, "live")
	sc := copyOf{rows: maps.Clone(cp.rows), at: cp.at}
	fast := watch(t, d.c, "live", cursor)
	slowResp, _ := watchRaw(t, d.c, "live", "from="+cursor)
	if slowResp.StatusCode != http.StatusOK {
		t.Fatal(slowResp.StatusCode)
	}

	// 3 MiB of changes in some 24 commits (each round awaited): far more
	// than the sockets between the daemon and the slow watcher hold, so
	// that it is many commits behind when it reads again.
	var want api.Positions
	for round := 1; round <= 24; round++ {
		want = writeBig(t, &p, topic, round)
		fast.follow(t, "the fast watcher", &cp, &p, want)
	}
	if r := d.c.get(t, "/v1/tables/live/count"); r.status != http.StatusOK {
		t.Fatalf("count while a watcher is stuck: %d", r.status)
	}

	slow := &feedStream{t: t, resp: slowResp, lines: make(chan api.FeedLine, 1<<16), errc: make(chan error, 1)}
	slow.start()
	lastCursor := cursor
	code := ""
	for code == "" {
		l, ok := slow.next()
		switch {
		case !ok:
			t.Fatalf("the slow watcher's stream ended without an error line: %v", <-slow.errc)
		case l.Key != nil && l.Value == nil:
			delete(sc.rows, *l.Key)
		case l.Key != nil:
			sc.rows[*l.Key] = *l.Value
		case l.Commit != nil:
			sc.at, lastCursor = l.Commit.Positions, l.Commit.Cursor
			checkCopy(t, "the slow watcher", sc, p.foldAt(sc.at))
		case l.Error != nil:
			code = l.Error.Code
		}
	}
	if code != api.CodeWatcherTooSlow {
		t.Fatalf("the slow watcher ended with %s, want %s", code, api.CodeWatcherTooSlow)
	}
	if reached, _ := sc.at.Reached(want); reached {
		t.Fatalf("the slow watcher got every commit (to %v) before it was cut off", sc.at)
	}
	waitFor(t, "the slow watcher to end", 30*time.Second, func() bool { return d.s.feeds.Watchers() == 1 })
	// Its changes up to its last commit are applied: it resumes there.
	// A change line after that commit and before the error line may be
	// in its copy; changes are absolute, so the resume repairs it.
	resumed := watch(t, d.c, "live", lastCursor)
	for {
		st := resumed.untilCommit(&sc)
		checkCopy(t, "the resumed watcher", sc, p.foldAt(st.Positions))
		if reached, _ := st.Positions.Reached(want); reached {
			break
		}
	}
}

// writeBig writes round's 32 records of some 4 KiB each to topic's
// partition 0 (keys of 50) and returns the positions after them.
func writeBig(t *testing.T, p *produced, topic string, round int) api.Positions {
	t.Helper()
	big := strings.Repeat("x", 4<<10)
	recs := keyed(round, 32, 1, 50)
	for i := range recs {
		if recs[i].Value != nil {
			recs[i].Value = append(recs[i].Value, big...)
		}
	}
	p.write(t, topic, recs)
	return p.ends()
}

// follow applies fs's lines to cp until a commit reaches want, checking
// cp against p's oracle at every commit.
func (fs *feedStream) follow(t *testing.T, what string, cp *copyOf, p *produced, want api.Positions) {
	t.Helper()
	for {
		st := fs.untilCommit(cp)
		checkCopy(t, what, *cp, p.foldAt(st.Positions))
		if reached, _ := st.Positions.Reached(want); reached {
			return
		}
	}
}

// TestChangesShutdown: shutdown ends an open stream with shutting_down.
func TestChangesShutdown(t *testing.T) {
	topic := newTopic(t)
	produce(t, topic, records(1, 20, 10))
	d := start(t, baseConfig(t, kafkaTable("t", topic, nil)))
	waitFor(t, "the first build", 60*time.Second, func() bool { return d.c.table(t, "t").Generation != nil })
	fs := watch(t, d.c, "t", "now")
	d.stop(t)
	if code := fs.endsWith(); code != api.CodeShuttingDown {
		t.Fatalf("the stream ended with %q, want %s", code, api.CodeShuttingDown)
	}
}

// TestChangesOutlivesReadTimeout: a stream open longer than the server's
// read timeout (readTimeout, 10s) goes on sending heartbeats, each naming
// the table's state: the connection's read deadline does not end it.
func TestChangesOutlivesReadTimeout(t *testing.T) {
	topic := newTopic(t)
	produce(t, topic, records(1, 20, 10))
	cfg := baseConfig(t, kafkaTable("t", topic, nil))
	cfg.FeedHeartbeat = 500 * time.Millisecond
	d := start(t, cfg)
	waitFor(t, "the first build", 60*time.Second, func() bool { return d.c.table(t, "t").Generation != nil })
	cp, cursor := list(t, d.c, "t")
	fs := watch(t, d.c, "t", cursor)
	until := time.Now().Add(readTimeout + 2*time.Second)
	beats := 0
	for time.Now().Before(until) {
		l, ok := fs.next()
		if !ok || l.Heartbeat == nil {
			t.Fatalf("after %d heartbeats: line %+v, open %v (%v)", beats, l, ok, len(fs.errc))
		}
		if !maps.Equal(l.Heartbeat.Positions, cp.at) || l.Heartbeat.Cursor != cursor {
			t.Fatalf("a heartbeat at %+v, want the list's state %v %s", *l.Heartbeat, cp.at, cursor)
		}
		beats++
	}
}

// TestChangesRemoteToken: on a TCP listener with allow_remote the change
// feed is a read: 401 without a token, a stream with the read token.
func TestChangesRemoteToken(t *testing.T) {
	topic := newTopic(t)
	produce(t, topic, records(1, 20, 10))
	cfg := baseConfig(t, kafkaTable("t", topic, nil))
	cfg.Listen, cfg.AllowRemote, cfg.AllowPlaintextTokens = "127.0.0.1:0", true, true
	cfg.AdminToken, cfg.ReadToken = "admin-tok-0123456789", "read-tok-0123456789"
	cfg.FeedHeartbeat = 100 * time.Millisecond
	d := start(t, cfg)
	waitFor(t, "the first build", 60*time.Second, func() bool { return d.c.table(t, "t").Generation != nil })
	addr := d.s.TCPAddr().String()
	resp, _ := watchRaw(t, tcpClient(t, addr), "t", "from=now")
	if e := errorOf(t, resp); resp.StatusCode != http.StatusUnauthorized || e.Code != api.CodeUnauthorized {
		t.Fatalf("without a token: %d %+v", resp.StatusCode, e)
	}
	fs := watch(t, authClient(t, addr, "Bearer "+cfg.ReadToken), "t", "now")
	if l, ok := fs.next(); !ok || l.Heartbeat == nil {
		t.Fatalf("with the read token: %+v %v", l, ok)
	}
}
