package main

// Tests of a table's history: as-of rebuilds (--until-timestamp,
// --to-offsets), kept generations, rollback, diff and --max-change. Every
// expected table and every expected change is computed here from the
// records the test produced (plain folds and a plain map comparison).

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/internal/failpoint"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// stamped gives records timestamps one second apart from base, in order.
// base is a little in the future: transaction markers carry the broker's
// time (now), so with records after now a marker is never the first offset
// at or after a record's timestamp, and the oracle's ends depend on the
// records only.
type stamped struct {
	base time.Time
	n    int
}

func newStamped() *stamped {
	return &stamped{base: time.Now().Add(10 * time.Minute).Truncate(time.Millisecond)}
}

func (s *stamped) next() time.Time {
	t := s.base.Add(time.Duration(s.n) * time.Second)
	s.n++
	return t
}

// stamp sets increasing timestamps on recs.
func (s *stamped) stamp(recs []localkafka.Record) []localkafka.Record {
	for i := range recs {
		recs[i].Timestamp = s.next()
	}
	return recs
}

// onPartition moves recs to partition p (keys keep the p<P>- naming, so a
// key still lives in one partition).
func onPartition(rng *rand.Rand, recs []localkafka.Record, p int32) []localkafka.Record {
	for i := range recs {
		recs[i].Partition = p
		if recs[i].Key != nil {
			recs[i].Key = []byte(fmt.Sprintf("p%d-k%02d", p, rng.Intn(8)))
		}
	}
	return recs
}

// endsAt is what ListOffsets by timestamp answers per partition: the first
// offset of any record in the log (committed, aborted or open) whose
// timestamp is >= ts; partitions with none are absent (they end at their
// end mark).
func endsAt(all []rec, ts time.Time) map[int32]int64 {
	ends := map[int32]int64{}
	for _, r := range all {
		if r.Ts.Before(ts) {
			continue
		}
		if e, ok := ends[r.P]; !ok || r.O < e {
			ends[r.P] = r.O
		}
	}
	return ends
}

// before keeps the records below each partition's end (no end: all).
func before(ends map[int32]int64) func(rec) bool {
	return func(r rec) bool {
		e, ok := ends[r.P]
		return !ok || r.O < e
	}
}

type untilJSON struct {
	Timestamp time.Time       `json:"timestamp"`
	Offsets   map[int32]int64 `json:"offsets"`
}

