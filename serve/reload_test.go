package serve

// A reload (SetTables, what SIGHUP calls) while a followed table's rebuild
// has paused the follower for its catch-up: the follower stays paused
// until the run ends, so the positions the API reports never go back.

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// TestReloadKeepsCatchUpPaused: a requested rebuild of a followed table is
// parked in its catch-up, just after the catch-up paused the follower and
// read the positions it applied; records keep coming meanwhile. The test
// first asserts that condition (the hook parked, the table's run going,
// state rebuilding, its follower not running), then reloads the tables
// (the same list, as a SIGHUP with an unchanged file does) and checks
// that the follower is still not running and the checkpoint has not moved
// past the catch-up's positions. Released, the rebuild publishes and
// following resumes. A reader sampling GET /v1/tables/seq (each
// partition's end) and the key "seq" (the highest sequence number
// applied) throughout never sees either go back, and the final table
// equals the oracle.
func TestReloadKeepsCatchUpPaused(t *testing.T) {
	topic := newTopic(t)
	next := 0
	var mu sync.Mutex // the log holds the sequence numbers in order
	produceSeq := func(n int) error {
		mu.Lock()
		defer mu.Unlock()
		var recs []localkafka.Record
		for i := 0; i < n; i++ {
			recs = append(recs, localkafka.Record{Key: []byte("seq"), Value: []byte(strconv.Itoa(next))},
				localkafka.Record{Key: []byte(fmt.Sprintf("k%05d", next)), Value: []byte("x")})
			next++
		}
		_, err := broker.ProduceEach(context.Background(), topic, recs)
		return err
	}
	if err := produceSeq(200); err != nil {
		t.Fatal(err)
	}

	// The catch-up, once armed: pause the follower and read its positions
	// (the daemon's catch-up), announce them, and wait for the release.
	var armed atomic.Bool // not for the first build: nothing follows yet
	parked := make(chan map[int32]int64, 1)
	release := make(chan struct{})
	hook := func(real catchUpFn) catchUpFn {
		return func(ctx context.Context) (map[int32]int64, error) {
			if !armed.Load() {
				return real(ctx)
			}
			pos, err := real(ctx)
			if err != nil {
				return nil, err
			}
			parked <- pos
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return pos, nil
		}
	}
	tables := []Table{followedTableHook("seq", topic, FollowSettings{}, hook)}
	d := start(t, baseConfig(t, tables...))
	waitFor(t, "state following", 60*time.Second, func() bool { return d.c.table(t, "seq").State == StateFollowing })
	gen0 := *d.c.table(t, "seq").Generation
	armed.Store(true)

	// The reader: positions and the sequence never go back.
	stop := make(chan struct{})
	readerErr := make(chan error, 1)
	var reads atomic.Int64
	go func() {
		lastSeq, lastEnd := -1, int64(-1)
		for {
			select {
			case <-stop:
				readerErr <- nil
				return
			default:
			}
			tj := d.c.table(t, "seq")
			if len(tj.Partitions) != 1 {
				readerErr <- fmt.Errorf("GET seq: %d partitions, want 1", len(tj.Partitions))
				return
			}
			end := tj.Partitions[0].End
			if end < lastEnd {
				readerErr <- fmt.Errorf("partition 0's end went back from %d to %d (state %s, generation %d)", lastEnd, end, tj.State, *tj.Generation)
				return
			}
			lastEnd = end
			r := d.c.get(t, "/v1/tables/seq/keys/seq")
			if r.status != http.StatusOK {
				readerErr <- fmt.Errorf("GET seq: %d %s", r.status, r.body)
				return
			}
			n, _ := strconv.Atoi(string(r.body))
			if n < lastSeq {
				readerErr <- fmt.Errorf("seq went back from %d to %d (generation %s)", lastSeq, n, r.header.Get(HeaderGeneration))
				return
			}
			lastSeq = n
			reads.Add(1)
		}
	}()

	type result struct {
		status int
		body   string
	}
	rebuilt := make(chan result, 1)
	go func() {
		r := d.c.do(t, "POST", "/v1/tables/seq/rebuild?wait=1", nil)
		rebuilt <- result{r.status, string(r.body)}
	}()
	var caughtTo map[int32]int64
	select {
	case caughtTo = <-parked:
	case r := <-rebuilt:
		t.Fatalf("the rebuild ended before its catch-up parked: %d %s", r.status, r.body)
	case <-time.After(60 * time.Second):
		t.Fatal("the rebuild's catch-up did not park")
	}
	// The condition: the run is going, parked in its catch-up, with the
	// follower paused at the positions the catch-up read.
	tj := d.c.table(t, "seq")
	if tj.State != StateRebuilding || tj.Run == nil || tj.Follow == nil || tj.Follow.Running {
		t.Fatalf("parked in the catch-up: state %q, run %+v, follow %+v; want rebuilding, a run, the follower not running", tj.State, tj.Run, tj.Follow)
	}
	// Records the follower would apply if anything started it again.
	if err := produceSeq(50); err != nil {
		t.Fatal(err)
	}
	if err := d.s.SetTables(tables); err != nil {
		t.Fatal(err)
	}
	// SetTables starts the followers it restarts before it returns: the
	// follower must still be paused, and the checkpoint at the catch-up's
	// positions.
	tj = d.c.table(t, "seq")
	if tj.State != StateRebuilding || tj.Follow == nil || tj.Follow.Running {
		t.Fatalf("after the reload: state %q, follow %+v; want rebuilding with the follower paused", tj.State, tj.Follow)
	}
	if !caughtUp(tj, caughtTo) {
		t.Fatalf("after the reload the checkpoint is %+v, want the catch-up's positions %v", tj.Partitions, caughtTo)
	}
	close(release)
	r := <-rebuilt
	if r.status != http.StatusOK || !strings.Contains(r.body, `"exit_code":0`) {
		t.Fatalf("rebuild: %d %s", r.status, r.body)
	}
	if err := produceSeq(20); err != nil {
		t.Fatal(err)
	}
	hw := highs(t, topic, 1)
	waitFor(t, "following the new generation to the end", 60*time.Second, func() bool {
		tj := d.c.table(t, "seq")
		return tj.State == StateFollowing && caughtUp(tj, hw)
	})
	close(stop)
	if err := <-readerErr; err != nil {
		t.Fatal(err)
	}
	tj = d.c.table(t, "seq")
	if *tj.Generation == gen0 {
		t.Fatalf("generation still %d after the rebuild", gen0)
	}
	want := oracle{"seq": strconv.Itoa(next - 1)}
	for i := 0; i < next; i++ {
		want[fmt.Sprintf("k%05d", i)] = "x"
	}
	rows, _, _ := d.c.scan(t, "seq", 10000)
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("rows (%d) differ from the oracle (%d)", len(rows), len(want))
	}
	t.Logf("catch-up parked at %v; %d reads; final positions %v", caughtTo, reads.Load(), hw)
}
