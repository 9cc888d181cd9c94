package main

import (
	"bufio"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/store"
)

// detailsTable rebuilds a table of routeRecords (keys "k<N>", plus keys
// and values with '/', ".", a space, bytes that are not UTF-8, a tab) and
// returns the database, the table and the oracle.
func detailsTable(t *testing.T) (db, table string, want map[string]string) {
	t.Helper()
	rng := newRand(t)
	topic := newTopic(t, 3)
	recs := produce(t, topic, routeRecords(rng, []int32{0, 1, 2}, 600, 300))
	want, _, _ = oracle(recs, nil)
	db = dbPath(t)
	mustCLI(t, 0, rebuildArgs(topic, db)...)
	return db, topic, want
}

// sortedKeys is the oracle's keys in byte order.
func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// getLine is one JSON line of a get of several keys.
type getLine struct {
	Key   string  `json:"key"`
	Value *string `json:"value"`
}

func parseGetLines(t *testing.T, out string) []getLine {
	t.Helper()
	var lines []getLine
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var l getLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || !strings.Contains(sc.Text(), `"value":`) {
			t.Fatalf("get line %q: not {key, value} (%v)", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines
}

// TestGetSeveralKeys: get of several keys prints one JSON line per key in
// the order given, "value": null for absent keys and exit 6 (after every
// line) when any is absent, exit 0 when none is; --format json is the
// same as one object; a key given with --key-encoding hex or base64 reads
// a key that is not UTF-8; a bad encoding or a value that is not UTF-8
// without --base64 is exit 2 with a hint and nothing on stdout; --format
// text with two keys is exit 2. Checked against the oracle.
func TestGetSeveralKeys(t *testing.T) {
	db, table, want := detailsTable(t)
	keys := sortedKeys(withPrefix(want, "k"))
	ask := []string{keys[3], "no-such-key", keys[1], keys[3], "x/slash", "sp ace%"}
	args := append([]string{"get", "--db", db, "--table", table}, ask...)
	r := mustCLI(t, exitNotFound, args...)
	lines := parseGetLines(t, r.stdout)
	if len(lines) != len(ask) {
		t.Fatalf("%d lines for %d keys", len(lines), len(ask))
	}
	missing := 0
	for i, k := range ask {
		v, ok := want[k]
		if lines[i].Key != k || (lines[i].Value == nil) == ok || ok && *lines[i].Value != v {
			t.Fatalf("line %d = %+v, want key %q value %q (present %v)", i, lines[i], k, v, ok)
		}
		if !ok {
			missing++
		}
	}
	if !strings.Contains(r.stderr, fmt.Sprintf("%d of %d keys not found", missing, len(ask))) {
		t.Fatalf("stderr does not count the missing keys:\n%s", r.stderr)
	}

	// All present: exit 0.
	r = mustCLI(t, 0, "get", "--db", db, "--table", table, keys[0], keys[len(keys)-1])
	if got := parseGetLines(t, r.stdout); len(got) != 2 || *got[0].Value != want[keys[0]] || *got[1].Value != want[keys[len(keys)-1]] {
		t.Fatalf("get of two present keys: %q", r.stdout)
	}
	// --format jsonl with one key is one line; --format json one object.
	r = mustCLI(t, 0, "get", "--db", db, "--table", table, "--format", "jsonl", keys[2])
	if got := parseGetLines(t, r.stdout); len(got) != 1 || *got[0].Value != want[keys[2]] {
		t.Fatalf("get --format jsonl of one key: %q", r.stdout)
	}
	r = mustCLI(t, exitNotFound, "get", "--db", db, "--table", table, "--format", "json", keys[2], "nope", keys[2])
	var obj map[string]*string
	if err := json.Unmarshal([]byte(r.stdout), &obj); err != nil {
		t.Fatalf("get --format json: %v\n%s", err, r.stdout)
	}
	if len(obj) != 2 || obj["nope"] != nil || obj[keys[2]] == nil || *obj[keys[2]] != want[keys[2]] {
		t.Fatalf("get --format json: %v", obj)
	}

	// A key that is not UTF-8, given in hex and in base64.
	bin := "\xff\xfe-bin"
	r = mustCLI(t, 0, "get", "--db", db, "--table", table, "--key-encoding", "hex", hex.EncodeToString([]byte(bin)))
	if r.stdout != want[bin]+"\n" {
		t.Fatalf("get --key-encoding hex printed %q, want %q", r.stdout, want[bin]+"\n")
	}
	r = mustCLI(t, 0, "get", "--db", db, "--table", table, "--key-encoding", "base64", "--base64",
		base64.StdEncoding.EncodeToString([]byte(bin)), base64.StdEncoding.EncodeToString([]byte("v-bin")))
	got := parseGetLines(t, r.stdout)
	for i, k := range []string{bin, "v-bin"} {
		kb, _ := base64.StdEncoding.DecodeString(got[i].Key)
		vb, _ := base64.StdEncoding.DecodeString(*got[i].Value)
		if string(kb) != k || string(vb) != want[k] {
			t.Fatalf("get --base64 line %d: key %q value %q, want %q %q", i, kb, vb, k, want[k])
		}
	}

	// Refusals: exit 2, a hint, nothing on stdout.
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--key-encoding", "base64", "!!!"}, "is not base64"},
		{[]string{"--key-encoding", "hex", "zz"}, "is not hex"},
		{[]string{"--key-encoding", "rot13", "a"}, "--key-encoding"},
		{[]string{keys[0], "v-bin"}, "UTF-8"},
		{[]string{"--format", "text", keys[0], keys[1]}, "one KEY"},
		{[]string{"--format", "tsv", keys[0]}, "get takes text, json, jsonl"},
		{[]string{keys[0], "-"}, "only KEY"},
		{nil, "one or more KEYs"},
	} {
		r := mustCLI(t, exitUsage, append([]string{"get", "--db", db, "--table", table}, c.args...)...)
		if r.stdout != "" || !strings.Contains(r.stderr, c.says) || !strings.Contains(r.stderr, "\nTry: ") {
			t.Fatalf("get %q: stdout %q, stderr %q; want nothing, %q and a hint", c.args, r.stdout, r.stderr, c.says)
		}
	}
}

// TestGetKeysFromStdin (the built binary): every key scan --base64
// --keys-only prints, piped into get --key-encoding base64 --base64 -,
// comes back with the oracle's value, keys that are not UTF-8 included,
// exit 0; with an absent key among them, its line is null and the exit 6.
func TestGetKeysFromStdin(t *testing.T) {
	db, table, want := detailsTable(t)
	r := binExec(t, binPath, "", "scan", "--db", db, "--table", table, "--base64", "--keys-only", "--format", "tsv")
	if r.code != 0 {
		t.Fatalf("scan: exit %d", r.code)
	}
	stdin := r.stdout + base64.StdEncoding.EncodeToString([]byte("absent")) + "\n\n"
	r = binExec(t, binPath, stdin, "get", "--db", db, "--table", table, "--key-encoding", "base64", "--base64", "-")
	if r.code != exitNotFound {
		t.Fatalf("get -: exit %d, want %d (one absent key)", r.code, exitNotFound)
	}
	got := map[string]*string{}
	var order []string
	for _, l := range parseGetLines(t, r.stdout) {
		k, err := base64.StdEncoding.DecodeString(l.Key)
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, string(k))
		if l.Value == nil {
			got[string(k)] = nil
			continue
		}
		v, err := base64.StdEncoding.DecodeString(*l.Value)
		if err != nil {
			t.Fatal(err)
		}
		s := string(v)
		got[string(k)] = &s
	}
	wantOrder := append(sortedKeys(want), "absent")
	if diff := cmp.Diff(wantOrder, order); diff != "" {
		t.Fatalf("keys of get - (-scan's order +got):\n%s", diff)
	}
	nonUTF8 := 0
	for k, v := range want {
		if got[k] == nil || *got[k] != v {
			t.Fatalf("get - of %q: %v, oracle %q", k, got[k], v)
		}
		if !utf8.ValidString(k) {
			nonUTF8++
		}
	}
	if nonUTF8 == 0 || got["absent"] != nil {
		t.Fatalf("the table must hold a key that is not UTF-8 (%d), and absent must be null (%v)", nonUTF8, got["absent"])
	}
	// Plain keys on stdin, all present: exit 0.
	ks := sortedKeys(withPrefix(want, "k"))[:5]
	r = binExec(t, binPath, strings.Join(ks, "\n")+"\n", "get", "--db", db, "--table", table, "-")
	if r.code != 0 || len(parseGetLines(t, r.stdout)) != 5 {
		t.Fatalf("get - of 5 present keys: exit %d, %q", r.code, r.stdout)
	}
}

