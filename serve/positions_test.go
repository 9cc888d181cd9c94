package serve

// Tests of the positions every read answer carries and of reads that wait
// for min_positions (positions.go), against an oracle: the offsets the
// broker gave the records the test produced.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// producedPositions is the oracle of a table's positions after recs were
// produced (offsets their offsets) on a topic of parts partitions:
// per partition, its last offset + 1, 0 for a partition with none.
func producedPositions(parts int32, recs []localkafka.Record, offsets []int64) api.Positions {
	p := api.Positions{}
	for i := int32(0); i < parts; i++ {
		p[i] = 0
	}
	for i, r := range recs {
		p[r.Partition] = max(p[r.Partition], offsets[i]+1)
	}
	return p
}

// checkReadState asserts that an answer names want as its positions, in
// its header and its cursor, with the cursor's generation its
// Kmaterialize-Generation and its epoch the daemon's.
func checkReadState(t *testing.T, d *daemon, what, table string, r response, want api.Positions) {
	t.Helper()
	if got := r.header.Get(HeaderPositions); got != want.String() {
		t.Errorf("%s: %s %q, want %q (status %d)", what, HeaderPositions, got, want.String(), r.status)
	}
	c, err := api.ParseCursor(r.header.Get(HeaderCursor))
	if err != nil {
		t.Errorf("%s: %s: %v", what, HeaderCursor, err)
		return
	}
	if c.Generation != r.gen(t) || c.Epoch != d.s.Epoch(table) || c.Epoch == 0 || !maps.Equal(c.Positions, want) {
		t.Errorf("%s: cursor %+v, want generation %s, epoch %d, positions %v", what, c, r.header.Get(HeaderGeneration), d.s.Epoch(table), want)
	}
}

