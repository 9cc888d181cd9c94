package serve

// More tests of the change feed route (changes.go), for issue 23: a count
// table's feed (each commit names the groups whose count changed, with
// their new count) across follows and a rebuild's publish; an in-place
// update of a table that is not followed; and a daemon restarted under a
// watcher's cursor. Each copy is compared, at every commit, with an
// oracle folded in the test from what it produced.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
)

// vote is one count record as the broker stored it.
type vote struct {
	part      int32
	off       int64
	id, booth string
}

// votes is every vote a test produced: the count oracle's input.
type votes struct{ log []vote }

// write produces n votes of round over parts partitions: event ids repeat
// across rounds and partitions (a producer's retries: the same content
// again), and an id always names the same booth, so there is no conflict.
func (v *votes) write(t *testing.T, topic string, round, n int, parts int32) {
	t.Helper()
	recs := make([]localkafka.Record, n)
	ids := make([]int, n)
	for i := range recs {
		id := (round*17 + i*3) % 45
		ids[i] = id
		val, err := json.Marshal(map[string]string{"event_id": fmt.Sprintf("e%02d", id), "booth": fmt.Sprintf("b%d", id%6)})
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = localkafka.Record{Partition: int32(i) % parts, Key: []byte(fmt.Sprintf("e%02d", id)), Value: val}
	}
	offs, err := broker.Produce(context.Background(), topic, recs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		v.log = append(v.log, vote{part: r.Partition, off: offs[i], id: fmt.Sprintf("e%02d", ids[i]), booth: fmt.Sprintf("b%d", ids[i]%6)})
	}
}

// countAt is the count fold written plainly: among the votes below pos
// (per partition), each distinct event id counts once toward its booth.
func (v *votes) countAt(pos api.Positions) oracle {
	booth := map[string]string{}
	for _, r := range v.log {
		if end, ok := pos[r.part]; ok && r.off < end {
			booth[r.id] = r.booth
		}
	}
	n := map[string]int{}
	for _, b := range booth {
		n[b]++
	}
	o := oracle{}
	for b, c := range n {
		o[b] = strconv.Itoa(c)
	}
	return o
}

// ends are the positions after every vote.
func (v *votes) ends() api.Positions {
	out := api.Positions{}
	for _, r := range v.log {
		out[r.part] = max(out[r.part], r.off+1)
	}
	return out
}

// untilCommitChanged is untilCommit that also returns the keys the
// commit's change lines named, each with its last value (nil: deleted).
func (fs *feedStream) untilCommitChanged(cp *copyOf) (api.FeedState, map[string]*string) {
	fs.t.Helper()
	changed := map[string]*string{}
	for {
		l, ok := fs.next()
		switch {
		case !ok:
			fs.t.Fatalf("the feed ended: %v", <-fs.errc)
		case l.Key != nil && l.Value == nil:
			delete(cp.rows, *l.Key)
			changed[*l.Key] = nil
		case l.Key != nil:
			cp.rows[*l.Key] = *l.Value
			changed[*l.Key] = l.Value
		case l.Heartbeat != nil:
			if cp.at != nil && !maps.Equal(l.Heartbeat.Positions, cp.at) {
				fs.t.Fatalf("a heartbeat at %v while the copy holds %v", l.Heartbeat.Positions, cp.at)
			}
		case l.Commit != nil:
			cp.at = l.Commit.Positions
			return *l.Commit, changed
		case l.Error != nil:
			fs.t.Fatalf("the feed ended with %+v", *l.Error)
		default:
			fs.t.Fatalf("a line of no known kind: %+v", l)
		}
	}
}

// checkChanged fails t unless the commit's change lines name every key
// whose value differs between before and after (the oracles of the states
// before and after the commit), each with its value in after.
func checkChanged(t *testing.T, what string, changed map[string]*string, before, after oracle) {
	t.Helper()
	for k, v := range after {
		if b, ok := before[k]; ok && b == v {
			continue
		}
		if c, ok := changed[k]; !ok || c == nil || *c != v {
			t.Fatalf("%s: %q went from %q to %q, but the commit's changes say %v", what, k, before[k], v, changed)
		}
	}
	for k := range before {
		if _, ok := after[k]; ok {
			continue
		}
		if c, ok := changed[k]; !ok || c != nil {
			t.Fatalf("%s: %q was deleted, but the commit's changes say %v", what, k, changed)
		}
	}
	for k, c := range changed {
		if v, ok := after[k]; (c == nil) == ok || (c != nil && *c != v) {
			t.Fatalf("%s: the commit says %q is %v, the oracle %q (present %v)", what, k, c, v, ok)
		}
	}
}

