package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/store"
)

// scenario is the full-replay topic: 4 partitions, partition 2 empty, random
// records with null keys, tombstones and empty values; an aborted transaction
// over partitions 0 and 1 (partition 1 ends in its abort marker), more plain
// records, then a committed transaction over partitions 0 and 3 whose commit
// markers are those partitions' last offsets.
type scenario struct {
	topic string
	recs  []rec
}

func fullScenario(t *testing.T) scenario {
	t.Helper()
	rng := newRand(t)
	topic := newTopic(t, 4)
	var all []rec
	all = append(all, produce(t, topic, genRecords(rng, []int32{0, 1, 3}, 40+rng.Intn(20)))...)
	aborted := genRecords(rng, []int32{0, 1}, 6)
	aborted = append(aborted, localkafka.Record{Partition: 1, Key: []byte("only-in-aborted"), Value: []byte("never")})
	all = append(all, txn(t, topic, topic+"-aborted", aborted, false)...)
	all = append(all, produce(t, topic, genRecords(rng, []int32{0, 3}, 10))...)
	committed := genRecords(rng, []int32{0, 3}, 6)
	// Make sure both partitions are in the transaction.
	committed = append(committed,
		localkafka.Record{Partition: 0, Key: []byte("p0-committed"), Value: []byte("c0")},
		localkafka.Record{Partition: 3, Key: []byte("p3-committed"), Value: []byte("c3")})
	txnRecs := txn(t, topic, topic+"-committed", committed, true)
	all = append(all, txnRecs...)

	// The commit marker is the last offset of partitions 0 and 3: the high
	// watermark is one past it, two past the transaction's last record.
	last := map[int32]int64{}
	for _, r := range txnRecs {
		last[r.P] = max(last[r.P], r.O)
	}
	for _, p := range []int32{0, 3} {
		if hw := marksOf(t, topic)[p].High; hw != last[p]+2 {
			t.Fatalf("setup: partition %d high watermark %d, want the commit marker at %d to be last", p, hw, last[p]+1)
		}
	}
	if hw := marksOf(t, topic)[2].High; hw != 0 {
		t.Fatalf("setup: partition 2 high watermark %d, want empty", hw)
	}
	return scenario{topic: topic, recs: all}
}

// TestFullReplay rebuilds the full scenario and compares the scanned table
// (jsonl and json) and the `tables` listing with the oracle and the broker's
// marks.
func TestFullReplay(t *testing.T) {
	s := fullScenario(t)
	db := dbPath(t)
	r := mustCLI(t, 0, rebuildArgs(s.topic, db)...)
	want, read, skipped := oracle(s.recs, nil)
	if !strings.Contains(r.stdout, fmt.Sprintf("published table %s: generation 1, %d keys, %d records read, %d skipped", s.topic, len(want), read, skipped)) {
		t.Fatalf("rebuild stdout %q does not report the published table", r.stdout)
	}
	checkTable(t, want, scanTable(t, db, s.topic))
	checkTable(t, want, scanJSON(t, db, s.topic))

	tb, ok := tablesJSON(t, db)[s.topic]
	if !ok {
		t.Fatalf("tables does not list %s", s.topic)
	}
	if tb.Topic != s.topic || tb.Fold != "latest" || tb.Generation != 1 || tb.Keys != int64(len(want)) ||
		tb.Records != read || tb.Skipped != skipped || tb.EndMark != "high" {
		t.Fatalf("tables: %+v, want topic %s fold latest generation 1, %d keys, %d read, %d skipped, end mark high",
			tb, s.topic, len(want), read, skipped)
	}
	if len(tb.Partitions) != 4 {
		t.Fatalf("tables: %d partitions, want 4", len(tb.Partitions))
	}
	for i, p := range tb.Partitions {
		hw := marksOf(t, s.topic)[int32(i)].High
		if p.Partition != int32(i) || p.Low != 0 || p.Start != 0 || p.High != hw || p.End != hw {
			t.Fatalf("tables: partition %+v, want partition %d low 0 start 0 end mark and reached %d", p, i, hw)
		}
	}
}

