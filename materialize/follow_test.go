package materialize_test

// Tests of follow mode against oracles written here: the latest and count
// folds over the records the test produced, the broker's own high
// watermarks as the positions a follower must reach, and a reader that
// checks every snapshot it sees is a per-partition prefix of the log.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/cpushare"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// followRig is one database with one table of one topic, rebuilt once and
// then followed by a goroutine the rig owns.
type followRig struct {
	t      *testing.T
	db     *store.DB
	topic  string
	spec   materialize.Spec
	log    zerolog.Logger
	status *materialize.FollowStatus
	// checkInterval is the follower's CheckInterval (0: the default).
	checkInterval time.Duration
	// cpu is the share the rig's rebuilds and follower take turns on
	// (nil: unlimited).
	cpu *cpushare.Share
	// produced is every record written, with its offset and whether it
	// is committed; the oracle folds it.
	mu       sync.Mutex
	produced []tRec

	cancel context.CancelFunc
	done   chan error
}

type tRec struct {
	p         int32
	o         int64
	k, v      []byte
	committed bool
}

func newFollowRig(t *testing.T, parts int32, spec materialize.Spec) *followRig {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "f.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	topic := uniqueTopic(t, parts)
	spec.Topic = topic
	return &followRig{t: t, db: db, topic: topic, spec: spec, status: &materialize.FollowStatus{},
		log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)}
}

func (r *followRig) produce(recs []localkafka.Record) {
	r.t.Helper()
	offs, err := broker.Produce(context.Background(), r.topic, recs)
	if err != nil {
		r.t.Fatal(err)
	}
	r.add(recs, offs, true)
}

func (r *followRig) add(recs []localkafka.Record, offs []int64, committed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, rec := range recs {
		r.produced = append(r.produced, tRec{p: rec.Partition, o: offs[i], k: rec.Key, v: rec.Value, committed: committed})
	}
}

func (r *followRig) rebuild() materialize.Report {
	r.t.Helper()
	opts, err := r.spec.Options(r.db, broker.Addr, nil, r.log)
	if err != nil {
		r.t.Fatal(err)
	}
	opts.Replay.StallTimeout = 20 * time.Second
	opts.AllowEmpty = true
	opts.CPU = r.cpu
	rep, err := materialize.Rebuild(context.Background(), opts)
	if err != nil {
		r.t.Fatal(err)
	}
	return rep
}

// follow starts the follower; stop ends it and returns its error.
func (r *followRig) follow() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() {
		r.done <- materialize.KeepCurrent(ctx, materialize.FollowOptions{
			DB: r.db, Spec: r.spec, Status: r.status, Log: r.log, CPU: r.cpu,
			Replay:   replay.Config{Brokers: broker.Addr, StallTimeout: 20 * time.Second},
			Interval: 50 * time.Millisecond, Refresh: 100 * time.Millisecond, CheckInterval: r.checkInterval,
		})
	}()
	r.t.Cleanup(func() { r.stop() })
}

func (r *followRig) stop() error {
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	r.cancel = nil
	return <-r.done
}