// TestChangesCountTable: a watcher of a followed count table gets, at
// each commit, the groups whose count changed with their new count, and
// its copy equals the count oracle (each event id once, retries
// deduplicated) at the commit's positions: across the follower's applies,
// a requested rebuild's publish, and the follows after it.
func TestChangesCountTable(t *testing.T) {
	topic := unique(t, "topic")
	broker.TestTopic(t, topic, 2, nil)
	var v votes
	v.write(t, topic, 0, 30, 2)
	cfg := baseConfig(t, followedSpec(materialize.Spec{Name: "votes", Topic: topic, Fold: materialize.FoldCount,
		IdentityField: "event_id", GroupField: "booth", StallTimeout: 20 * time.Second}, FollowSettings{}, nil))
	d := start(t, cfg)
	waitFor(t, "state following", 60*time.Second, func() bool { return d.c.table(t, "votes").State == StateFollowing })

	cp, cursor := list(t, d.c, "votes")
	checkCopy(t, "the list", cp, v.countAt(cp.at))
	fs := watch(t, d.c, "votes", cursor)
	commits := 0
	// follow reads commits until one holds every vote and is of another
	// generation than not (0: any), and returns its generation.
	follow := func(what string, not uint64) uint64 {
		t.Helper()
		want := v.ends()
		for {
			before := v.countAt(cp.at)
			st, changed := fs.untilCommitChanged(&cp)
			commits++
			after := v.countAt(st.Positions)
			checkCopy(t, fmt.Sprintf("%s, commit %d", what, commits), cp, after)
			checkChanged(t, fmt.Sprintf("%s, commit %d", what, commits), changed, before, after)
			if reached, _ := st.Positions.Reached(want); reached && st.Generation != not {
				return st.Generation
			}
		}
	}
	var gen uint64
	for round := 1; round <= 4; round++ {
		v.write(t, topic, round, 20, 2)
		gen = follow(fmt.Sprintf("round %d", round), 0)
	}

	v.write(t, topic, 5, 25, 2)
	if r := d.c.post(t, "/v1/tables/votes/rebuild?wait=1", ""); r.status != http.StatusOK {
		t.Fatalf("rebuild: %d %s", r.status, r.body)
	}
	// The publish's commit (the rebuild answered after it) comes as the
	// groups the new generation counts differently from the copy: none,
	// or those of the votes the follower had not applied yet.
	follow("the rebuild", gen)
	for round := 6; round <= 7; round++ {
		v.write(t, topic, round, 20, 2)
		follow(fmt.Sprintf("round %d after the rebuild", round), 0)
	}
	t.Logf("%d commits, %d booths", commits, len(cp.rows))
}

// TestChangesUpdate: a watcher of a table that is not followed sees an
// in-place update (POST .../update) as the keys it changed and one commit
// at the update's ends (what was produced before it); its copy equals the
// oracle there. Twice, so the second starts from the first one's commit.
func TestChangesUpdate(t *testing.T) {
	topic := unique(t, "topic")
	broker.TestTopic(t, topic, 2, nil)
	var p produced
	p.write(t, topic, keyed(0, 40, 2, 25))
	cfg := baseConfig(t, kafkaTable("t", topic, nil))
	cfg.Update = testUpdate
	d := start(t, cfg)
	waitFor(t, "the first build", 60*time.Second, func() bool { g := d.c.table(t, "t").Generation; return g != nil && *g != 0 })
	cp, cursor := list(t, d.c, "t")
	if !maps.Equal(cp.at, p.ends()) {
		t.Fatalf("the list at %v, want the build's ends %v", cp.at, p.ends())
	}
	checkCopy(t, "the list", cp, p.foldAt(cp.at))
	fs := watch(t, d.c, "t", cursor)
	for round := 1; round <= 2; round++ {
		before := p.foldAt(cp.at)
		p.write(t, topic, keyed(round, 30, 2, 25))
		checkUpdated(t, d.c, "t")
		st, changed := fs.untilCommitChanged(&cp)
		if want := p.ends(); !maps.Equal(st.Positions, want) {
			t.Fatalf("round %d: the update's commit at %v, want its ends %v", round, st.Positions, want)
		}
		after := p.foldAt(st.Positions)
		checkCopy(t, fmt.Sprintf("round %d, after the update", round), cp, after)
		checkChanged(t, fmt.Sprintf("round %d", round), changed, before, after)
		if len(changed) == 0 {
			t.Fatalf("round %d: the update's commit names no change", round)
		}
	}
}