// TestFromOffsets: --from-offsets starts the named partitions there and the
// others at their earliest; an offset below the retained low starts at the
// low with a warning; one above the high mark and a malformed list are bad
// usage (exit 2).
func TestFromOffsets(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 4)
	var recs []localkafka.Record
	for p := int32(0); p < 4; p++ { // at least 5 records per partition
		recs = append(recs, genRecords(rng, []int32{p}, 5)...)
	}
	recs = append(recs, genRecords(rng, []int32{0, 1, 2, 3}, 20)...)
	rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	all := produce(t, topic, recs)
	db := dbPath(t)

	mustCLI(t, 0, rebuildArgs(topic, db, "--from-offsets", "0=2,2=1")...)
	want, _, _ := oracle(all, func(r rec) bool {
		return (r.P != 0 || r.O >= 2) && (r.P != 2 || r.O >= 1)
	})
	checkTable(t, want, scanTable(t, db, topic))

	// Below the retained low: starts at the low, and says so.
	if err := broker.DeleteRecords(context.Background(), topic, 1, 3); err != nil {
		t.Fatal(err)
	}
	r := mustCLI(t, 0, rebuildArgs(topic, db, "--from-offsets", "1=1,3=4")...)
	want, _, _ = oracle(all, func(r rec) bool {
		return (r.P != 1 || r.O >= 3) && (r.P != 3 || r.O >= 4)
	})
	checkTable(t, want, scanTable(t, db, topic))
	warned := false
	for _, l := range logLines(r.stderr) {
		msg, _ := l["message"].(string)
		if l["level"] == "warn" && strings.Contains(msg, "partition 1") && strings.Contains(msg, "retained low 3") {
			warned = true
		}
	}
	if !warned {
		t.Fatalf("no warning naming partition 1 and its retained low 3 in stderr:\n%s", r.stderr)
	}
	if tb := tablesJSON(t, db)[topic]; tb.Partitions[1].Low != 3 || tb.Partitions[1].Start != 3 || tb.Partitions[3].Start != 4 {
		t.Fatalf("tables: partitions %+v, want partition 1 low and start 3, partition 3 start 4", tb.Partitions)
	}
	gen := tablesJSON(t, db)[topic].Generation

	// Above the high mark: bad usage, naming partition, offset and high mark.
	hw := marksOf(t, topic)[3].High
	r = mustCLI(t, exitUsage, rebuildArgs(topic, db, "--from-offsets", fmt.Sprintf("3=%d", hw+5))...)
	for _, s := range []string{"partition 3", fmt.Sprintf("start offset %d", hw+5), fmt.Sprintf("high mark %d", hw)} {
		if !strings.Contains(r.stderr, s) {
			t.Fatalf("stderr lacks %q:\n%s", s, r.stderr)
		}
	}
	// Malformed lists.
	for _, bad := range []string{"0:1", "0=", "x=1", "0=-1", "0=1,0=2", ""} {
		r = mustCLI(t, exitUsage, rebuildArgs(topic, db, "--from-offsets", bad)...)
		if !strings.Contains(r.stderr, "--from-offsets") {
			t.Fatalf("--from-offsets %q: stderr does not name the flag:\n%s", bad, r.stderr)
		}
	}
	// None of the failures published anything.
	if g := tablesJSON(t, db)[topic].Generation; g != gen {
		t.Fatalf("generation %d after failed rebuilds, want %d", g, gen)
	}
	checkTable(t, want, scanTable(t, db, topic))
}