// TestScanRangeKeysOnlyCount: scan --prefix/--from/--to selects the keys a
// plain string comparison selects (from inclusive, to exclusive), in order,
// with every format; --keys-only prints the same keys without values
// (json array, jsonl {"key"}, one per line); --count prints their number
// (at most --limit), bare or as {"count":N}; --key-encoding hex applies to
// --from; --count with --keys-only and a bad --format are exit 2.
func TestScanRangeKeysOnlyCount(t *testing.T) {
	db, table, want := detailsTable(t)
	keys := sortedKeys(withPrefix(want, "k"))
	sel := func(prefix, from, to string, limit int) []string {
		var out []string
		for _, k := range sortedKeys(want) {
			if strings.HasPrefix(k, prefix) && (from == "" || k >= from) && (to == "" || k < to) && (limit == 0 || len(out) < limit) {
				out = append(out, k)
			}
		}
		return out
	}
	for _, c := range []struct {
		prefix, from, to string
		limit            int
	}{
		{"k", keys[10], keys[40], 0}, {"k", keys[10], keys[40], 7}, {"", keys[5], "", 0}, {"k", "", keys[3], 0},
		{"", keys[20], keys[20], 0}, {"", keys[30], keys[20], 0}, {"k00", "k001", "k002", 0}, {"zz", "", "", 0},
	} {
		args := []string{"scan", "--db", db, "--table", table, "--base64"}
		for _, f := range []struct{ flag, v string }{{"--prefix", c.prefix}, {"--from", c.from}, {"--to", c.to}} {
			if f.v != "" {
				args = append(args, f.flag, f.v)
			}
		}
		if c.limit > 0 {
			args = append(args, "--limit", fmt.Sprint(c.limit))
		}
		exp := sel(c.prefix, c.from, c.to, c.limit)
		expRows := map[string]string{}
		for _, k := range exp {
			expRows[k] = want[k]
		}
		// Rows, jsonl.
		got := decodeRows(t, mustCLI(t, 0, append(args, "--format", "jsonl")...).stdout)
		if diff := cmp.Diff(expRows, got); diff != "" {
			t.Fatalf("scan %q (-oracle +scan):\n%s", args, diff)
		}
		b64 := func(ks []string) []string {
			out := []string{}
			for _, k := range ks {
				out = append(out, base64.StdEncoding.EncodeToString([]byte(k)))
			}
			return out
		}
		// Keys only, three formats.
		var arr []string
		if err := json.Unmarshal([]byte(mustCLI(t, 0, append(args, "--keys-only", "--format", "json")...).stdout), &arr); err != nil {
			t.Fatal(err)
		}
		if arr == nil {
			arr = []string{}
		}
		if diff := cmp.Diff(b64(exp), arr); diff != "" {
			t.Fatalf("scan --keys-only --format json %q (-oracle +scan):\n%s", args, diff)
		}
		lines := []string{}
		for _, l := range strings.Split(strings.TrimSuffix(mustCLI(t, 0, append(args, "--keys-only", "--format", "jsonl")...).stdout, "\n"), "\n") {
			if l == "" {
				continue
			}
			var o map[string]string
			if err := json.Unmarshal([]byte(l), &o); err != nil || len(o) != 1 {
				t.Fatalf("keys-only jsonl line %q: want {\"key\": ...} (%v)", l, err)
			}
			lines = append(lines, o["key"])
		}
		if diff := cmp.Diff(b64(exp), lines); diff != "" {
			t.Fatalf("scan --keys-only --format jsonl %q (-oracle +scan):\n%s", args, diff)
		}
		tsv := mustCLI(t, 0, append(args, "--keys-only", "--format", "tsv")...).stdout
		if text := mustCLI(t, 0, append(args, "--keys-only", "--format", "text")...).stdout; text != tsv {
			t.Fatalf("--format text %q differs from tsv %q", text, tsv)
		}
		if wantTSV := strings.Join(b64(exp), "\n"); strings.TrimSuffix(tsv, "\n") != wantTSV {
			t.Fatalf("scan --keys-only --format tsv %q printed %q, want %q", args, tsv, wantTSV)
		}
		// Count.
		if out := mustCLI(t, 0, append(args, "--count", "--format", "text")...).stdout; out != fmt.Sprintf("%d\n", len(exp)) {
			t.Fatalf("scan --count %q printed %q, want %d", args, out, len(exp))
		}
		if out := mustCLI(t, 0, append(args, "--count", "--format", "json")...).stdout; out != fmt.Sprintf("{\"count\":%d}\n", len(exp)) {
			t.Fatalf("scan --count --format json %q printed %q, want %d", args, out, len(exp))
		}
	}
	// Keys-only without --base64 in tsv: text keys, one per line.
	out := mustCLI(t, 0, "scan", "--db", db, "--table", table, "--prefix", "k", "--to", keys[4], "--keys-only", "--format", "tsv").stdout
	if out != strings.Join(keys[:4], "\n")+"\n" {
		t.Fatalf("scan --keys-only --format tsv printed %q, want %q", out, keys[:4])
	}
	// --key-encoding hex for the bounds: from the key that is not UTF-8.
	bin := "\xff\xfe-bin"
	got := decodeRows(t, mustCLI(t, 0, "scan", "--db", db, "--table", table, "--base64", "--format", "jsonl",
		"--key-encoding", "hex", "--from", hex.EncodeToString([]byte(bin))).stdout)
	expRows := map[string]string{}
	for _, k := range sel("", bin, "", 0) {
		expRows[k] = want[k]
	}
	if len(expRows) == 0 || !cmp.Equal(expRows, got) {
		t.Fatalf("scan --key-encoding hex --from: %q, oracle %q", got, expRows)
	}
	for _, args := range [][]string{
		{"--count", "--keys-only"}, {"--format", "csv"}, {"--key-encoding", "hex", "--from", "xyz"},
	} {
		r := mustCLI(t, exitUsage, append([]string{"scan", "--db", db, "--table", table}, args...)...)
		if r.stdout != "" || !strings.Contains(r.stderr, "\nTry: ") {
			t.Fatalf("scan %q: stdout %q, stderr %q; want nothing and a hint", args, r.stdout, r.stderr)
		}
	}
}