// TestChangesDaemonRestart: a watcher holds a commit's cursor; the daemon
// is stopped (its stream ends with shutting_down) and started again on the
// same file. The feed's doc allows a resume or a 410 there; this daemon
// draws a new epoch at each start (serve's epochs), so the old cursor is
// 410 cursor_gone naming the new head, and a new list then watch, while
// more records are produced and followed, equals the oracle at every
// commit.
func TestChangesDaemonRestart(t *testing.T) {
	topic := unique(t, "topic")
	broker.TestTopic(t, topic, 2, nil)
	var p produced
	p.write(t, topic, keyed(0, 40, 2, 20))
	cfg := baseConfig(t, followedTable("live", topic, FollowSettings{}))
	d := start(t, cfg)
	waitFor(t, "state following", 60*time.Second, func() bool { return d.c.table(t, "live").State == StateFollowing })
	cp, cursor := list(t, d.c, "live")
	fs := watch(t, d.c, "live", cursor)
	p.write(t, topic, keyed(1, 20, 2, 20))
	want := p.ends()
	lastCursor := cursor
	for {
		st := fs.untilCommit(&cp)
		checkCopy(t, "before the restart", cp, p.foldAt(st.Positions))
		lastCursor = st.Cursor
		if reached, _ := st.Positions.Reached(want); reached {
			break
		}
	}
	d.stop(t)
	if code := fs.endsWith(); code != api.CodeShuttingDown {
		t.Fatalf("the stream ended with %q at the stop, want %s", code, api.CodeShuttingDown)
	}

	p.write(t, topic, keyed(2, 20, 2, 20))
	d = start(t, cfg)
	waitFor(t, "state following after the restart", 60*time.Second, func() bool { return d.c.table(t, "live").State == StateFollowing })
	resp, _ := watchRaw(t, d.c, "live", "from="+lastCursor)
	if resp.StatusCode == http.StatusOK {
		t.Fatalf("the cursor of the daemon before the restart was resumed; want 410 (each start draws a new epoch)")
	}
	e := errorOf(t, resp)
	head, err := api.ParseCursor(e.Cursor)
	if resp.StatusCode != http.StatusGone || e.Code != api.CodeCursorGone || err != nil || e.Positions == nil {
		t.Fatalf("the old cursor after the restart: %d %+v (%v), want 410 cursor_gone with the head's cursor", resp.StatusCode, e, err)
	}
	old, err := api.ParseCursor(lastCursor)
	if err != nil {
		t.Fatal(err)
	}
	if head.Epoch == old.Epoch {
		t.Fatalf("410 with the head in the old epoch %d: the restart kept the epoch", old.Epoch)
	}

	cp, cursor = list(t, d.c, "live")
	checkCopy(t, "the list after the restart", cp, p.foldAt(cp.at))
	fs = watch(t, d.c, "live", cursor)
	for round := 3; round <= 5; round++ {
		p.write(t, topic, keyed(round, 20, 2, 20))
		want := p.ends()
		for {
			st := fs.untilCommit(&cp)
			checkCopy(t, fmt.Sprintf("after the restart, round %d", round), cp, p.foldAt(st.Positions))
			if reached, _ := st.Positions.Reached(want); reached {
				break
			}
		}
	}
}
