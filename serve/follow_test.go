package serve

// Tests of the daemon's follow mode: the API's follower fields, readiness
// and metrics, a rebuild of a followed table that catches up before it
// swaps (readers never see the table go back), and following stopped by
// records deleted below the checkpoint, with and without rebuild_if_needed.
// Tables are compared with the oracle of the records the test produced.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// followedTable is table name (latest fold) of topic, followed, as
// cmd/kmaterialize wires it.
func followedTable(name, topic string, f FollowSettings) Table {
	return followedTableHook(name, topic, f, nil)
}

// catchUpFn is a rebuild's catch-up.
type catchUpFn = func(context.Context) (map[int32]int64, error)

// followedTableHook is followedTable whose rebuild's catch-up is wrapped
// by hook (when not nil).
func followedTableHook(name, topic string, f FollowSettings, hook func(catchUpFn) catchUpFn) Table {
	return followedSpec(materialize.Spec{Name: name, Topic: topic, StallTimeout: 20 * time.Second}, f, hook)
}

// followedSpec is the followed table spec defines.
func followedSpec(spec materialize.Spec, f FollowSettings, hook func(catchUpFn) catchUpFn) Table {
	name := spec.TableName()
	rebuild := func(ctx context.Context, db *store.DB, log zerolog.Logger, catchUp func(context.Context) (map[int32]int64, error)) (materialize.Report, error) {
		opts, err := spec.Options(db, broker.Addr, nil, log)
		if err != nil {
			return materialize.Report{}, err
		}
		opts.CatchUp = catchUp
		if hook != nil && catchUp != nil {
			opts.CatchUp = hook(catchUp)
		}
		return materialize.Rebuild(ctx, opts)
	}
	f.Run = func(ctx context.Context, db *store.DB, log zerolog.Logger, st *materialize.FollowStatus) error {
		return materialize.KeepCurrent(ctx, materialize.FollowOptions{DB: db, Spec: spec, Status: st, Log: log,
			Interval: 50 * time.Millisecond, Refresh: 100 * time.Millisecond,
			Replay: replay.Config{Brokers: broker.Addr, StallTimeout: 20 * time.Second}})
	}
	f.Live = func(ctx context.Context, db *store.DB, log zerolog.Logger, st *materialize.FollowStatus) error {
		return materialize.WatchLive(ctx, materialize.FollowOptions{DB: db, Spec: spec, Status: st, Log: log,
			Refresh: 100 * time.Millisecond, Replay: replay.Config{Brokers: broker.Addr, StallTimeout: 20 * time.Second}})
	}
	f.Rebuild = rebuild
	f.Retriable = materialize.FollowRetriable
	return Table{Name: name, Topic: spec.Topic, Fold: spec.Fold, Follow: &f,
		Build: func(ctx context.Context, db *store.DB, log zerolog.Logger) (materialize.Report, error) {
			return rebuild(ctx, db, log, nil)
		}}
}

// highs asks the broker for topic's high watermarks (partitions 0..n-1).
func highs(t testing.TB, topic string, n int32) map[int32]int64 {
	t.Helper()
	marks := marksOf(t, topic)
	out := map[int32]int64{}
	for p := int32(0); p < n; p++ {
		out[p] = marks[p].High
	}
	return out
}

// caughtUp reports whether the table's checkpoint ends are want.
func caughtUp(tj tableJSON, want map[int32]int64) bool {
	if len(tj.Partitions) != len(want) {
		return false
	}
	for _, p := range tj.Partitions {
		if p.End != want[p.Partition.Partition] {
			return false
		}
	}
	return true
}