// TestFromTimestamp: --from-timestamp, as RFC 3339 and as epoch
// milliseconds, starts each partition at its first record with a timestamp
// >= T; later offsets are read even when their timestamps are older.
func TestFromTimestamp(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 3)
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond)
	recs := genRecords(rng, []int32{0, 1}, 30) // partition 2 stays empty
	for i := range recs {
		recs[i].Timestamp = base.Add(time.Duration(i) * time.Minute)
	}
	// A late arrival: partition 0's last record carries an old timestamp.
	recs = append(recs, localkafka.Record{Partition: 0, Key: []byte("p0-late"), Value: []byte("late"), Timestamp: base})
	all := produce(t, topic, recs)
	db := dbPath(t)

	// oracle: per partition, everything from the first offset with ts >= T.
	from := func(T time.Time) func(rec) bool {
		start := map[int32]int64{}
		for _, r := range all {
			if !r.Ts.Before(T) {
				if s, ok := start[r.P]; !ok || r.O < s {
					start[r.P] = r.O
				}
			}
		}
		return func(r rec) bool {
			s, ok := start[r.P]
			return ok && r.O >= s
		}
	}
	T1 := base.Add(time.Duration(5+rng.Intn(20))*time.Minute + 30*time.Second)
	T2 := base.Add(time.Duration(5+rng.Intn(20)) * time.Minute) // exactly a record's timestamp
	for _, c := range []struct {
		arg string
		T   time.Time
	}{
		{T1.UTC().Format(time.RFC3339Nano), T1},
		{T1.In(time.FixedZone("", 5*3600+30*60)).Format(time.RFC3339), T1.Truncate(time.Second)},
		{strconv.FormatInt(T2.UnixMilli(), 10), T2},
	} {
		mustCLI(t, 0, rebuildArgs(topic, db, "--from-timestamp", c.arg)...)
		want, read, _ := oracle(all, from(c.T))
		t.Logf("--from-timestamp %s: %d records from T on", c.arg, read)
		checkTable(t, want, scanTable(t, db, topic))
	}
	// After every record: an empty table would replace a full one, which
	// takes --allow-empty (TestEmptyTableGuard checks the refusal).
	after := base.Add(time.Hour)
	mustCLI(t, exitConflict, rebuildArgs(topic, db, "--from-timestamp", strconv.FormatInt(after.UnixMilli(), 10))...)
	mustCLI(t, 0, rebuildArgs(topic, db, "--from-timestamp", strconv.FormatInt(after.UnixMilli(), 10), "--allow-empty")...)
	want, _, _ := oracle(all, from(after))
	checkTable(t, want, scanTable(t, db, topic))
	mustCLI(t, exitUsage, rebuildArgs(topic, db, "--from-timestamp", "yesterday")...)
	mustCLI(t, exitUsage, rebuildArgs(topic, db, "--from-timestamp", "0", "--from-offsets", "0=1")...)
}

// TestOpenTransaction: a transaction left open holds partition 0's last
// stable offset below its high mark. By default the rebuild waits, then
// exits 4 naming the partition, the LSO and the high mark, and publishes
// nothing; --end stable stops at the LSO; and a transaction committed while
// a rebuild process waits is read in full.
func TestOpenTransaction(t *testing.T) {
	ctx := context.Background()
	rng := newRand(t)
	topic := newTopic(t, 2)
	db := dbPath(t)
	all := produce(t, topic, genRecords(rng, []int32{0, 1}, 20))
	mustCLI(t, 0, rebuildArgs(topic, db)...)
	before := scanTable(t, db, topic)
	want, _, _ := oracle(all, nil)
	checkTable(t, want, before)
	genBefore := tablesJSON(t, db)[topic].Generation

	tx, err := broker.BeginTxn(ctx, topic, topic+"-open")
	if err != nil {
		t.Fatal(err)
	}
	open := []localkafka.Record{
		{Partition: 0, Key: []byte("p0-open"), Value: []byte("uncommitted")},
		{Partition: 0, Key: []byte("p0-k00"), Value: []byte("uncommitted")},
	}
	openOffs, err := tx.Produce(ctx, open)
	if err != nil {
		t.Fatal(err)
	}
	ended := false
	defer func() {
		if !ended {
			_ = tx.End(ctx, false)
		}
	}()
	after := produce(t, topic, genRecords(rng, []int32{0, 1}, 8)) // committed, past the LSO on partition 0
	all = append(all, after...)
	info := marksOf(t, topic)[0]
	lso, high := info.LSO, info.High
	if lso != openOffs[0] || high <= lso {
		t.Fatalf("setup: partition 0 LSO %d high %d, want the LSO at the open transaction's first offset %d", lso, high, openOffs[0])
	}

	r := mustCLI(t, exitIncomplete, rebuildArgs(topic, db, "--stall-timeout", "2s")...)
	for _, s := range []string{"partition 0", fmt.Sprintf("last stable offset at %d", lso), fmt.Sprintf("high mark %d", high), "--end stable"} {
		if !strings.Contains(r.stderr, s) {
			t.Fatalf("stderr lacks %q:\n%s", s, r.stderr)
		}
	}
	checkTable(t, before, scanTable(t, db, topic))
	if g := tablesJSON(t, db)[topic].Generation; g != genBefore {
		t.Fatalf("generation %d after the failed rebuild, want %d", g, genBefore)
	}

	mustCLI(t, 0, rebuildArgs(topic, db, "--end", "stable")...)
	want, _, _ = oracle(all, func(r rec) bool { return r.P != 0 || r.O < lso })
	checkTable(t, want, scanTable(t, db, topic))
	tb := tablesJSON(t, db)[topic]
	if tb.EndMark != "stable" || tb.Partitions[0].End != lso {
		t.Fatalf("tables: end mark %q, partition 0 %+v; want stable, ending at the LSO %d", tb.EndMark, tb.Partitions[0], lso)
	}

	// A rebuild process waits for the transaction; commit it once the
	// process says it is waiting, and the rebuild publishes everything.
	p := startProc(t, append(rebuildArgs(topic, db, "--stall-timeout", "60s"), "--progress-interval", "100ms")...)
	p.waitLine(t, 60*time.Second, "a log line saying the rebuild waits for the open transaction", func(l string) bool {
		return strings.Contains(l, "waiting for an open transaction")
	})
	ended = true
	if err := tx.End(ctx, true); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("rebuild process exit %d after the commit, want 0", code)
	}
	all = append(all, withOffsets(open, openOffs, true)...)
	want, _, _ = oracle(all, nil)
	checkTable(t, want, scanTable(t, db, topic))
}