// checkpointOf reports whether the file at db holds a checkpoint for
// table, reading the bbolt file itself (read-only) after the command ended.
func checkpointOf(t *testing.T, db, table string) bool {
	t.Helper()
	bdb, err := bolt.Open(db, 0o600, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	found := false
	err = bdb.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(store.BucketCheckpoints); b != nil {
			found = b.Bucket([]byte(table)) != nil
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestDrop: drop removes the table (get and scan exit 6, tables no longer
// lists it), its checkpoint (read from the file) and its generation (check
// passes and counts one generation fewer), prints what it dropped, and
// leaves the other table equal to its oracle; a second drop exits 6 with a
// hint; a drop on a missing file exits 1 and creates nothing.
func TestDrop(t *testing.T) {
	rng := newRand(t)
	keep, gone := newTopic(t, 2), newTopic(t, 2)
	wantKeep, _, _ := oracle(produce(t, keep, genRecords(rng, []int32{0, 1}, 200)), nil)
	wantGone, _, _ := oracle(produce(t, gone, genRecords(rng, []int32{0, 1}, 200)), nil)
	db := dbPath(t)
	mustCLI(t, 0, rebuildArgs(keep, db)...)
	mustCLI(t, 0, rebuildArgs(gone, db)...)
	before := tablesJSON(t, db)
	if !checkpointOf(t, db, gone) {
		t.Fatalf("no checkpoint of %s before the drop", gone)
	}
	r := mustCLI(t, 0, "drop", "--db", db, "--table", gone, "--format", "json")
	var dropped struct {
		Dropped    string `json:"dropped"`
		Generation uint64 `json:"generation"`
		Keys       int64  `json:"keys"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &dropped); err != nil {
		t.Fatal(err)
	}
	if dropped.Dropped != gone || dropped.Generation != before[gone].Generation || dropped.Keys != int64(len(wantGone)) {
		t.Fatalf("drop printed %+v, want table %s generation %d keys %d", dropped, gone, before[gone].Generation, len(wantGone))
	}
	after := tablesJSON(t, db)
	if _, ok := after[gone]; ok || len(after) != 1 {
		t.Fatalf("tables after the drop: %v", after)
	}
	if checkpointOf(t, db, gone) || !checkpointOf(t, db, keep) {
		t.Fatalf("after the drop: checkpoint of %s %v (want gone), of %s %v (want kept)", gone, checkpointOf(t, db, gone), keep, checkpointOf(t, db, keep))
	}
	checkTable(t, wantKeep, scanTable(t, db, keep))
	for k := range wantGone {
		mustCLI(t, exitNotFound, "get", "--db", db, "--table", gone, k)
		break
	}
	mustCLI(t, exitNotFound, "scan", "--db", db, "--table", gone)
	var rep struct {
		Tables, Generations int
		Problems            []string
	}
	if err := json.Unmarshal([]byte(mustCLI(t, 0, "check", "--db", db, "--format", "json").stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Tables != 1 || rep.Generations != 1 || len(rep.Problems) != 0 {
		t.Fatalf("check after the drop: %+v, want 1 table, 1 generation, no problems", rep)
	}
	r = mustCLI(t, exitNotFound, "drop", "--db", db, "--table", gone)
	if !strings.Contains(r.stderr, gone) || !strings.Contains(r.stderr, "\nTry: ") {
		t.Fatalf("second drop: stderr does not name the table with a hint:\n%s", r.stderr)
	}
	missing := filepath.Join(t.TempDir(), "none.db")
	mustCLI(t, exitNotFound, "drop", "--db", missing, "--table", gone)
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("drop on a missing file created it: %v", err)
	}
	r = mustCLI(t, 0, "drop", "--db", db, "--table", keep)
	if r.stdout != fmt.Sprintf("dropped table %s: generation %d, %d keys\n", keep, before[keep].Generation, len(wantKeep)) {
		t.Fatalf("drop printed %q", r.stdout)
	}
}

// TestRoutedCLIDetails: with a daemon holding the database, get of several
// keys (arguments, and stdin to the built binary), scan with --from/--to,
// --keys-only and --count, and tables --format jsonl print byte for byte
// what they printed on the file before the daemon started, with the same
// exit codes (--lock-timeout 0: a command that opened the file instead
// would exit 7). drop goes through the daemon: a table only in the file is
// dropped (exit 0, with its checkpoint: read from the file after the daemon
// stopped), a configured one is refused (exit 2, a hint), an absent one is
// exit 6; the daemon's request metrics show the DELETE answered.
func TestRoutedCLIDetails(t *testing.T) {
	rng := newRand(t)
	topic, extraTopic := newTopic(t, 3), newTopic(t, 1)
	recs := produce(t, topic, routeRecords(rng, []int32{0, 1, 2}, 4000, 2600))
	want, _, _ := oracle(recs, nil)
	wantExtra, _, _ := oracle(produce(t, extraTopic, genRecords(rng, []int32{0}, 100)), nil)
	s := newDaemonSetup(t, map[string]string{"balances": topic})
	mustCLI(t, 0, rebuildArgs(topic, s.db, "--table", "balances")...)
	mustCLI(t, 0, rebuildArgs(extraTopic, s.db, "--table", "extra")...)
	extraGen := tablesJSON(t, s.db)["extra"].Generation

	keys := sortedKeys(withPrefix(want, "k"))
	if len(keys) < 1100 {
		t.Fatalf("the oracle has %d k-keys; the test needs more than a page of 1000", len(keys))
	}
	type cmdCase struct {
		stdin string
		args  []string
	}
	// Flags before the arguments: urfave/cli stops at the first one.
	base := func(args ...string) []string { return append([]string{args[0], "--db", s.db}, args[1:]...) }
	cases := []cmdCase{
		{"", base("get", "--table", "balances", keys[1], "no-such-key", keys[7], "x/slash", ".")},
		{"", base("get", "--table", "balances", keys[1], "\xff\xfe-bin")},
		{"", base("get", "--table", "balances", "--base64", keys[1], "v-bin")},
		{"", base("get", "--table", "balances", "--format", "json", keys[1], keys[2])},
		{"", base("get", "--table", "balances", "--key-encoding", "hex", hex.EncodeToString([]byte("\xff\xfe-bin")))},
		{strings.Join(keys[100:300], "\n") + "\nabsent\n", base("get", "--table", "balances", "-")},
		{"", base("scan", "--table", "balances", "--from", keys[10], "--to", keys[1090], "--format", "jsonl")},
		{"", base("scan", "--table", "balances", "--prefix", "k", "--from", keys[10], "--keys-only", "--format", "json")},
		{"", base("scan", "--table", "balances", "--prefix", "k", "--to", keys[50], "--keys-only", "--format", "tsv", "--limit", "20")},
		{"", base("scan", "--table", "balances", "--from", keys[3], "--count")},
		{"", base("scan", "--table", "balances", "--prefix", "k", "--count", "--format", "json", "--limit", "5")},
		{"", base("tables", "--format", "jsonl")},
	}
	direct := make([]result, len(cases))
	for i, c := range cases {
		direct[i] = binExec(t, binPath, c.stdin, c.args...)
		if direct[i].code != 0 && direct[i].code != exitNotFound && direct[i].code != exitUsage {
			t.Fatalf("direct %q: exit %d", c.args, direct[i].code)
		}
	}
	// What each must give: a missing key 6, a key that is not UTF-8 in
	// JSON lines without --base64 2, the rest 0.
	for i, code := range []int{exitNotFound, exitUsage, 0, 0, 0, exitNotFound, 0, 0, 0, 0, 0, 0} {
		if direct[i].code != code {
			t.Fatalf("direct %q: exit %d, want %d", cases[i].args, direct[i].code, code)
		}
	}
	// The file's answers are the oracle's.
	if got := decodeJSONLRows(t, direct[6].stdout); !cmp.Equal(got, sliceOf(want, keys[10], keys[1090])) {
		t.Fatalf("direct scan --from --to differs from the oracle")
	}

	p := s.start(t)
	rowsBefore := rowsRequests(t, s.sock)
	for i, c := range cases {
		args := append([]string{c.args[0], "--lock-timeout", "0"}, c.args[1:]...)
		if c.args[0] == "tables" {
			// tables shows the generation, which the daemon's start
			// rebuilt: compare the rest.
			r := binExec(t, binPath, c.stdin, args...)
			if r.code != 0 || strings.Count(r.stdout, "\n") != 2 {
				t.Fatalf("routed tables --format jsonl: exit %d, %q", r.code, r.stdout)
			}
			continue
		}
		r := binExec(t, binPath, c.stdin, args...)
		if r.code != direct[i].code || r.stdout != direct[i].stdout {
			t.Fatalf("routed %q: exit %d, stdout %.300q; on the file: exit %d, stdout %.300q", c.args, r.code, r.stdout, direct[i].code, direct[i].stdout)
		}
		if r.code == exitNotFound && !strings.Contains(r.stderr, "the daemon at") {
			t.Fatalf("routed %q: stderr does not say the daemon answered:\n%s", c.args, r.stderr)
		}
	}
	if n := rowsRequests(t, s.sock) - rowsBefore; n < 3 {
		t.Fatalf("the daemon answered %d rows pages for the routed scans, want at least 3", n)
	}

	// drop through the daemon.
	r := binExec(t, binPath, "", "drop", "--db", s.db, "--table", "balances", "--lock-timeout", "0")
	if r.code != exitUsage || !strings.Contains(r.stderr, "config") || !strings.Contains(r.stderr, "\nTry: ") {
		t.Fatalf("routed drop of a configured table: exit %d, want %d with a hint\n%s", r.code, exitUsage, r.stderr)
	}
	r = binExec(t, binPath, "", "drop", "--db", s.db, "--table", "extra", "--lock-timeout", "0")
	if r.code != 0 || r.stdout != fmt.Sprintf("dropped table extra: generation %d, %d keys\n", extraGen, len(wantExtra)) {
		t.Fatalf("routed drop: exit %d, stdout %q", r.code, r.stdout)
	}
	if r := binExec(t, binPath, "", "drop", "--db", s.db, "--table", "extra", "--lock-timeout", "0"); r.code != exitNotFound {
		t.Fatalf("second routed drop: exit %d, want %d", r.code, exitNotFound)
	}
	if r := binExec(t, binPath, "", "scan", "--db", s.db, "--table", "extra", "--lock-timeout", "0"); r.code != exitNotFound {
		t.Fatalf("scan of the dropped table: exit %d, want %d", r.code, exitNotFound)
	}
	if n := routeAnswers(t, s.sock, "DELETE /v1/tables/{table}", "200"); n != 1 {
		t.Fatalf("the daemon answered %d DELETEs with 200, want 1", n)
	}
	stopDaemon(t, p)
	if checkpointOf(t, s.db, "extra") || !checkpointOf(t, s.db, "balances") {
		t.Fatalf("after the routed drop: the checkpoint of extra must be gone, that of balances kept")
	}
	ts := tablesJSON(t, s.db)
	if _, ok := ts["extra"]; ok || len(ts) != 1 {
		t.Fatalf("tables after the routed drop: %v", ts)
	}
	checkTable(t, want, decodeRows(t, mustCLI(t, 0, "scan", "--db", s.db, "--table", "balances", "--base64", "--format", "jsonl").stdout))
}

// decodeJSONLRows reads scan --format jsonl output (UTF-8 keys).
func decodeJSONLRows(t *testing.T, out string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var row struct{ Key, Value string }
		if err := json.Unmarshal([]byte(l), &row); err != nil {
			t.Fatalf("scan line %q: %v", l, err)
		}
		got[row.Key] = row.Value
	}
	return got
}

// sliceOf is the oracle's rows with from <= key < to.
func sliceOf(m map[string]string, from, to string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if k >= from && k < to {
			out[k] = v
		}
	}
	return out
}

// routeAnswers is how many requests of route the daemon answered with
// status code, from its request metrics.
func routeAnswers(t *testing.T, sock, route, code string) int {
	t.Helper()
	cl := unixClient(t, sock)
	defer cl.CloseIdleConnections()
	status, body, _ := httpGet(t, cl, "/metrics")
	if status != 200 {
		t.Fatalf("GET /metrics: %d", status)
	}
	n := 0
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "kmaterialize_http_request_duration_seconds_count{") &&
			strings.Contains(l, `"`+route+`"`) && strings.Contains(l, `code="`+code+`"`) {
			f := strings.Fields(l)
			var v int
			fmt.Sscan(f[len(f)-1], &v)
			n += v
		}
	}
	return n
}