// provenance reads the bound and the per-partition ends of table from
// `tables --format json` and from `export`, and checks they agree.
func provenance(t *testing.T, db, table string) (*untilJSON, map[int32]int64) {
	t.Helper()
	r := mustCLI(t, 0, "tables", "--db", db, "--format", "json")
	var ts []struct {
		Name       string     `json:"name"`
		Until      *untilJSON `json:"until"`
		Partitions []struct {
			Partition int32
			High, End int64
		} `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &ts); err != nil || len(ts) != 1 {
		t.Fatalf("tables --format json: %v\n%s", err, r.stdout)
	}
	ends := map[int32]int64{}
	for _, p := range ts[0].Partitions {
		if p.High != p.End {
			t.Errorf("partition %d: end mark %d, reached %d", p.Partition, p.High, p.End)
		}
		ends[p.Partition] = p.End
	}
	var doc struct {
		Until      *untilJSON `json:"until"`
		Partitions []struct {
			Partition int32
			End       int64
		} `json:"partitions"`
	}
	r = mustCLI(t, 0, "export", "--db", db, "--table", table)
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("export: %v", err)
	}
	if diff := cmp.Diff(ts[0].Until, doc.Until); diff != "" {
		t.Errorf("the bound in tables and in export differ (-tables +export):\n%s", diff)
	}
	for _, p := range doc.Partitions {
		if ends[p.Partition] != p.End {
			t.Errorf("partition %d: tables says end %d, export %d", p.Partition, ends[p.Partition], p.End)
		}
	}
	return ts[0].Until, ends
}

// highs is one past the last offset of each partition in recs (its high
// mark when nothing else was written to it).
func highs(recs []rec) map[int32]int64 {
	out := map[int32]int64{}
	for _, r := range recs {
		if r.O+1 > out[r.P] {
			out[r.P] = r.O + 1
		}
	}
	return out
}

// TestAsOfBounds rebuilds a topic of timestamped records (with a committed
// and an aborted transaction in the middle) as of several points and checks
// each table against the oracle fold of the records before each
// partition's first offset at or after the point.
func TestAsOfBounds(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 2)
	parts := []int32{0, 1}
	st := newStamped()
	var all []rec
	all = append(all, produce(t, topic, st.stamp(genRecords(rng, parts, 40)))...)
	committed := txn(t, topic, runName(t)+"-commit", st.stamp(onPartition(rng, genRecords(rng, parts, 6), 0)), true)
	all = append(all, committed...)
	all = append(all, txn(t, topic, runName(t)+"-abort", st.stamp(genRecords(rng, parts, 6)), false)...)
	all = append(all, produce(t, topic, st.stamp(genRecords(rng, parts, 40)))...)
	full, _, _ := oracle(all, nil)

	check := func(name string, ends map[int32]int64, keep func(rec) bool, args ...string) string {
		t.Helper()
		db := dbPath(t)
		mustCLI(t, 0, rebuildArgs(topic, db, args...)...)
		want, _, _ := oracle(all, keep)
		if diff := cmp.Diff(want, scanTable(t, db, topic)); diff != "" {
			t.Fatalf("%s: table (-oracle +scan):\n%s", name, diff)
		}
		_, got := provenance(t, db, topic)
		for p, e := range ends {
			if got[p] != e {
				t.Errorf("%s: partition %d ends at %d, want %d", name, p, got[p], e)
			}
		}
		return db
	}

	// In the middle of the committed transaction: its first three records
	// are in, the rest are not.
	mid := committed[3].Ts
	ends := endsAt(all, mid)
	if ends[0] != committed[3].O {
		t.Fatalf("oracle: partition 0 ends at %d, want the transaction's 4th record %d", ends[0], committed[3].O)
	}
	db := check("as of the middle of a transaction", ends, before(ends), "--until-timestamp", mid.Format(time.RFC3339Nano))
	until, _ := provenance(t, db, topic)
	if until == nil || !until.Timestamp.Equal(mid) || len(until.Offsets) != 0 {
		t.Errorf("provenance: until %+v, want timestamp %s", until, mid)
	}
	// The same point in epoch milliseconds.
	check("epoch milliseconds", ends, before(ends), "--until-timestamp", strconv.FormatInt(mid.UnixMilli(), 10))

	// Before the first record: empty. Over a table with rows that needs
	// --allow-empty (the empty-table guard).
	early := st.base.Add(-time.Second).Format(time.RFC3339Nano)
	r := mustCLI(t, 3, rebuildArgs(topic, db, "--until-timestamp", early)...)
	if !strings.Contains(r.stderr, "empty table") {
		t.Errorf("as of before the first record over a full table: stderr %q, want the empty-table refusal", r.stderr)
	}
	mustCLI(t, 0, rebuildArgs(topic, db, "--until-timestamp", early, "--allow-empty")...)
	checkTable(t, map[string]string{}, scanTable(t, db, topic))
	if _, got := provenance(t, db, topic); got[0] != 0 || got[1] != 0 {
		t.Errorf("as of before the first record: ends %v, want 0 and 0", got)
	}

	// After the last record: the full table, to the high marks.
	late := st.base.Add(time.Hour).Format(time.RFC3339Nano)
	fullDB := dbPath(t)
	mustCLI(t, 0, rebuildArgs(topic, fullDB)...)
	_, fullEnds := provenance(t, fullDB, topic)
	check("as of after the last record", fullEnds, nil, "--until-timestamp", late)
	checkTable(t, full, scanTable(t, fullDB, topic))

	// --from-timestamp with --until-timestamp: the records in [from, until).
	from := all[10].Ts
	fromEnds := endsAt(all, from)
	check("from and until timestamps", ends, func(r rec) bool { return before(ends)(r) && !before(fromEnds)(r) },
		"--from-timestamp", from.Format(time.RFC3339Nano), "--until-timestamp", mid.Format(time.RFC3339Nano))

	// --to-offsets, with --from-offsets: partition 0 inside the committed
	// transaction, partition 1 not bounded.
	to0 := committed[2].O
	offsDB := check("to offsets", map[int32]int64{0: to0}, func(r rec) bool { return r.P != 0 || (r.O >= 3 && r.O < to0) },
		"--from-offsets", "0=3", "--to-offsets", fmt.Sprintf("0=%d", to0))
	if until, _ := provenance(t, offsDB, topic); until == nil || until.Offsets[0] != to0 || len(until.Offsets) != 1 {
		t.Errorf("provenance of --to-offsets: %+v, want offsets 0=%d", until, to0)
	}

	// Bad ends are bad usage, and publish nothing.
	hw := highs(all)
	for _, args := range [][]string{
		{"--to-offsets", fmt.Sprintf("0=%d", hw[0]+5)},
		{"--to-offsets", "7=1"},
		{"--to-offsets", "0=1", "--from-offsets", "0=5"},
		{"--to-offsets", "0=1", "--until-timestamp", late},
		{"--until-timestamp", early, "--from-timestamp", late},
		{"--until-timestamp", "yesterday"},
	} {
		r := mustCLI(t, 2, rebuildArgs(topic, offsDB, args...)...)
		if !strings.Contains(r.stderr, "Try:") {
			t.Errorf("%v: no hint in %q", args, r.stderr)
		}
	}
	if until, _ := provenance(t, offsDB, topic); until == nil || until.Offsets[0] != to0 {
		t.Errorf("a refused rebuild changed the table: until %+v", until)
	}
}

// TestAsOfOpenTransaction: an end inside an open transaction is handled as
// the high mark is: with --end high the rebuild waits for the transaction
// and fails after the stall timeout naming it; once it commits, the records
// before the end are in. With --end stable it stops at the last stable
// offset without waiting.
func TestAsOfOpenTransaction(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 1)
	db := dbPath(t)
	st := newStamped()
	plain := produce(t, topic, st.stamp(genRecords(rng, []int32{0}, 10)))
	ctx := context.Background()
	tx, err := broker.BeginTxn(ctx, topic, runName(t))
	if err != nil {
		t.Fatal(err)
	}
	txRecs := st.stamp(genRecords(rng, []int32{0}, 5))
	offs, err := tx.Produce(ctx, txRecs)
	if err != nil {
		t.Fatal(err)
	}
	open := withOffsets(txRecs, offs, false)
	point := open[3].Ts.Format(time.RFC3339Nano)

	r := mustCLI(t, 4, rebuildArgs(topic, db, "--until-timestamp", point, "--stall-timeout", "2s")...)
	if !strings.Contains(r.stderr, "open transaction") {
		t.Fatalf("stderr does not name the open transaction:\n%s", r.stderr)
	}
	mustCLI(t, 0, rebuildArgs(topic, db, "--until-timestamp", point, "--end", "stable")...)
	want, _, _ := oracle(plain, nil)
	checkTable(t, want, scanTable(t, db, topic))

	if err := tx.End(ctx, true); err != nil {
		t.Fatal(err)
	}
	for i := range open {
		open[i].Committed = true
	}
	mustCLI(t, 0, rebuildArgs(topic, db, "--until-timestamp", point)...)
	all := append(append([]rec(nil), plain...), open...)
	want, _, _ = oracle(all, func(r rec) bool { return r.O < open[3].O })
	checkTable(t, want, scanTable(t, db, topic))
}

// diffLine is a line of `kmaterialize diff`.
type diffLine struct {
	Key string  `json:"key"`
	Op  string  `json:"op"`
	Old *string `json:"old"`
	New *string `json:"new"`
}

// oracleDiff compares two folds key by key, in key order.
func oracleDiff(old, cur map[string]string) []diffLine {
	keys := map[string]bool{}
	for k := range old {
		keys[k] = true
	}
	for k := range cur {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var out []diffLine
	for _, k := range sorted {
		o, inOld := old[k]
		n, inNew := cur[k]
		switch {
		case inOld && !inNew:
			out = append(out, diffLine{k, "removed", &o, nil})
		case !inOld && inNew:
			out = append(out, diffLine{k, "added", nil, &n})
		case o != n:
			out = append(out, diffLine{k, "changed", &o, &n})
		}
	}
	return out
}

func countDiff(d []diffLine) (added, removed, changed int64) {
	for _, l := range d {
		switch l.Op {
		case "added":
			added++
		case "removed":
			removed++
		default:
			changed++
		}
	}
	return
}

func runDiff(t *testing.T, db, table string, args ...string) []diffLine {
	t.Helper()
	r := mustCLI(t, 0, append([]string{"diff", "--db", db, "--table", table}, args...)...)
	var out []diffLine
	for _, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		if line == "" {
			continue
		}
		var l diffLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("diff line %q: %v", line, err)
		}
		out = append(out, l)
	}
	return out
}

// historyJSON is the history part of `tables --format json`.
type historyJSON struct {
	Name       string `json:"name"`
	Generation uint64 `json:"generation"`
	Keys       int64  `json:"keys"`
	Changes    *struct {
		From                    uint64
		FromKeys                int64 `json:"from_keys"`
		Added, Removed, Changed int64
	} `json:"changes"`
	Kept []struct {
		Generation uint64 `json:"generation"`
		Keys       int64  `json:"keys"`
		Records    int64  `json:"records"`
		Partitions []struct {
			Partition int32
			End       int64
		} `json:"partitions"`
	} `json:"kept"`
}

func history(t *testing.T, db string) historyJSON {
	t.Helper()
	r := mustCLI(t, 0, "tables", "--db", db, "--format", "json")
	var ts []historyJSON
	if err := json.Unmarshal([]byte(r.stdout), &ts); err != nil || len(ts) != 1 {
		t.Fatalf("tables --format json: %v\n%s", err, r.stdout)
	}
	return ts[0]
}

// TestKeepRollbackDiff rebuilds a growing topic three times keeping two
// generations, and checks against plain folds of the records: the change
// counts of each publish, the kept generations listed by tables, diff
// against an oracle diff of two folds, and that rollback brings back each
// earlier export byte for byte.
func TestKeepRollbackDiff(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 2)
	db := dbPath(t)
	parts := []int32{0, 1}
	var all []rec
	var folds []map[string]string
	var exports []string
	var reads []int64
	for i := 0; i < 3; i++ {
		all = append(all, produce(t, topic, genRecords(rng, parts, 40))...)
		mustCLI(t, 0, rebuildArgs(topic, db, "--keep", "2")...)
		fold, read, _ := oracle(all, nil)
		folds, reads = append(folds, fold), append(reads, read)
		exports = append(exports, mustCLI(t, 0, "export", "--db", db, "--table", topic).stdout)
		h := history(t, db)
		prev := map[string]string{}
		if i > 0 {
			prev = folds[i-1]
		}
		a, r, c := countDiff(oracleDiff(prev, fold))
		if h.Changes == nil || h.Changes.Added != a || h.Changes.Removed != r || h.Changes.Changed != c ||
			h.Changes.FromKeys != int64(len(prev)) || h.Changes.From != uint64(i) {
			t.Fatalf("rebuild %d: changes %+v, oracle added %d removed %d changed %d of %d keys in generation %d", i+1, h.Changes, a, r, c, len(prev), i)
		}
	}
	h := history(t, db)
	if h.Generation != 3 || len(h.Kept) != 2 || h.Kept[0].Generation != 2 || h.Kept[1].Generation != 1 ||
		h.Kept[0].Keys != int64(len(folds[1])) || h.Kept[1].Keys != int64(len(folds[0])) ||
		h.Kept[0].Records != reads[1] || h.Kept[1].Records != reads[0] {
		t.Fatalf("tables: %+v; want generation 3 with kept 2 (%d keys, %d records) and 1 (%d keys, %d records)",
			h, len(folds[1]), reads[1], len(folds[0]), reads[0])
	}
	if txt := mustCLI(t, 0, "tables", "--db", db).stdout; !strings.Contains(txt, "kept generation 2:") || !strings.Contains(txt, "changes:") {
		t.Errorf("tables text does not show the kept generations and changes:\n%s", txt)
	}

	// diff against the oracle diff of two folds.
	if diff := cmp.Diff(oracleDiff(folds[1], folds[2]), runDiff(t, db, topic)); diff != "" {
		t.Errorf("diff (published vs the one it replaced) (-oracle +diff):\n%s", diff)
	}
	if diff := cmp.Diff(oracleDiff(folds[0], folds[2]), runDiff(t, db, topic, "--from", "1", "--to", "3")); diff != "" {
		t.Errorf("diff --from 1 --to 3 (-oracle +diff):\n%s", diff)
	}
	want := oracleDiff(folds[2], folds[0])
	if len(want) > 2 {
		want = want[:2]
	}
	if diff := cmp.Diff(want, runDiff(t, db, topic, "--from", "3", "--to", "1", "--limit", "2")); diff != "" {
		t.Errorf("diff --from 3 --to 1 --limit 2 (-oracle +diff):\n%s", diff)
	}
	mustCLI(t, 6, "diff", "--db", db, "--table", topic, "--from", "99")

	// Rollback: the export is the earlier one, byte for byte.
	r := mustCLI(t, 0, "rollback", "--db", db, "--table", topic)
	if !strings.Contains(r.stdout, "generation 2 published") {
		t.Errorf("rollback stdout %q", r.stdout)
	}
	if got := mustCLI(t, 0, "export", "--db", db, "--table", topic).stdout; got != exports[1] {
		t.Fatalf("export after rollback differs from generation 2's:\n%s\nwant:\n%s", got, exports[1])
	}
	checkTable(t, folds[1], scanTable(t, db, topic))
	h = history(t, db)
	if h.Generation != 2 || len(h.Kept) != 2 || h.Kept[0].Generation != 3 || h.Kept[1].Generation != 1 {
		t.Fatalf("after rollback: %+v; want 2 published, 3 and 1 kept", h)
	}
	mustCLI(t, 0, "rollback", "--db", db, "--table", topic, "--generation", "1")
	if got := mustCLI(t, 0, "export", "--db", db, "--table", topic).stdout; got != exports[0] {
		t.Fatalf("export after rollback to 1 differs from generation 1's")
	}
	r = mustCLI(t, 6, "rollback", "--db", db, "--table", topic, "--generation", "99")
	if !strings.Contains(r.stderr, "Try:") {
		t.Errorf("rollback to a missing generation: no hint in %q", r.stderr)
	}
	mustCLI(t, 6, "rollback", "--db", db, "--table", "no-such-table")

	// A rebuild keeping 1 publishes every record and keeps the generation
	// it replaced (1, published last), though 2 and 3 are newer.
	mustCLI(t, 0, rebuildArgs(topic, db, "--keep", "1")...)
	checkTable(t, folds[2], scanTable(t, db, topic))
	h = history(t, db)
	if h.Generation != 4 || len(h.Kept) != 1 || h.Kept[0].Generation != 1 {
		t.Fatalf("after a rebuild with --keep 1: %+v; want 4 published, 1 (the one it replaced) kept", h)
	}
	mustCLI(t, 0, "rollback", "--db", db, "--table", topic)
	if got := mustCLI(t, 0, "export", "--db", db, "--table", topic).stdout; got != exports[0] {
		t.Fatal("export after rolling back the --keep 1 rebuild differs from generation 1's")
	}
	if got := mustCLI(t, 0, "check", "--db", db); got.code != 0 {
		t.Fatalf("check: %s", got.stdout)
	}
}

// TestMaxChangeGuard: a rebuild that would change more than --max-change
// of the table's keys exits 3 naming the oracle's counts, and the table
// stays byte for byte; a higher limit publishes; the empty-table guard
// stays on whatever the limit.
func TestMaxChangeGuard(t *testing.T) {
	topic := newTopic(t, 1)
	db := dbPath(t)
	var recs []localkafka.Record
	for i := 0; i < 50; i++ {
		recs = append(recs, localkafka.Record{Key: []byte(fmt.Sprintf("k%03d", i)), Value: []byte("v1")})
	}
	all := produce(t, topic, recs)
	// A first rebuild is never refused.
	mustCLI(t, 0, rebuildArgs(topic, db, "--max-change", "0")...)
	before, _, _ := oracle(all, nil)
	exp := mustCLI(t, 0, "export", "--db", db, "--table", topic).stdout

	// 6 changed, 2 removed, 3 added: 11 of 50 keys, 22%.
	var more []localkafka.Record
	for i := 0; i < 6; i++ {
		more = append(more, localkafka.Record{Key: []byte(fmt.Sprintf("k%03d", i)), Value: []byte("v2")})
	}
	more = append(more, localkafka.Record{Key: []byte("k010")}, localkafka.Record{Key: []byte("k011")})
	for i := 0; i < 3; i++ {
		more = append(more, localkafka.Record{Key: []byte(fmt.Sprintf("new%d", i)), Value: []byte("v")})
	}
	all = append(all, produce(t, topic, more)...)
	after, _, _ := oracle(all, nil)
	a, rm, c := countDiff(oracleDiff(before, after))

	r := mustCLI(t, 3, rebuildArgs(topic, db, "--max-change", "20%")...)
	want := fmt.Sprintf("would add %d, remove %d and change %d of its %d keys", a, rm, c, len(before))
	if !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "Try:") {
		t.Fatalf("stderr does not say %q with a hint:\n%s", want, r.stderr)
	}
	if got := mustCLI(t, 0, "export", "--db", db, "--table", topic).stdout; got != exp {
		t.Fatal("a refused rebuild changed the table's export")
	}
	if g := generations(t, db); len(g) != 1 {
		t.Fatalf("generations after a refused rebuild: %v, want only the published one", g)
	}

	mustCLI(t, 0, rebuildArgs(topic, db, "--max-change", "22")...)
	checkTable(t, after, scanTable(t, db, topic))
	if h := history(t, db); h.Changes == nil || h.Changes.Added != a || h.Changes.Removed != rm || h.Changes.Changed != c {
		t.Fatalf("changes %+v, oracle %d/%d/%d", h.Changes, a, rm, c)
	}

	// The empty-table guard holds whatever --max-change allows.
	future := time.Now().Add(time.Hour).Format(time.RFC3339)
	r = mustCLI(t, 3, rebuildArgs(topic, db, "--max-change", "100", "--from-timestamp", future)...)
	if !strings.Contains(r.stderr, "empty table") {
		t.Fatalf("stderr does not carry the empty-table refusal:\n%s", r.stderr)
	}
	mustCLI(t, 2, rebuildArgs(topic, db, "--max-change", "-1")...)
	mustCLI(t, 2, rebuildArgs(topic, db, "--keep", "-1")...)
}

// TestKeptGenerationsSurviveKill9 kills a rebuild --keep 1 with SIGKILL
// inside its publish transaction (after the old generation was kept and
// older ones dropped, uncommitted) and just after the commit. Either way
// the kept generations are whole: the file checks clean, tables lists them,
// and a rollback brings back an earlier export byte for byte; drop then
// removes the table with its history.
func TestKeptGenerationsSurviveKill9(t *testing.T) {
	bin := failpointBinary(t)
	for _, tc := range []struct {
		point     string
		published uint64   // the generation readers see after the kill
		kept      []uint64 // kept generations after the kill, newest first
	}{
		{failpoint.PublishDropOld, 2, []uint64{1}},
		{failpoint.PublishCommitAfter, 3, []uint64{2}},
	} {
		t.Run(tc.point, func(t *testing.T) {
			rng := newRand(t)
			topic := crashTopic(t, 2)
			db := dbPath(t)
			parts := []int32{0, 1}
			var all []rec
			exports := map[uint64]string{}
			for gen := uint64(1); gen <= 2; gen++ {
				all = append(all, produce(t, topic, genRecords(rng, parts, 30))...)
				mustCLI(t, 0, rebuildArgs(topic, db, "--keep", "1")...)
				exports[gen] = mustCLI(t, 0, "export", "--db", db, "--table", topic).stdout
			}
			all = append(all, produce(t, topic, genRecords(rng, parts, 30))...)

			file := filepath.Join(t.TempDir(), "failpoint")
			c := startChild(t, []string{failpoint.EnvPoint + "=" + tc.point, failpoint.EnvFile + "=" + file},
				bin, append([]string{"--log-format", "json"}, rebuildArgs(topic, db, "--keep", "1")...)...)
			awaitFailpoint(t, c, file, "failpoint "+tc.point+" parked")
			if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if ws := c.wait(t, 30*time.Second); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("child ended with %v, want killed by SIGKILL", ws)
			}

			boltCheck(t, db)
			mustCLI(t, 0, "check", "--db", db) // the schema's invariants, kept generations included
			h := history(t, db)
			var kept []uint64
			for _, k := range h.Kept {
				kept = append(kept, k.Generation)
			}
			if h.Generation != tc.published || !cmp.Equal(kept, tc.kept) {
				t.Fatalf("after the kill: generation %d published, kept %v; want %d and %v", h.Generation, kept, tc.published, tc.kept)
			}
			if tc.published == 3 {
				want, _, _ := oracle(all, nil)
				checkTable(t, want, scanTable(t, db, topic))
			} else if got := mustCLI(t, 0, "export", "--db", db, "--table", topic).stdout; got != exports[2] {
				t.Fatal("after the kill the export is not generation 2's")
			}

			// The kept generation rolls back to its export, byte for byte,
			// and the read-write open of rollback removed the killed
			// rebuild's leftover (if any).
			mustCLI(t, 0, "rollback", "--db", db, "--table", topic)
			if got := mustCLI(t, 0, "export", "--db", db, "--table", topic).stdout; got != exports[tc.kept[0]] {
				t.Fatalf("export after rollback to %d differs from the one it had", tc.kept[0])
			}
			if g := generations(t, db); len(g) != 2 || g[tc.published] != topic || g[tc.kept[0]] != topic {
				t.Fatalf("generation buckets after the rollback: %v, want only %d and %d", g, tc.published, tc.kept[0])
			}

			// drop takes the table's history with it.
			mustCLI(t, 0, "drop", "--db", db, "--table", topic)
			if g := generations(t, db); len(g) != 0 {
				t.Fatalf("generation buckets after drop: %v, want none", g)
			}
			mustCLI(t, 0, "check", "--db", db)
		})
	}
}

// TestDaemonHistory: a daemon whose table keeps 2 generations shows what
// each publish changed (status and /metrics) against the oracle, routes
// tables, diff and rollback, and the rolled-back export is the earlier
// one byte for byte; the daemon's file then reads the same directly.
func TestDaemonHistory(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 2)
	parts := []int32{0, 1}
	all := produce(t, topic, genRecords(rng, parts, 40))
	fold1, _, _ := oracle(all, nil)
	rig := newDaemonRig(t, topic, "    keep: 2\n")
	p := rig.start(t)
	exp1 := mustCLI(t, 0, "export", "--db", rig.db, "--table", rig.table).stdout

	all = append(all, produce(t, topic, genRecords(rng, parts, 40))...)
	fold2, _, _ := oracle(all, nil)
	mustCLI(t, 0, "rebuild", "--db", rig.db, "--table", rig.table)
	exp2 := mustCLI(t, 0, "export", "--db", rig.db, "--table", rig.table).stdout

	a, r, c := countDiff(oracleDiff(fold1, fold2))
	code, body, _ := httpGet(t, rig.cl, "/v1/tables/"+rig.table)
	var st struct {
		Generation uint64 `json:"generation"`
		Changes    struct {
			From                    uint64
			Added, Removed, Changed int64
		} `json:"changes"`
		Kept []struct {
			Generation uint64 `json:"generation"`
			Keys       int64  `json:"keys"`
		} `json:"kept"`
	}
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("GET table: %d %v\n%s", code, err, body)
	}
	if st.Generation != 2 || st.Changes.From != 1 || st.Changes.Added != a || st.Changes.Removed != r || st.Changes.Changed != c ||
		len(st.Kept) != 1 || st.Kept[0].Generation != 1 || st.Kept[0].Keys != int64(len(fold1)) {
		t.Fatalf("status %s; want generation 2 changing %d/%d/%d from 1, and 1 kept with %d keys", body, a, r, c, len(fold1))
	}
	_, metrics, _ := httpGet(t, rig.cl, "/metrics")
	for op, n := range map[string]int64{"added": a, "removed": r, "changed": c} {
		line := fmt.Sprintf("kmaterialize_table_changes{op=%q,table=%q} %d", op, rig.table, n)
		if !strings.Contains(metrics, line) {
			t.Errorf("/metrics has no %q", line)
		}
	}

	if diff := cmp.Diff(oracleDiff(fold1, fold2), runDiff(t, rig.db, rig.table)); diff != "" {
		t.Errorf("routed diff (-oracle +diff):\n%s", diff)
	}
	routedTables := mustCLI(t, 0, "tables", "--db", rig.db, "--format", "json").stdout
	out := mustCLI(t, 0, "rollback", "--db", rig.db, "--table", rig.table).stdout
	if !strings.Contains(out, "generation 1 published") {
		t.Errorf("routed rollback: %q", out)
	}
	if got := mustCLI(t, 0, "export", "--db", rig.db, "--table", rig.table).stdout; got != exp1 {
		t.Fatal("routed export after the rollback differs from generation 1's")
	}
	checkKeys(t, rig.cl, rig.table, fold1)
	mustCLI(t, exitNotFound, "rollback", "--db", rig.db, "--table", rig.table, "--generation", "7")
	mustCLI(t, 0, "rollback", "--db", rig.db, "--table", rig.table, "--generation", "2")
	if got := mustCLI(t, 0, "export", "--db", rig.db, "--table", rig.table).stdout; got != exp2 {
		t.Fatal("routed export after rolling forward differs from generation 2's")
	}

	// The file, read directly once the daemon stopped, says the same.
	stopDaemon(t, p)
	if got := mustCLI(t, 0, "export", "--db", rig.db, "--table", rig.table).stdout; got != exp2 {
		t.Fatal("direct export differs from the routed one")
	}
	if got := mustCLI(t, 0, "tables", "--db", rig.db, "--format", "json").stdout; got != routedTables {
		t.Fatalf("direct tables differ from the routed ones before the rollbacks:\n%s\nrouted:\n%s", got, routedTables)
	}
}

// TestDiffBinary: a key or value that is not UTF-8 makes diff exit 2 with
// a hint before printing anything; with --base64 every key and value is
// standard base64, as in scan and export.
func TestDiffBinary(t *testing.T) {
	topic := newTopic(t, 1)
	db := dbPath(t)
	key := []byte("\xff-key")
	produce(t, topic, []localkafka.Record{{Key: key, Value: []byte("v1")}, {Key: []byte("gone"), Value: []byte("x")}})
	mustCLI(t, 0, rebuildArgs(topic, db, "--keep", "1")...)
	produce(t, topic, []localkafka.Record{{Key: key, Value: []byte("\xfe")}, {Key: []byte("gone")}})
	mustCLI(t, 0, rebuildArgs(topic, db, "--keep", "1")...)

	r := mustCLI(t, 2, "diff", "--db", db, "--table", topic)
	if r.stdout != "" || !strings.Contains(r.stderr, "--base64") {
		t.Fatalf("diff of a binary key without --base64: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	b64 := func(s string) *string { e := base64.StdEncoding.EncodeToString([]byte(s)); return &e }
	want := []diffLine{
		{*b64("gone"), "removed", b64("x"), nil},
		{*b64(string(key)), "changed", b64("v1"), b64("\xfe")},
	}
	// In key order: "gone" sorts before a key starting with 0xff.
	if diff := cmp.Diff(want, runDiff(t, db, topic, "--base64")); diff != "" {
		t.Fatalf("diff --base64 (-oracle +diff):\n%s", diff)
	}
}