// post sends a POST with a JSON body.
func (c *client) post(t *testing.T, path, body string) response {
	t.Helper()
	req, err := http.NewRequest("POST", c.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// TestPositionsOnEveryRead: the table's status, a key, a missing key's
// 404, a rows page, a count and an export each name the positions the
// produced offsets give (the last offset + 1 per partition, 0 for the
// empty partition), in the header and in the cursor. A read with
// min_positions at those positions answers at once; one past them times
// out with 409 positions_not_reached and the positions, or 503 when every
// waiting slot is taken; bad values are 400.
func TestPositionsOnEveryRead(t *testing.T) {
	topic := unique(t, "topic")
	broker.TestTopic(t, topic, 3, nil)
	var recs []localkafka.Record
	for i := range 23 {
		recs = append(recs, localkafka.Record{Partition: int32(i % 2), Key: []byte(fmt.Sprintf("k%02d", i%9)), Value: []byte(fmt.Sprintf("v%d", i))})
	}
	offsets, err := broker.Produce(context.Background(), topic, recs)
	if err != nil {
		t.Fatal(err)
	}
	want := producedPositions(3, recs, offsets)
	d := start(t, baseConfig(t, kafkaTable("t", topic, nil)))
	waitFor(t, "table t published", 60*time.Second, func() bool { g := d.c.table(t, "t").Generation; return g != nil && *g != 0 })

	for _, c := range []struct {
		path   string
		status int
	}{
		{"/v1/tables/t", http.StatusOK},
		{"/v1/tables/t/keys/k01", http.StatusOK},
		{"/v1/tables/t/keys/absent", http.StatusNotFound},
		{"/v1/tables/t/rows?limit=2", http.StatusOK},
		{"/v1/tables/t/count", http.StatusOK},
		{"/v1/tables/t/export", http.StatusOK},
		{"/v1/tables/t/keys/k01?min_positions=" + url.QueryEscape(want.String()), http.StatusOK},
		{"/v1/tables/t/rows?min_positions=0:1&wait=1s", http.StatusOK},
		{"/v1/tables/t/count?min_positions=2:0&wait=0s", http.StatusOK},
	} {
		r := d.c.get(t, c.path)
		if r.status != c.status {
			t.Fatalf("GET %s: %d %s, want %d", c.path, r.status, r.body, c.status)
		}
		checkReadState(t, d, "GET "+c.path, "t", r, want)
	}
	r := d.c.post(t, "/v1/tables/t/keys/k01?wait=1s", `{"min_positions": {"0": 1, "1": 2}}`)
	if r.status != http.StatusOK {
		t.Fatalf("POST keys with min_positions reached: %d %s", r.status, r.body)
	}
	checkReadState(t, d, "POST keys", "t", r, want)

	// One record past the table in partition 1, a short wait: 409.
	past := want.Clone()
	past[1]++
	for _, path := range []string{"/v1/tables/t/keys/k01", "/v1/tables/t/rows", "/v1/tables/t/count"} {
		r := d.c.get(t, path+"?wait=50ms&min_positions="+url.QueryEscape(past.String()))
		if r.status != http.StatusConflict {
			t.Fatalf("GET %s past the table: %d %s, want 409", path, r.status, r.body)
		}
		var body api.ErrorBody
		if err := json.Unmarshal(r.body, &body); err != nil || body.Code != api.CodePositionsNotReached || !maps.Equal(body.Positions, want) {
			t.Fatalf("GET %s past the table: body %s (%v), want positions_not_reached with positions %v", path, r.body, err, want)
		}
		checkReadState(t, d, "409 of "+path, "t", r, want)
	}
	if r := d.c.post(t, "/v1/tables/t/count", `{"min_positions": {"1": `+fmt.Sprint(past[1])+`}}`); r.status != http.StatusConflict {
		t.Fatalf("POST count past the table without wait: %d %s, want 409", r.status, r.body)
	}
	// With every waiting slot taken, a read that must wait is refused; one
	// whose positions are reached is not.
	d.s.waiters.Add(MaxPositionWaiters)
	if r := d.c.get(t, "/v1/tables/t/keys/k01?wait=1s&min_positions="+url.QueryEscape(past.String())); r.status != http.StatusServiceUnavailable || r.apiErr(t).Code != api.CodeTooManyWaiters {
		t.Fatalf("a read that must wait, every slot taken: %d %s, want 503 too_many_waiters", r.status, r.body)
	}
	if r := d.c.get(t, "/v1/tables/t/keys/k01?wait=1s&min_positions="+url.QueryEscape(want.String())); r.status != http.StatusOK {
		t.Fatalf("a read at the table's positions, every slot taken: %d %s, want 200", r.status, r.body)
	}
	d.s.waiters.Add(-MaxPositionWaiters)

	for _, c := range []struct{ query, code string }{
		{"min_positions=7:1", api.CodeBadPositions}, // a partition the table does not have
		{"min_positions=abc", api.CodeBadPositions},
		{"min_positions=", api.CodeBadPositions},
		{"min_positions=0:1,0:2", api.CodeBadPositions},
		{"min_positions=0:-1", api.CodeBadPositions},
		{"min_positions=0:1&wait=31s", api.CodeBadWait},
		{"min_positions=0:1&wait=-1s", api.CodeBadWait},
		{"min_positions=0:1&wait=soon", api.CodeBadWait},
		{"wait=2s", api.CodeBadWait},
	} {
		for _, route := range []string{"keys/k01", "rows", "count"} {
			path := "/v1/tables/t/" + route + "?" + c.query
			r := d.c.get(t, path)
			if r.status != http.StatusBadRequest || r.apiErr(t).Code != c.code {
				t.Errorf("GET %s: %d %s, want 400 %s", path, r.status, r.body, c.code)
			}
		}
	}
	for _, body := range []string{``, `{}`, `{"min_positions": {}}`, `{"min_positions": {"x": 1}}`, `{"min_positions": {"0": -1}}`, `{"min_positions": {"0": 1}, "more": 1}`, `[1]`} {
		r := d.c.post(t, "/v1/tables/t/rows", body)
		if r.status != http.StatusBadRequest || r.apiErr(t).Code != api.CodeBadPositions {
			t.Errorf("POST rows with body %q: %d %s, want 400 bad_positions", body, r.status, r.body)
		}
	}
}

// TestMinPositionsWaitsForUpdate: a table that is not followed is at the
// position of its last record; a record produced after it is not in it.
// min_positions at that record's offset (not + 1) is reached at once and
// answers the old value: the position of a record is its offset + 1. At
// offset + 1 a short wait answers 409 with the table's positions; a read
// waiting up to 30s is woken by the in-place update that applies the
// record and answers its value, at the record's position.
func TestMinPositionsWaitsForUpdate(t *testing.T) {
	topic := newTopic(t)
	first := []localkafka.Record{{Key: []byte("acct"), Value: []byte("old")}, {Key: []byte("other"), Value: []byte("x")}}
	offs, err := broker.Produce(context.Background(), topic, first)
	if err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(t, kafkaTable("t", topic, nil))
	cfg.Update = testUpdate
	d := start(t, cfg)
	waitFor(t, "table t published", 60*time.Second, func() bool { g := d.c.table(t, "t").Generation; return g != nil && *g != 0 })
	built := producedPositions(1, first, offs)

	next := []localkafka.Record{{Key: []byte("acct"), Value: []byte("new")}}
	noffs, err := broker.Produce(context.Background(), topic, next)
	if err != nil {
		t.Fatal(err)
	}
	off := noffs[0]
	r := d.c.get(t, fmt.Sprintf("/v1/tables/t/keys/acct?min_positions=0:%d", off))
	if r.status != http.StatusOK || string(r.body) != "old" {
		t.Fatalf("min_positions at the new record's offset: %d %q, want 200 \"old\" (the offset alone is the table before it)", r.status, r.body)
	}
	checkReadState(t, d, "at the offset", "t", r, built)
	r = d.c.get(t, fmt.Sprintf("/v1/tables/t/keys/acct?min_positions=0:%d&wait=20ms", off+1))
	if r.status != http.StatusConflict || r.apiErr(t).Code != api.CodePositionsNotReached {
		t.Fatalf("min_positions at offset+1, not applied: %d %s, want 409", r.status, r.body)
	}
	checkReadState(t, d, "409", "t", r, built)

	type answer struct {
		r   response
		err error
	}
	got := make(chan answer, 1)
	go func() {
		// Not d.c.get: t.Fatal is for the test's goroutine.
		resp, err := d.c.hc.Get(d.c.base + fmt.Sprintf("/v1/tables/t/keys/acct?min_positions=0:%d&wait=30s", off+1))
		if err != nil {
			got <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- answer{r: response{status: resp.StatusCode, header: resp.Header, body: b}, err: err}
	}()
	waitFor(t, "the read to wait", 20*time.Second, func() bool { return d.s.waiters.Load() == 1 })
	if m := d.c.get(t, "/metrics"); !strings.Contains(string(m.body), "\nkmaterialize_reads_waiting_for_positions 1\n") {
		t.Errorf("/metrics does not count the waiting read")
	}
	if r := d.c.do(t, "POST", "/v1/tables/t/update", nil); r.status != http.StatusOK {
		t.Fatalf("update: %d %s", r.status, r.body)
	}
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.r.status != http.StatusOK || !bytes.Equal(a.r.body, []byte("new")) {
		t.Fatalf("the waiting read: %d %q, want 200 \"new\"", a.r.status, a.r.body)
	}
	checkReadState(t, d, "after the update", "t", a.r, api.Positions{0: off + 1})
	if n := d.s.waiters.Load(); n != 0 {
		t.Fatalf("%d waiters left", n)
	}
}

// TestWaitEndsAtShutdown: a read waiting for positions the table never
// reaches frees its slot when its client gives up, and ends when the
// daemon shuts down (503 shutting_down), well before its wait.
func TestWaitEndsAtShutdown(t *testing.T) {
	topic := newTopic(t)
	produce(t, topic, records(1, 5, 3))
	d := start(t, baseConfig(t, kafkaTable("t", topic, nil)))
	waitFor(t, "table t published", 60*time.Second, func() bool { g := d.c.table(t, "t").Generation; return g != nil && *g != 0 })
	got := make(chan int, 1)
	go func() {
		resp, err := d.c.hc.Get(d.c.base + "/v1/tables/t/count?min_positions=0:1000&wait=30s")
		if err != nil {
			got <- -1
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	waitFor(t, "the read to wait", 20*time.Second, func() bool { return d.s.waiters.Load() == 1 })
	// A second waiting read whose client gives up frees its slot.
	cctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(cctx, "GET", d.c.base+"/v1/tables/t/keys/k000?min_positions=0:1000&wait=30s", nil)
	if err != nil {
		t.Fatal(err)
	}
	gone := make(chan error, 1)
	go func() {
		resp, err := d.c.hc.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gone <- err
	}()
	waitFor(t, "the second read to wait", 20*time.Second, func() bool { return d.s.waiters.Load() == 2 })
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("a cancelled request got an answer")
	}
	waitFor(t, "the cancelled read to free its slot", 20*time.Second, func() bool { return d.s.waiters.Load() == 1 })
	d.stop(t)
	if status := <-got; status != http.StatusServiceUnavailable {
		t.Fatalf("the waiting read at shutdown: %d, want 503", status)
	}
}

// TestEpochs: a table's epoch is never 0, stays put, and changes with a
// bump (a rollback) and only for that table.
func TestEpochs(t *testing.T) {
	var e epochs
	a, b := e.of("a"), e.of("b")
	if a == 0 || a != b || e.of("a") != a {
		t.Fatalf("epochs %d, %d", a, b)
	}
	e.bump("a")
	if e.of("a") == a || e.of("b") != b || e.of("a") == 0 {
		t.Fatalf("after a bump of a: %d, %d", e.of("a"), e.of("b"))
	}
}

// TestPositionsFollowed: on a followed table, rows pages read while a
// producer writes carry positions that never go back from page to page
// and never pass what was produced; once the follower has caught up, an
// export (spooled: the follower changes the table in place) and a page
// name the oracle's positions.
func TestPositionsFollowed(t *testing.T) {
	topic := unique(t, "topic")
	broker.TestTopic(t, topic, 2, nil)
	var produced []localkafka.Record
	var offsets []int64
	write := func(round, n int) {
		t.Helper()
		var recs []localkafka.Record
		for i := range n {
			recs = append(recs, localkafka.Record{Partition: int32(i % 2), Key: []byte(fmt.Sprintf("k%03d", i%40)), Value: []byte(fmt.Sprintf("r%d-%d", round, i))})
		}
		offs, err := broker.Produce(context.Background(), topic, recs)
		if err != nil {
			t.Fatal(err)
		}
		produced, offsets = append(produced, recs...), append(offsets, offs...)
	}
	write(0, 80)
	d := start(t, baseConfig(t, followedTable("live", topic, FollowSettings{})))
	waitFor(t, "state following", 60*time.Second, func() bool { return d.c.table(t, "live").State == StateFollowing })

	last := api.Positions{}
	for round := 1; round <= 5; round++ {
		write(round, 20)
		bound := producedPositions(2, produced, offsets)
		after := ""
		for {
			path := "/v1/tables/live/rows?limit=7"
			if after != "" {
				path += "&after=" + url.QueryEscape(after)
			}
			r := d.c.get(t, path)
			if r.status != http.StatusOK {
				t.Fatalf("GET %s: %d %s", path, r.status, r.body)
			}
			pos, err := api.ParsePositions(r.header.Get(HeaderPositions))
			if err != nil {
				t.Fatal(err)
			}
			for p, n := range pos {
				if n < last[p] || n > bound[p] {
					t.Fatalf("round %d: a page at %v after one at %v, with %v produced", round, pos, last, bound)
				}
			}
			last = pos
			lines := bytes.Split(bytes.TrimSpace(r.body), []byte("\n"))
			var row struct{ Key string }
			if err := json.Unmarshal(lines[len(lines)-1], &row); err != nil {
				t.Fatal(err)
			}
			after = row.Key
			if r.header.Get(HeaderMore) != "true" {
				break
			}
		}
	}
	want := producedPositions(2, produced, offsets)
	waitFor(t, "the follower to apply every record", 60*time.Second, func() bool { return caughtUp(d.c.table(t, "live"), want) })
	for _, path := range []string{"/v1/tables/live/export", "/v1/tables/live/rows", "/v1/tables/live/count", "/v1/tables/live"} {
		r := d.c.get(t, path)
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		checkReadState(t, d, "GET "+path, "live", r, want)
	}
}

// TestReadHeadersBound: positions or a cursor longer than 4 KiB are left
// out (the generation stays); shorter ones are sent and parse back.
func TestReadHeadersBound(t *testing.T) {
	s := &Server{}
	many := api.Positions{}
	for p := int32(0); p < 1000; p++ {
		many[p] = 1 << 40
	}
	rec := httptest.NewRecorder()
	s.setReadHeaders(rec, "t", readState{gen: 3, positions: many})
	if h := rec.Header(); h.Get(HeaderGeneration) != "3" || h.Get(HeaderPositions) != "" || h.Get(HeaderCursor) != "" {
		t.Fatalf("1000 partitions: headers %v, want the generation only", h)
	}
	few := api.Positions{0: 5, 9: 1 << 40}
	rec = httptest.NewRecorder()
	s.setReadHeaders(rec, "t", readState{gen: 3, positions: few})
	c, err := api.ParseCursor(rec.Header().Get(HeaderCursor))
	if rec.Header().Get(HeaderPositions) != few.String() || err != nil || !maps.Equal(c.Positions, few) || c.Generation != 3 {
		t.Fatalf("two partitions: headers %v (%v)", rec.Header(), err)
	}
	rec = httptest.NewRecorder()
	s.setReadHeaders(rec, "t", readState{gen: 3})
	if h := rec.Header(); h.Get(HeaderPositions) != "" || h.Get(HeaderCursor) != "" {
		t.Fatalf("no checkpoint: headers %v", h)
	}
}