// TestFollowAPI: a followed table is built, then follows: GET shows state
// following with each partition's live_high and lag (0 once caught up,
// the broker's high watermark as live_high), /metrics has the lag and apply
// counters, /readyz is 200; the rows equal the oracle after more records.
// Then an open transaction holds the follower at the last stable offset
// while records pile up behind it: the lag (11 records, over max_lag 5)
// shows per partition and /readyz says 503 naming it; once the transaction
// commits, /readyz is 200 and the rows equal the oracle.
func TestFollowAPI(t *testing.T) {
	topic := newTopic(t)
	first := records(1, 50, 20)
	produce(t, topic, first)
	d := start(t, baseConfig(t, followedTable("live", topic, FollowSettings{MaxLag: 5})))
	waitFor(t, "state following", 60*time.Second, func() bool {
		tj := d.c.table(t, "live")
		return tj.State == StateFollowing && tj.Follow != nil && tj.Follow.Lag != nil
	})
	more := records(2, 30, 20)
	produce(t, topic, more)
	want := latestOracle(latestOracle(oracle{}, first), more)
	hw := highs(t, topic, 1)
	waitFor(t, "the follower to apply the new records", 60*time.Second, func() bool {
		return caughtUp(d.c.table(t, "live"), hw)
	})
	rows, _, _ := d.c.scan(t, "live", 1000)
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("rows %v\noracle %v", rows, want)
	}
	waitFor(t, "live_high at the high watermark, lag 0", 30*time.Second, func() bool {
		tj := d.c.table(t, "live")
		p := tj.Partitions[0]
		return p.LiveHigh != nil && *p.LiveHigh == hw[0] && p.Lag != nil && *p.Lag == 0 && *tj.Follow.Lag == 0
	})
	// The counters are updated just after the commit the checkpoint shows.
	waitFor(t, fmt.Sprintf("%d records applied, running, no error", len(more)), 30*time.Second, func() bool {
		f := d.c.table(t, "live").Follow
		return f.RecordsApplied == int64(len(more)) && f.Applies >= 1 && f.Error == nil && f.Running
	})
	tj := d.c.table(t, "live")
	if r := d.c.get(t, "/readyz"); r.status != http.StatusOK {
		t.Fatalf("/readyz: %d %s", r.status, r.body)
	}
	m := d.c.get(t, "/metrics")
	for _, s := range []string{
		fmt.Sprintf(`kmaterialize_follow_lag_records{partition="0",table="live"} 0`),
		fmt.Sprintf(`kmaterialize_follow_records_applied_total{table="live"} %d`, len(more)),
		`kmaterialize_follow_apply_rate{table="live"}`,
		`kmaterialize_follow_running{table="live"} 1`,
		`kmaterialize_follow_unstable_cuts_total{table="live"} 0`,
	} {
		if !strings.Contains(string(m.body), s) {
			t.Errorf("/metrics lacks %q", s)
		}
	}

	// An open transaction holds the follower at the last stable offset:
	// its record and the ones produced after it are lag, over max_lag.
	ctx := context.Background()
	txn, err := broker.BeginTxn(ctx, topic, unique(t, "txn"))
	if err != nil {
		t.Fatal(err)
	}
	txnRecs := []localkafka.Record{{Key: []byte("in-txn"), Value: []byte("t")}}
	if _, err := txn.Produce(ctx, txnRecs); err != nil {
		t.Fatal(err)
	}
	behind := records(3, 10, 20)
	produce(t, topic, behind)
	waitFor(t, "/readyz 503 over max_lag", 30*time.Second, func() bool {
		r := d.c.get(t, "/readyz")
		return r.status == http.StatusServiceUnavailable && strings.Contains(string(r.body), "11 records behind, over max_lag 5")
	})
	tj = d.c.table(t, "live")
	if p := tj.Partitions[0]; p.Lag == nil || *p.Lag != 11 || *p.LiveHigh != hw[0]+11 || p.End != hw[0] {
		t.Fatalf("with the transaction open: partition %+v, want end %d, lag 11, live_high %d", p, hw[0], hw[0]+11)
	}
	if err := txn.End(ctx, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "/readyz 200 once caught up", 60*time.Second, func() bool {
		return d.c.get(t, "/readyz").status == http.StatusOK
	})
	want = latestOracle(want, txnRecs)
	want = latestOracle(want, behind)
	rows, _, _ = d.c.scan(t, "live", 1000)
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("after release: rows %v\noracle %v", rows, want)
	}
}