// checkpoint returns the table's checkpoint ends.
func (r *followRig) ends() map[int32]int64 {
	r.t.Helper()
	out := map[int32]int64{}
	err := r.db.ReadTable(r.spec.TableName(), func(s *store.Snapshot) error {
		cp, _, err := checkpoint.Load(s.Tx, r.spec.TableName())
		for _, p := range cp.Partitions {
			out[p.Partition] = p.End
		}
		return err
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

// highs are the broker's high watermarks, asked of the broker itself.
func (r *followRig) highs(parts int32) map[int32]int64 {
	out := map[int32]int64{}
	for p := int32(0); p < parts; p++ {
		out[p] = marksOf(r.t, r.topic)[p].High
	}
	return out
}

// awaitEnds waits until the checkpoint's ends are want (a "did not hang"
// bound), or the follower ends.
func (r *followRig) awaitEnds(want map[int32]int64) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := r.ends()
		if cmp.Equal(got, want) {
			return
		}
		select {
		case err := <-r.done:
			r.done <- err // for stop, which the test's cleanup calls
			r.t.Fatalf("the follower ended at %v (want %v): %v", got, want, err)
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("checkpoint ends %v, want %v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *followRig) rows() map[string]string {
	r.t.Helper()
	out := map[string]string{}
	err := r.db.Scan(r.spec.TableName(), nil, 0, func(k, v []byte) error {
		out[string(k)] = string(v)
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

// latestOracle folds the committed records plainly.
func (r *followRig) latestOracle() map[string]string { return r.latestOracleTo(nil) }

// latestOracleTo folds the committed records below ends (nil: all)
// plainly.
func (r *followRig) latestOracleTo(ends map[int32]int64) map[string]string {
	r.mu.Lock()
	var recs []tRec
	for _, rec := range r.produced {
		if end, ok := ends[rec.p]; ends == nil || ok && rec.o < end {
			recs = append(recs, rec)
		}
	}
	r.mu.Unlock()
	sort.SliceStable(recs, func(i, j int) bool {
		if recs[i].p != recs[j].p {
			return recs[i].p < recs[j].p
		}
		return recs[i].o < recs[j].o
	})
	out := map[string]string{}
	for _, rec := range recs {
		switch {
		case !rec.committed || len(rec.k) == 0:
		case rec.v == nil:
			delete(out, string(rec.k))
		default:
			out[string(rec.k)] = string(rec.v)
		}
	}
	return out
}

func randomRecords(rng *rand.Rand, parts int32, n int, tag string) []localkafka.Record {
	out := make([]localkafka.Record, n)
	for i := range out {
		p := int32(rng.Intn(int(parts)))
		out[i] = localkafka.Record{Partition: p, Key: []byte(fmt.Sprintf("p%d-k%02d", p, rng.Intn(20)))}
		switch x := rng.Intn(10); {
		case x == 0:
			out[i].Key = nil
			out[i].Value = []byte("nokey")
		case x == 1:
			// a tombstone
		default:
			out[i].Value = []byte(fmt.Sprintf("%s-%d-%d", tag, i, rng.Int()))
		}
	}
	return out
}

func testRand(t *testing.T) *rand.Rand {
	seed := time.Now().UnixNano()
	if s := os.Getenv("KMATERIALIZE_TEST_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d", seed)
	return rand.New(rand.NewSource(seed))
}

// TestFollowLatestAcrossOpenTransaction: a followed latest table applies
// what is produced after its rebuild; an open transaction holds it at the
// last stable offset (neither the transaction's records nor the committed
// records after it are applied while it is open), an aborted transaction
// never shows, and once the transaction commits the table equals the
// oracle over every committed record with its checkpoint at the broker's
// high watermarks.
func TestFollowLatestAcrossOpenTransaction(t *testing.T) {
	rng := testRand(t)
	r := newFollowRig(t, 2, materialize.Spec{Name: "latest"})
	r.produce(randomRecords(rng, 2, 200, "a"))
	r.rebuild()
	r.follow()
	if got, want := r.rows(), r.latestOracle(); !cmp.Equal(got, want) {
		t.Fatalf("after the rebuild: %s", cmp.Diff(want, got))
	}
	r.produce(randomRecords(rng, 2, 300, "b"))
	r.awaitEnds(r.highs(2))
	if got, want := r.rows(), r.latestOracle(); !cmp.Equal(got, want) {
		t.Fatalf("after following (-oracle +table):\n%s", cmp.Diff(want, got))
	}

	// An open transaction on partition 0, then committed records after it.
	ctx := context.Background()
	txn, err := broker.BeginTxn(ctx, r.topic, "follow-"+r.topic)
	if err != nil {
		t.Fatal(err)
	}
	txnRecs := []localkafka.Record{{Partition: 0, Key: []byte("p0-k00"), Value: []byte("in-txn")}, {Partition: 0, Key: []byte("txn-only"), Value: []byte("x")}}
	offs, err := txn.Produce(ctx, txnRecs)
	if err != nil {
		t.Fatal(err)
	}
	lso := offs[0]
	before := r.latestOracle()
	after := []localkafka.Record{{Partition: 0, Key: []byte("after-txn"), Value: []byte("y")}, {Partition: 1, Key: []byte("p1-other"), Value: []byte("z")}}
	r.produce(after)
	// Partition 1 is not held: the follower reaches its high watermark.
	// Partition 0 must stop at the transaction's first offset.
	want := r.highs(2)
	want[0] = lso
	r.awaitEnds(want)
	// Give the follower the chance to apply what it must not (several
	// intervals and refreshes), then check it did not.
	time.Sleep(500 * time.Millisecond)
	if got := r.ends(); !cmp.Equal(got, want) {
		t.Fatalf("with the transaction open: ends %v, want %v (partition 0 held at the LSO %d)", got, want, lso)
	}
	got := r.rows()
	before["p1-other"] = "z"
	if !cmp.Equal(got, before) {
		t.Fatalf("with the transaction open the table shows uncommitted or later records (-want +table):\n%s", cmp.Diff(before, got))
	}
	if err := txn.End(ctx, true); err != nil {
		t.Fatal(err)
	}
	r.add(txnRecs, offs, true)

	// An aborted transaction: never applied.
	abort, err := broker.BeginTxn(ctx, r.topic, "follow-abort-"+r.topic)
	if err != nil {
		t.Fatal(err)
	}
	abortRecs := []localkafka.Record{{Partition: 1, Key: []byte("aborted"), Value: []byte("never")}}
	aoffs, err := abort.Produce(ctx, abortRecs)
	if err != nil {
		t.Fatal(err)
	}
	if err := abort.End(ctx, false); err != nil {
		t.Fatal(err)
	}
	r.add(abortRecs, aoffs, false)
	r.produce(randomRecords(rng, 2, 50, "c"))
	r.awaitEnds(r.highs(2))
	if got, want := r.rows(), r.latestOracle(); !cmp.Equal(got, want) {
		t.Fatalf("after the commit (-oracle +table):\n%s", cmp.Diff(want, got))
	}
	m, err := r.db.Table("latest")
	if err != nil {
		t.Fatal(err)
	}
	if m.Keys != int64(len(r.latestOracle())) {
		t.Fatalf("metadata keys %d, oracle %d", m.Keys, len(r.latestOracle()))
	}
	if err := r.stop(); err != nil {
		t.Fatalf("follower: %v", err)
	}
}

// vote is one count-fold record.
func vote(p int32, id, booth, extra string) localkafka.Record {
	v, _ := json.Marshal(map[string]string{"event_id": id, "booth": booth, "note": extra})
	return localkafka.Record{Partition: p, Key: []byte(id), Value: v}
}

// countRows is the count oracle: distinct event ids per booth.
func countRows(recs []localkafka.Record) map[string]string {
	booth := map[string]string{}
	for _, r := range recs {
		var m map[string]string
		_ = json.Unmarshal(r.Value, &m)
		booth[m["event_id"]] = m["booth"]
	}
	n := map[string]int{}
	for _, b := range booth {
		n[b]++
	}
	out := map[string]string{}
	for b, c := range n {
		out[b] = strconv.Itoa(c)
	}
	return out
}

// TestFollowCountDedupesAndStopsOnConflict: a followed count table counts
// each event id once across the rebuild and the increments (retries in
// another partition, retries within one batch); an event id seen again with
// other content stops the follower with a *fold.ConflictError, leaving the
// table and its checkpoint as they were before that batch.
func TestFollowCountDedupesAndStopsOnConflict(t *testing.T) {
	rng := testRand(t)
	r := newFollowRig(t, 3, materialize.Spec{Name: "votes", Fold: materialize.FoldCount, IdentityField: "event_id", GroupField: "booth", IgnoreFields: []string{"note"}})
	var all []localkafka.Record
	gen := func(n int) []localkafka.Record {
		var out []localkafka.Record
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("e%d", rng.Intn(400))
			booth := fmt.Sprintf("b%d", len(id)%3) // a function of the id: a retry has the same content
			for _, c := range id {
				booth = fmt.Sprintf("b%d", (int(c)+len(booth))%5)
			}
			out = append(out, vote(int32(rng.Intn(3)), id, booth, strconv.Itoa(rng.Int())))
		}
		return out
	}
	first := gen(300)
	r.produce(first)
	all = append(all, first...)
	r.rebuild()
	r.follow()
	for i := 0; i < 5; i++ {
		more := gen(100)
		r.produce(more)
		all = append(all, more...)
	}
	r.awaitEnds(r.highs(3))
	if got, want := r.rows(), countRows(all); !cmp.Equal(got, want) {
		t.Fatalf("count table (-oracle +table):\n%s", cmp.Diff(want, got))
	}
	rowsBefore, endsBefore := r.rows(), r.ends()

	// e0..e399 are all taken or may be: a conflicting id is one that was
	// produced, with another booth.
	var m map[string]string
	_ = json.Unmarshal(all[0].Value, &m)
	bad := vote(1, m["event_id"], m["booth"]+"-other", "x")
	r.produce([]localkafka.Record{bad})
	select {
	case err := <-r.done:
		r.cancel = nil
		var ce *fold.ConflictError
		if !errors.As(err, &ce) || ce.Identity != m["event_id"] {
			t.Fatalf("follower ended with %v, want a conflict on %q", err, m["event_id"])
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the follower did not stop on the conflict")
	}
	if got := r.rows(); !cmp.Equal(got, rowsBefore) {
		t.Fatalf("the conflict changed the table:\n%s", cmp.Diff(rowsBefore, got))
	}
	if got := r.ends(); !cmp.Equal(got, endsBefore) {
		t.Fatalf("the conflict moved the checkpoint: %v, was %v", got, endsBefore)
	}
}

// TestFollowReadsArePrefixes: while a follower applies a stream of
// numbered records (key "p<P>-<seq>", one per record, so a partition's rows
// are exactly the records applied from it), a reader checks in every
// snapshot that each partition's rows are 0..n-1 with no hole, that the
// checkpoint in the same transaction says exactly n records were applied,
// and that n never goes backwards; with one reader and with two, whose
// applies each commit every partition's position.
func TestFollowReadsArePrefixes(t *testing.T) {
	for _, readers := range []int{1, 2} {
		t.Run(fmt.Sprintf("readers%d", readers), func(t *testing.T) { testFollowReadsArePrefixes(t, readers) })
	}
}

func testFollowReadsArePrefixes(t *testing.T, readers int) {
	const parts = 3
	r := newFollowRig(t, parts, materialize.Spec{Name: "seq", Readers: readers})
	seq := make([]int, parts)
	next := func(n int) []localkafka.Record {
		var out []localkafka.Record
		for i := 0; i < n; i++ {
			p := i % parts
			out = append(out, localkafka.Record{Partition: int32(p), Key: []byte(fmt.Sprintf("p%d-%08d", p, seq[p])), Value: []byte(strconv.Itoa(seq[p]))})
			seq[p]++
		}
		return out
	}
	r.produce(next(30))
	r.rebuild()
	r.follow()

	stop := make(chan struct{})
	readerDone := make(chan error, 1)
	var snapshots int
	go func() {
		last := make([]int, parts)
		for {
			select {
			case <-stop:
				readerDone <- nil
				return
			default:
			}
			counts := make([]int, parts)
			var ends map[int32]int64
			err := r.db.ReadTable("seq", func(s *store.Snapshot) error {
				err := s.Rows(nil, 0, func(k, v []byte) error {
					var p, n int
					if _, err := fmt.Sscanf(string(k), "p%d-%d", &p, &n); err != nil {
						return fmt.Errorf("key %q: %v", k, err)
					}
					if n != counts[p] {
						return fmt.Errorf("partition %d: row %d after %d rows: a hole", p, n, counts[p])
					}
					counts[p]++
					return nil
				})
				if err != nil {
					return err
				}
				cp, _, err := checkpoint.Load(s.Tx, "seq")
				ends = map[int32]int64{}
				for _, pp := range cp.Partitions {
					ends[pp.Partition] = pp.End
				}
				return err
			})
			if err != nil {
				readerDone <- err
				return
			}
			for p := 0; p < parts; p++ {
				// Plain produces: offset i holds record i.
				if int64(counts[p]) != ends[int32(p)] {
					readerDone <- fmt.Errorf("partition %d: %d rows but the checkpoint says %d records applied", p, counts[p], ends[int32(p)])
					return
				}
				if counts[p] < last[p] {
					readerDone <- fmt.Errorf("partition %d went back from %d to %d rows", p, last[p], counts[p])
					return
				}
				last[p] = counts[p]
			}
			snapshots++
		}
	}()
	for i := 0; i < 40; i++ {
		recs := next(1 + i%7)
		if _, err := broker.ProduceEach(context.Background(), r.topic, recs); err != nil {
			t.Fatal(err)
		}
		if i == 19 {
			// Half way, wait for the follower: at least two applies,
			// whatever the machine's load lets it batch together.
			r.awaitEnds(r.highs(parts))
		}
	}
	r.awaitEnds(r.highs(parts))
	close(stop)
	if err := <-readerDone; err != nil {
		t.Fatal(err)
	}
	if st := r.status.Snapshot(); st.Applies < 2 || snapshots < 2 {
		t.Fatalf("%d applies and %d snapshots: the reader did not watch the follower work", st.Applies, snapshots)
	}
	t.Logf("%d snapshots checked over %d applies", snapshots, r.status.Snapshot().Applies)
}

// TestFollowCheckpointBelowLow: records deleted above a table's checkpoint
// before the follower read them stop it with ErrRecordsRemoved
// (ErrCheckpointBelowLow) naming the partition, the checkpoint and the low;
// the table is unchanged.
func TestFollowCheckpointBelowLow(t *testing.T) {
	rng := testRand(t)
	r := newFollowRig(t, 2, materialize.Spec{Name: "trunc"})
	r.produce(randomRecords(rng, 2, 50, "a"))
	r.rebuild()
	cp := r.ends()
	r.produce([]localkafka.Record{{Partition: 1, Key: []byte("k1"), Value: []byte("1")}, {Partition: 1, Key: []byte("k2"), Value: []byte("2")}})
	low := cp[1] + 1
	if err := broker.DeleteRecords(context.Background(), r.topic, 1, low); err != nil {
		t.Fatal(err)
	}
	before := r.rows()
	r.follow()
	var err error
	select {
	case err = <-r.done:
		r.cancel = nil
	case <-time.After(60 * time.Second):
		t.Fatal("the follower did not stop")
	}
	if !errors.Is(err, replay.ErrRecordsRemoved) || !errors.Is(err, replay.ErrCheckpointBelowLow) {
		t.Fatalf("follower: %v, want ErrRecordsRemoved and ErrCheckpointBelowLow", err)
	}
	for _, s := range []string{"partition 1", fmt.Sprintf("checkpoint %d", cp[1]), fmt.Sprintf("low %d", low)} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if got := r.rows(); !cmp.Equal(got, before) {
		t.Fatalf("table changed: %s", cmp.Diff(before, got))
	}
}

// TestRebuildCatchesUpWithFollower: a rebuild whose CatchUp returns
// positions beyond its end marks reads on into the same generation up to
// them: the published table equals the oracle over every record up to
// those positions, and its checkpoint ends there.
func TestRebuildCatchesUpWithFollower(t *testing.T) {
	rng := testRand(t)
	for _, spec := range []materialize.Spec{
		{Name: "latest"},
		{Name: "votes", Fold: materialize.FoldCount, IdentityField: "event_id", GroupField: "booth"},
	} {
		t.Run(spec.TableName(), func(t *testing.T) {
			r := newFollowRig(t, 2, spec)
			gen := func(n int, tag string) []localkafka.Record {
				if spec.Fold != materialize.FoldCount {
					return randomRecords(rng, 2, n, tag)
				}
				var out []localkafka.Record
				for i := 0; i < n; i++ {
					id := fmt.Sprintf("%s%d", tag, rng.Intn(n))
					out = append(out, vote(int32(rng.Intn(2)), id, "b"+id[len(id)-1:], ""))
				}
				return out
			}
			var all []localkafka.Record
			first := gen(100, "a")
			r.produce(first)
			all = append(all, first...)
			opts, err := r.spec.Options(r.db, broker.Addr, nil, r.log)
			if err != nil {
				t.Fatal(err)
			}
			var targets map[int32]int64
			calls := 0
			opts.CatchUp = func(ctx context.Context) (map[int32]int64, error) {
				calls++
				// Records that arrive after the rebuild's end marks: a
				// follower would have applied them to the old table.
				more := gen(80, "b")
				r.produce(more)
				all = append(all, more...)
				targets = r.highs(2)
				return targets, nil
			}
			rep, err := materialize.Rebuild(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			if calls != 1 {
				t.Fatalf("CatchUp called %d times", calls)
			}
			want := r.latestOracle()
			if spec.Fold == materialize.FoldCount {
				want = countRows(all)
			}
			if got := r.rows(); !cmp.Equal(got, want) {
				t.Fatalf("(-oracle +table):\n%s", cmp.Diff(want, got))
			}
			if got := r.ends(); !cmp.Equal(got, targets) {
				t.Fatalf("checkpoint %v, want the catch-up targets %v", got, targets)
			}
			if rep.Meta.Records != int64(len(all)) {
				t.Fatalf("records %d, produced %d", rep.Meta.Records, len(all))
			}
		})
	}
}

// TestFollowAddedPartitions: partitions added to the topic while a table
// is followed are read from their retained low (records deleted there
// before the follower saw them are not expected) and join the checkpoint
// with that low as their low and start; the table equals the oracle over
// every record at or above it. With one reader and with two (the first
// reads the added partitions).
func TestFollowAddedPartitions(t *testing.T) {
	for _, readers := range []int{1, 2} {
		t.Run(fmt.Sprintf("readers%d", readers), func(t *testing.T) { testFollowAddedPartitions(t, readers) })
	}
}

func testFollowAddedPartitions(t *testing.T, readers int) {
	rng := testRand(t)
	r := newFollowRig(t, 2, materialize.Spec{Name: "grow", Readers: readers})
	r.produce(randomRecords(rng, 2, 40, "a"))
	r.rebuild()
	r.follow()
	r.awaitEnds(r.highs(2))

	cl, err := broker.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	res, err := kadm.NewClient(cl).CreatePartitions(context.Background(), 2, r.topic)
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	// Records in the new partitions (and the old ones): the follower finds
	// the new partitions at its next refresh and reads them from their low.
	r.produce(randomRecords(rng, 4, 120, "b"))
	r.awaitEnds(r.highs(4))
	if got, want := r.rows(), r.latestOracle(); !cmp.Equal(got, want) {
		t.Fatalf("(-oracle +table):\n%s", cmp.Diff(want, got))
	}
	var cp checkpoint.Checkpoint
	if err := r.db.ReadTable("grow", func(s *store.Snapshot) error {
		var err error
		cp, _, err = checkpoint.Load(s.Tx, "grow")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(cp.Partitions) != 4 {
		t.Fatalf("checkpoint %+v: want 4 partitions", cp.Partitions)
	}
	for _, p := range cp.Partitions[2:] {
		low := marksOf(t, r.topic)[p.Partition].Low
		if p.Low != low || p.Start != low {
			t.Fatalf("added partition %+v: want low and start %d (the broker's log start)", p, low)
		}
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestFollowDecodesLikeRebuild: a followed table with value_format json
// (and on_bad_record skip) decodes what it follows as a rebuild decodes
// it: after following, its rows, records and skipped counts equal those of
// a full rebuild over the same records into another file, and a value that
// is not JSON is left out and counted as undecodable.
func TestFollowDecodesLikeRebuild(t *testing.T) {
	spec := materialize.Spec{Name: "json", ValueFormat: "json", OnBadRecord: fold.SkipBadRecords}
	r := newFollowRig(t, 2, spec)
	val := func(p int32, k, v string) localkafka.Record {
		return localkafka.Record{Partition: p, Key: []byte(k), Value: []byte(v)}
	}
	r.produce([]localkafka.Record{val(0, "a", `{"n": 1, "b": [1, 2]}`), val(1, "b", `{ "z":"x","a":1.50 }`)})
	r.rebuild()
	r.follow()
	r.produce([]localkafka.Record{val(0, "a", `{"b":  2,"a":{"y":1,"x":2}}`), val(1, "c", `not json`), val(1, "d", `[1,  2]`), val(0, "e", `"s"`)})
	r.awaitEnds(r.highs(2))
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	got := r.rows()

	other := newFollowRig(t, 2, spec)
	other.topic, other.spec.Topic = r.topic, r.topic
	other.rebuild()
	want := other.rows()
	if !cmp.Equal(got, want) {
		t.Fatalf("followed (+) against rebuilt (-):\n%s", cmp.Diff(want, got))
	}
	if _, ok := got["c"]; ok || got["a"] != `{"a":{"x":2,"y":1},"b":2}` {
		t.Fatalf("rows %v: want c left out and a's value canonical", got)
	}
	m, err := r.db.Table("json")
	if err != nil {
		t.Fatal(err)
	}
	wm, err := other.db.Table("json")
	if err != nil {
		t.Fatal(err)
	}
	if m.Records != wm.Records || m.Skipped != wm.Skipped || m.SkippedByReason[fold.ReasonUndecodable] != 1 {
		t.Fatalf("followed: records %d, skipped %d %v; rebuilt: records %d, skipped %d", m.Records, m.Skipped, m.SkippedByReason, wm.Records, wm.Skipped)
	}
}

// TestFollowByStoredDefinition: a table rebuilt raw is followed with a
// Spec that says value_format json. The follower folds by the stored
// definition: the values as written, whitespace and all, and the record
// that is not JSON kept, as the raw oracle says.
func TestFollowByStoredDefinition(t *testing.T) {
	r := newFollowRig(t, 1, materialize.Spec{Name: "stored"})
	val := func(k, v string) localkafka.Record { return localkafka.Record{Key: []byte(k), Value: []byte(v)} }
	r.produce([]localkafka.Record{val("a", `{ "n" : 1 }`), val("b", `[1,  2]`)})
	r.rebuild()
	r.spec.ValueFormat = "json"
	if ch := materialize.DefinitionChanges(materialize.Spec{Topic: r.topic}, r.spec); !cmp.Equal(ch, []string{materialize.FieldValueFormat}) {
		t.Fatalf("the follower's Spec differs from the stored one in %q, want value_format only", ch)
	}
	r.follow()
	r.produce([]localkafka.Record{val("a", `{ "n" :  2 }`), val("c", `not json`), val("d", `"s"`)})
	r.awaitEnds(r.highs(1))
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r.latestOracle(), r.rows()); diff != "" {
		t.Fatalf("followed by the stored raw definition (-oracle +table):\n%s", diff)
	}
}
