package serve

import (
	"bufio"
	"encoding/json"
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/api"
)

// TestChangesStuckWatcherCut: a watcher that opened its stream and never
// reads again is cut off while it does not read: once it is further
// behind than slow_watcher_bytes, its blocked write gives up after
// FeedCutGrace and its place among the watchers is freed, while the
// producer goes on, another watcher follows every commit and reads
// answer. What it received before the cut is a consistent prefix: its
// copy equals the oracle fold at each commit line it got.
func TestChangesStuckWatcherCut(t *testing.T) {
	topic := unique(t, "topic")
	broker.TestTopic(t, topic, 1, nil)
	var p produced
	p.write(t, topic, keyed(0, 10, 1, 50))
	cfg := baseConfig(t, followedTable("live", topic, FollowSettings{}))
	cfg.FeedSlowBytes = 32 << 10
	cfg.FeedCutGrace = 100 * time.Millisecond
	d := start(t, cfg)
	waitFor(t, "state following", 60*time.Second, func() bool { return d.c.table(t, "live").State == StateFollowing })
	cp, cursor := list(t, d.c, "live")
	stuckCopy := copyOf{rows: maps.Clone(cp.rows), at: cp.at}
	fast := watch(t, d.c, "live", cursor)
	stuckResp, _ := watchRaw(t, d.c, "live", "from="+cursor)
	if stuckResp.StatusCode != http.StatusOK {
		t.Fatal(stuckResp.StatusCode)
	}
	waitFor(t, "two watchers", 30*time.Second, func() bool { return d.s.feeds.Watchers() == 2 })

	// Rounds of 128 KiB until the stuck watcher is cut: far more than
	// the sockets between the daemon and it hold.
	var want api.Positions
	for round := 1; d.s.feeds.Watchers() == 2; round++ {
		if round > 200 {
			t.Fatalf("the stuck watcher still watches after %d rounds of 128 KiB", round-1)
		}
		want = writeBig(t, &p, topic, round)
		fast.follow(t, "the reading watcher", &cp, &p, want)
		if r := d.c.get(t, "/v1/tables/live/count"); r.status != http.StatusOK {
			t.Fatalf("count while a watcher is stuck: %d", r.status)
		}
	}
	// Cut: reading it now gives what the sockets held, then its end.
	// Lines after its last commit line may be in the copy (changes are
	// absolute: a resume from that commit repairs them).
	br := bufio.NewReaderSize(stuckResp.Body, 64<<10)
	commits := 0
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			break // EOF, or the connection closed in a line
		}
		var l api.FeedLine
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("line %.80q of the cut watcher: %v", line, err)
		}
		switch {
		case l.Key != nil && l.Value == nil:
			delete(stuckCopy.rows, *l.Key)
		case l.Key != nil:
			stuckCopy.rows[*l.Key] = *l.Value
		case l.Commit != nil:
			stuckCopy.at = l.Commit.Positions
			checkCopy(t, "the cut watcher", stuckCopy, p.foldAt(stuckCopy.at))
			commits++
		case l.Error != nil && l.Error.Code != api.CodeWatcherTooSlow:
			t.Fatalf("the cut watcher ended with %s", l.Error.Code)
		}
	}
	if reached, _ := stuckCopy.at.Reached(want); reached {
		t.Fatalf("the cut watcher got every commit (to %v, %d commit lines)", stuckCopy.at, commits)
	}
	// The reading watcher goes on.
	p.write(t, topic, keyed(999, 10, 1, 50))
	fast.follow(t, "the reading watcher after the cut", &cp, &p, p.ends())
}