// TestFollowRebuildCatchesUpNeverBack: while records keep coming, a
// requested rebuild of a followed table builds a new generation, catches
// up with the follower and swaps it in; a reader polling the table
// meanwhile never sees a partition's sequence go back (each key holds the
// highest sequence number applied), and the final table equals the
// oracle, in state following on the new generation.
func TestFollowRebuildCatchesUpNeverBack(t *testing.T) {
	topic := newTopic(t)
	next := 0
	// The producer and the catch-up hook both produce: under mu, so that
	// the log holds the sequence numbers in order.
	var mu sync.Mutex
	batchLocked := func(n int) []localkafka.Record {
		var out []localkafka.Record
		for i := 0; i < n; i++ {
			out = append(out, localkafka.Record{Key: []byte("seq"), Value: []byte(strconv.Itoa(next))})
			out = append(out, localkafka.Record{Key: []byte(fmt.Sprintf("k%05d", next)), Value: []byte("x")})
			next++
		}
		return out
	}
	produceSeq := func(n int) error {
		mu.Lock()
		defer mu.Unlock()
		_, err := broker.ProduceEach(context.Background(), topic, batchLocked(n))
		return err
	}
	if err := produceSeq(200); err != nil {
		t.Fatal(err)
	}
	// The rebuild's catch-up first produces more records and waits until
	// the follower has applied them to the old generation: the follower is
	// then provably ahead of the rebuild's end marks, which the catch-up
	// must close.
	var d *daemon
	var ahead, caughtTo map[int32]int64
	var armed atomic.Bool // not for the first build: nothing follows yet
	hook := func(real catchUpFn) catchUpFn {
		return func(ctx context.Context) (map[int32]int64, error) {
			if !armed.Load() {
				return real(ctx)
			}
			mu.Lock()
			_, err := broker.ProduceEach(ctx, topic, batchLocked(20))
			ahead = highs(t, topic, 1)
			mu.Unlock()
			if err != nil {
				return nil, err
			}
			waitFor(t, "the follower to apply past the rebuild's end", 60*time.Second, func() bool {
				tj := d.c.table(t, "seq")
				return len(tj.Partitions) == 1 && tj.Partitions[0].End >= ahead[0]
			})
			pos, err := real(ctx)
			caughtTo = pos
			return pos, err
		}
	}
	d = start(t, baseConfig(t, followedTableHook("seq", topic, FollowSettings{}, hook)))
	waitFor(t, "state following", 60*time.Second, func() bool { return d.c.table(t, "seq").State == StateFollowing })
	gen0 := *d.c.table(t, "seq").Generation
	armed.Store(true)

	stop := make(chan struct{})
	readerErr := make(chan error, 1)
	reads := 0
	go func() {
		last := -1
		for {
			select {
			case <-stop:
				readerErr <- nil
				return
			default:
			}
			r := d.c.get(t, "/v1/tables/seq/keys/seq")
			if r.status != http.StatusOK {
				readerErr <- fmt.Errorf("GET seq: %d %s", r.status, r.body)
				return
			}
			n, _ := strconv.Atoi(string(r.body))
			if n < last {
				readerErr <- fmt.Errorf("seq went back from %d to %d (generation %s)", last, n, r.header.Get(HeaderGeneration))
				return
			}
			last = n
			reads++
		}
	}()
	producerDone := make(chan struct{})
	go func() {
		defer close(producerDone)
		for i := 0; i < 30; i++ {
			if err := produceSeq(5); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	r := d.c.do(t, "POST", "/v1/tables/seq/rebuild?wait=1", nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"exit_code":0`) {
		t.Fatalf("rebuild: %d %s", r.status, r.body)
	}
	<-producerDone
	hw := highs(t, topic, 1)
	waitFor(t, "following the new generation to the end", 60*time.Second, func() bool {
		tj := d.c.table(t, "seq")
		return tj.State == StateFollowing && caughtUp(tj, hw)
	})
	close(stop)
	if err := <-readerErr; err != nil {
		t.Fatal(err)
	}
	if caughtTo[0] < ahead[0] {
		t.Fatalf("the catch-up returned %v, want at least %v (what the follower had applied)", caughtTo, ahead)
	}
	tj := d.c.table(t, "seq")
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
	t.Logf("%d reads during the rebuild", reads)
}

// TestFollowTruncatedCheckpoint: records deleted above a followed table's
// checkpoint while the daemon was down stop following (state failed, the
// reason naming the partition and the low; the old table still served;
// /readyz 503); with rebuild_if_needed the daemon rebuilds in the
// background and follows the new table, which equals the oracle over the
// records still retained.
func TestFollowTruncatedCheckpoint(t *testing.T) {
	for _, rebuildIfNeeded := range []bool{false, true} {
		t.Run(fmt.Sprintf("rebuild_if_needed=%v", rebuildIfNeeded), func(t *testing.T) {
			topic := newTopic(t)
			first := records(1, 40, 10)
			produce(t, topic, first)
			cfg := baseConfig(t, kafkaTable("tr", topic, nil))
			d := start(t, cfg)
			waitFor(t, "first build", 60*time.Second, func() bool { return d.c.table(t, "tr").State == StateReady })
			d.stop(t)

			more := records(2, 20, 10)
			produce(t, topic, more)
			low := int64(len(first) + 5)
			if err := broker.DeleteRecords(context.Background(), topic, 0, low); err != nil {
				t.Fatal(err)
			}
			cfg2 := cfg
			cfg2.Socket = cfg.Socket + "2"
			cfg2.Tables = []Table{followedTable("tr", topic, FollowSettings{RebuildIfNeeded: rebuildIfNeeded})}
			d2 := start(t, cfg2)
			old := latestOracle(oracle{}, first)
			if !rebuildIfNeeded {
				waitFor(t, "state failed", 60*time.Second, func() bool { return d2.c.table(t, "tr").State == StateFailed })
				tj := d2.c.table(t, "tr")
				if tj.LastError == nil || !strings.Contains(tj.LastError.Error, "partition 0") ||
					!strings.Contains(tj.LastError.Error, fmt.Sprintf("low %d", low)) || tj.Follow.Running {
					t.Fatalf("last_error %+v, follow %+v: want the truncation named", tj.LastError, tj.Follow)
				}
				rows, _, _ := d2.c.scan(t, "tr", 1000)
				if fmt.Sprint(rows) != fmt.Sprint(old) {
					t.Fatalf("the old table is not served as it was: %v, oracle %v", rows, old)
				}
				if r := d2.c.get(t, "/readyz"); r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "following stopped") {
					t.Fatalf("/readyz: %d %s", r.status, r.body)
				}
				return
			}
			hw := highs(t, topic, 1)
			waitFor(t, "rebuilt and following", 60*time.Second, func() bool {
				tj := d2.c.table(t, "tr")
				return tj.State == StateFollowing && caughtUp(tj, hw)
			})
			want := latestOracle(oracle{}, more[low-int64(len(first)):])
			rows, _, _ := d2.c.scan(t, "tr", 1000)
			if fmt.Sprint(rows) != fmt.Sprint(want) {
				t.Fatalf("rows %v\noracle (retained records) %v", rows, want)
			}
			tj := d2.c.table(t, "tr")
			if tj.Partitions[0].Low != low || tj.Partitions[0].Start != low {
				t.Fatalf("partition %+v: want low and start %d", tj.Partitions[0], low)
			}
		})
	}
}

// TestFollowConflictFails: a followed count table meets an event id again
// with another booth: following stops, the table stays served with the
// counts before that record (the oracle over the records before it), its
// state is failed with the conflict (exit code 3 through the CLI's
// mapping) in last_error, and /readyz is 503.
func TestFollowConflictFails(t *testing.T) {
	topic := newTopic(t)
	vote := func(id, booth string) localkafka.Record {
		return localkafka.Record{Key: []byte(id), Value: []byte(fmt.Sprintf(`{"event_id":%q,"booth":%q}`, id, booth))}
	}
	produce(t, topic, []localkafka.Record{vote("e1", "a"), vote("e2", "a"), vote("e3", "b")})
	cfg := baseConfig(t, followedSpec(materialize.Spec{Name: "votes", Topic: topic, Fold: materialize.FoldCount,
		IdentityField: "event_id", GroupField: "booth", StallTimeout: 20 * time.Second}, FollowSettings{}, nil))
	cfg.ExitCode = func(err error) int {
		if errors.Is(err, fold.ErrInvalidData) {
			return 3
		}
		return testExitCode(err)
	}
	d := start(t, cfg)
	waitFor(t, "state following", 60*time.Second, func() bool { return d.c.table(t, "votes").State == StateFollowing })
	// A retry (same content) counts once; a new event counts.
	produce(t, topic, []localkafka.Record{vote("e1", "a"), vote("e4", "b")})
	waitFor(t, "the increment applied", 60*time.Second, func() bool { return caughtUp(d.c.table(t, "votes"), highs(t, topic, 1)) })
	want := oracle{"a": "2", "b": "2"}
	if rows, _, _ := d.c.scan(t, "votes", 100); fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("rows %v, oracle %v", rows, want)
	}
	produce(t, topic, []localkafka.Record{vote("e5", "a"), vote("e2", "b")})
	waitFor(t, "state failed", 60*time.Second, func() bool { return d.c.table(t, "votes").State == StateFailed })
	tj := d.c.table(t, "votes")
	if tj.LastError == nil || tj.LastError.ExitCode != 3 || !strings.Contains(tj.LastError.Error, `"e2"`) || tj.Follow.Running {
		t.Fatalf("last_error %+v, follow %+v: want the conflict on e2, exit code 3", tj.LastError, tj.Follow)
	}
	// The batch with the conflict was not applied (e5 with it).
	if rows, _, _ := d.c.scan(t, "votes", 100); fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("after the conflict: rows %v, want the last good state %v", rows, want)
	}
	if r := d.c.get(t, "/readyz"); r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "following stopped") {
		t.Fatalf("/readyz: %d %s", r.status, r.body)
	}
}