// TestUnavailable: a missing topic and an unreachable broker exit 5 (the
// topic is not created); a rebuild while another process holds the database
// exits 7 (busy) naming the holder from its holder record, without hanging.
func TestUnavailable(t *testing.T) {
	db := dbPath(t)
	missing := runName(t) + "-no-such-topic"
	r := mustCLI(t, exitUnavailable, rebuildArgs(missing, db)...)
	if !strings.Contains(r.stderr, missing) {
		t.Fatalf("stderr does not name the topic:\n%s", r.stderr)
	}
	if _, exists, err := broker.TopicID(context.Background(), missing); err != nil || exists {
		t.Fatal("the rebuild created the missing topic")
	}

	start := time.Now()
	mustCLI(t, exitUnavailable, "rebuild", "--brokers", "127.0.0.1:1", "--topic", "anything", "--db", db, "--stall-timeout", "2s")
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("unreachable broker: took %s, want well within the stall timeout plus slack", d)
	}

	topic := newTopic(t, 1)
	produce(t, topic, []localkafka.Record{{Key: []byte("k"), Value: []byte("v")}})
	held, err := store.Open(db, &store.Options{Command: "test holder --db " + db})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for _, args := range [][]string{
		rebuildArgs(topic, db),
		{"scan", "--db", db, "--table", topic},
	} {
		start = time.Now()
		r = mustCLI(t, exitBusy, args...)
		want := fmt.Sprintf("database busy: %s is held by pid %d (test holder --db %s), since ", db, os.Getpid(), db)
		if !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "Try: wait for the holder to finish") ||
			strings.Contains(r.stderr, "daemon") {
			t.Fatalf("stderr does not say the database is held by pid %d with a true hint:\n%s", os.Getpid(), r.stderr)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Fatalf("locked database: took %s, want about the 3s lock timeout", d)
		}
	}
}

// TestConsumerGroupsUntouched: rebuilds never commit to, join or create a
// consumer group: a paused group's offsets stay exactly as committed and no
// other group has committed offsets anywhere on the broker.
func TestConsumerGroupsUntouched(t *testing.T) {
	ctx := context.Background()
	rng := newRand(t)
	topic := newTopic(t, 3)
	paused := topic + "-paused"
	all := produce(t, topic, genRecords(rng, []int32{0, 1, 2}, 30))
	committed := map[int32]int64{0: 1, 1: 0, 2: 2}
	if err := broker.CommitGroupOffsets(ctx, paused, topic, committed); err != nil {
		t.Fatal(err)
	}
	db := dbPath(t)
	mustCLI(t, 0, rebuildArgs(topic, db)...)
	mustCLI(t, 0, rebuildArgs(topic, db, "--from-offsets", "1=2")...)
	mustCLI(t, 0, rebuildArgs(topic, db, "--end", "stable")...)
	want, _, _ := oracle(all, nil)
	checkTable(t, want, scanTable(t, db, topic))

	groups, err := broker.GroupOffsets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Other tests' groups (copies) commit on their own topics; on this
	// test's topic only the paused group may have offsets.
	for g, offs := range groups {
		if po := offs[topic]; g != paused && len(po) > 0 {
			t.Errorf("group %q has committed offsets on %s: %v", g, topic, po)
		}
	}
	if diff := cmp.Diff(map[string]map[int32]int64{topic: committed}, groups[paused]); diff != "" {
		t.Fatalf("paused-display offsets (-committed +now):\n%s", diff)
	}
}
