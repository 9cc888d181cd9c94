package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/store"
)

// routeRecords generates n records over parts with keys from a pool of
// pool keys "k<N>" (a key lives in one partition), about 1 in 20 a
// tombstone and 1 in 33 with a null key; then one record for each key or
// value the daemon's paths and formats must carry unchanged: a '/', "." and
// "..", a space and '%', bytes that are not UTF-8 (in a key, in a value), a
// tab in a value, an empty value.
func routeRecords(rng *rand.Rand, parts []int32, n, pool int) []localkafka.Record {
	out := make([]localkafka.Record, 0, n+8)
	for i := 0; i < n; i++ {
		k := rng.Intn(pool)
		r := localkafka.Record{Partition: parts[k%len(parts)], Key: []byte(fmt.Sprintf("k%05d", k))}
		switch x := rng.Intn(100); {
		case x < 5: // tombstone
		case x < 8:
			r.Key, r.Value = nil, []byte("orphan")
		default:
			r.Value = []byte(fmt.Sprintf("v%d-%d", i, rng.Intn(1_000_000)))
		}
		out = append(out, r)
	}
	for k, v := range map[string]string{
		"x/slash": "slash", ".": "dot", "..": "dotdot", "sp ace%": "space", "\xff\xfe-bin": "binary key",
		"v-bin": "\xff\xfe", "t-tab": "a\tb", "x-empty": "",
	} {
		out = append(out, localkafka.Record{Partition: parts[0], Key: []byte(k), Value: []byte(v)})
	}
	return out
}

// daemonSetup is a config file naming tables over topics of the test broker,
// and the database and socket it implies.
type daemonSetup struct {
	cfg, db, sock string
}

func newDaemonSetup(t *testing.T, tables map[string]string) daemonSetup {
	t.Helper()
	dir := t.TempDir()
	doc := fmt.Sprintf("db: tables.db\nkafka:\n  brokers: %s\ntables:\n", broker.Addr)
	for name, topic := range tables {
		doc += fmt.Sprintf("  - name: %s\n    topic: %s\n    stall_timeout: 120s\n", name, topic)
	}
	s := daemonSetup{cfg: filepath.Join(dir, "kmaterialize.yaml"), db: filepath.Join(dir, "tables.db")}
	s.sock = s.db + ".sock"
	if err := os.WriteFile(s.cfg, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

// start runs `kmaterialize serve --config` and waits until /readyz says
// every table is published.
func (s daemonSetup) start(t *testing.T) *proc {
	t.Helper()
	p := startProc(t, "--log-format", "json", "serve", "--config", s.cfg)
	awaitStatus(t, unixClient(t, s.sock), p, "/readyz", http.StatusOK)
	return p
}

// stop sends SIGTERM, which must end the daemon with exit 0.
func stopDaemon(t *testing.T, p *proc) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("daemon exit %d after SIGTERM, want 0", code)
	}
}

// quiet runs the CLI in-process, logging the size of stdout, not its text.
func quiet(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb strings.Builder
	code := run(context.Background(), append([]string{"kmaterialize"}, args...), &out, &errb)
	t.Logf("$ kmaterialize %q\n-> exit %d, %d bytes on stdout\nstderr:\n%s", args, code, out.Len(), errb.String())
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// rowsRequests is how many rows pages the daemon answered with 200, from
// its request metrics.
func rowsRequests(t *testing.T, sock string) int { return rowsAnswers(t, sock, "200") }

// rowsAnswers is how many rows pages the daemon answered with status code,
// from its request metrics.
func rowsAnswers(t *testing.T, sock, code string) int {
	t.Helper()
	cl := unixClient(t, sock)
	defer cl.CloseIdleConnections()
	status, body, _ := httpGet(t, cl, "/metrics")
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: %d", status)
	}
	n := 0
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "kmaterialize_http_request_duration_seconds_count{") &&
			strings.Contains(l, `"GET /v1/tables/{table}/rows"`) && strings.Contains(l, `"`+code+`"`) {
			f := strings.Fields(l)
			v, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				t.Fatalf("metrics line %q: %v", l, err)
			}
			n += v
		}
	}
	return n
}

// decodeRows reads `scan --format jsonl --base64` output, checking
// ascending key order.
func decodeRows(t *testing.T, out string) map[string]string {
	t.Helper()
	got := map[string]string{}
	last := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var row struct{ Key, Value string }
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("scan line %q: %v", sc.Text(), err)
		}
		k, err1 := base64.StdEncoding.DecodeString(row.Key)
		v, err2 := base64.StdEncoding.DecodeString(row.Value)
		if err1 != nil || err2 != nil {
			t.Fatalf("scan line %q: not base64", sc.Text())
		}
		if len(got) > 0 && string(k) <= last {
			t.Fatalf("scan: key %q after %q, want strictly ascending", k, last)
		}
		last = string(k)
		got[string(k)] = string(v)
	}
	return got
}

func withPrefix(m map[string]string, prefix string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

// TestRoutedCLI runs every query command three ways, through the daemon
// found from the database's holder record, through --socket, and (after
// SIGTERM stopped the daemon, exit 0) on the file, and compares stdout
// byte for byte and the exit codes, which are also checked against what
// each case must give; the contents are checked against the oracle fold.
// Routed runs use --lock-timeout 0, so a run that opened the file instead
// of asking the daemon would exit 7. Then a restarted daemon runs routed
// rebuilds: exit 0 and the new generation with the oracle's counts, flags
// that change what is built refused with exit 2, a rebuild while one is
// running (held by an open transaction) exit 7; the direct rebuild after
// the daemon stops prints the same line.
func TestRoutedCLI(t *testing.T) {
	rng := newRand(t)
	topic, slowTopic := newTopic(t, 3), newTopic(t, 1)
	recs := produce(t, topic, routeRecords(rng, []int32{0, 1, 2}, 4000, 2600))
	want, read, skipped := oracle(recs, nil)
	slowRecs := produce(t, slowTopic, genRecords(rng, []int32{0}, 50))
	if len(withPrefix(want, "k")) <= 1200 {
		t.Fatalf("the oracle table has %d k-rows; the test needs more than 1200 (several pages of 1000)", len(withPrefix(want, "k")))
	}
	s := newDaemonSetup(t, map[string]string{"balances": topic, "slow": slowTopic})
	p := s.start(t)

	someKey := ""
	for k := range withPrefix(want, "k") {
		someKey = k
		break
	}
	cases := []struct {
		code int
		args []string
	}{
		{0, []string{"get", "--table", "balances", someKey}},
		{0, []string{"get", "--table", "balances", "--base64", someKey}},
		{0, []string{"get", "--table", "balances", "x/slash"}},
		{0, []string{"get", "--table", "balances", "."}},
		{0, []string{"get", "--table", "balances", ".."}},
		{0, []string{"get", "--table", "balances", "sp ace%"}},
		{0, []string{"get", "--table", "balances", "x-empty"}},
		{0, []string{"get", "--table", "balances", "--base64", "\xff\xfe-bin"}},
		{0, []string{"get", "--table", "balances", "--base64", "v-bin"}},
		{0, []string{"get", "--table", "balances", "t-tab"}},
		{exitNotFound, []string{"get", "--table", "balances", "no-such-key"}},
		{exitNotFound, []string{"get", "--table", "balances", ""}},
		{exitNotFound, []string{"get", "--table", "nope", someKey}},
		{exitUsage, []string{"scan", "--table", "balances"}}, // a key that is not UTF-8
		{0, []string{"scan", "--table", "balances", "--base64"}},
		{0, []string{"scan", "--table", "balances", "--base64", "--format", "jsonl"}},
		{0, []string{"scan", "--table", "balances", "--base64", "--format", "tsv"}},
		{0, []string{"scan", "--table", "balances", "--prefix", "k"}},
		{0, []string{"scan", "--table", "balances", "--prefix", "k", "--format", "jsonl"}},
		{0, []string{"scan", "--table", "balances", "--prefix", "k", "--format", "tsv"}},
		{0, []string{"scan", "--table", "balances", "--prefix", "k0", "--limit", "1100", "--format", "jsonl"}},
		{0, []string{"scan", "--table", "balances", "--limit", "20000", "--base64", "--format", "tsv"}},
		{0, []string{"scan", "--table", "balances", "--prefix", ".", "--format", "tsv"}},
		{exitUsage, []string{"scan", "--table", "balances", "--prefix", "t", "--format", "tsv"}}, // a tab
		{exitUsage, []string{"scan", "--table", "balances", "--prefix", "v", "--format", "jsonl"}},
		{0, []string{"scan", "--table", "balances", "--prefix", "zzz"}},
		{exitNotFound, []string{"scan", "--table", "nope"}},
		{0, []string{"tables"}},
		{0, []string{"tables", "--format", "json"}},
		{0, []string{"export", "--table", "balances", "--base64"}},
		{exitUsage, []string{"export", "--table", "balances"}},
		{exitNotFound, []string{"export", "--table", "nope"}},
	}
	// withFlags puts flags before get's KEY (flags after it are arguments).
	withFlags := func(args []string, flags ...string) []string {
		n := len(args)
		if args[0] != "get" {
			return append(append([]string(nil), args...), flags...)
		}
		return append(append(append([]string(nil), args[:n-1]...), flags...), args[n-1])
	}
	routedArgs := func(args []string, extra ...string) []string {
		return withFlags(args, append([]string{"--db", s.db, "--lock-timeout", "0"}, extra...)...)
	}
	found := make([]result, len(cases))
	viaSocket := make([]result, len(cases))
	for i, c := range cases {
		before := rowsRequests(t, s.sock)
		found[i] = quiet(t, routedArgs(c.args)...)
		if strings.Join(c.args, " ") == "scan --table balances --base64 --format jsonl" {
			// The whole table, > 1000 rows: one request per page of the
			// daemon's default 1000, pinned to one generation.
			// The daemon counts a request once its handler returned,
			// which can be after the client read the whole answer: wait
			// for the count to settle.
			pages := (len(want) + 999) / 1000
			n := rowsRequests(t, s.sock) - before
			for settle := time.Now().Add(10 * time.Second); n < pages && time.Now().Before(settle); n = rowsRequests(t, s.sock) - before {
				time.Sleep(10 * time.Millisecond)
			}
			if n != pages {
				t.Errorf("routed scan of %d rows made %d rows requests, want %d pages", len(want), n, pages)
			}
			if diff := cmp.Diff(want, decodeRows(t, found[i].stdout)); diff != "" {
				t.Errorf("routed scan --base64 vs the oracle:\n%s", diff)
			}
		}
		if c.args[0] == "get" && c.code == 0 {
			// The value against the oracle.
			key := c.args[len(c.args)-1]
			v, ok := want[key]
			wantOut := v + "\n"
			if c.args[3] == "--base64" {
				wantOut = base64.StdEncoding.EncodeToString([]byte(v)) + "\n"
			}
			if !ok || found[i].stdout != wantOut {
				t.Errorf("routed get %q: %q, oracle %q (in the table: %v)", key, found[i].stdout, wantOut, ok)
			}
		}
		viaSocket[i] = quiet(t, withFlags(c.args, "--db", s.db, "--socket", s.sock)...)
	}
	// export --out through the daemon.
	outDir := t.TempDir()
	if r := quiet(t, routedArgs([]string{"export", "--table", "balances", "--base64", "--out", filepath.Join(outDir, "routed.json")})...); r.code != 0 {
		t.Fatalf("routed export --out: exit %d\n%s", r.code, r.stderr)
	}
	// --socket naming a daemon that does not hold --db (say, a stale
	// KMATERIALIZE_SOCKET) is refused: its answers would come from another
	// database.
	other := filepath.Join(t.TempDir(), "other.db")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := quiet(t, "get", "--db", other, "--table", "balances", "--socket", s.sock, "k00001"); r.code != exitUsage ||
		!strings.Contains(r.stderr, "that daemon does not hold "+other) || r.stdout != "" {
		t.Fatalf("--socket of a daemon that does not hold --db: exit %d, stdout %q\n%s", r.code, r.stdout, r.stderr)
	}
	// The holder record named the socket: the same file is held, so the
	// daemon answered.
	if h := store.ReadHolder(s.db); h == nil || h.Socket != s.sock {
		t.Fatalf("holder record while the daemon runs: %+v, want socket %s", h, s.sock)
	}

	stopDaemon(t, p)
	for i, c := range cases {
		direct := quiet(t, withFlags(c.args, "--db", s.db, "--lock-timeout", "0")...)
		if direct.code != c.code {
			t.Errorf("direct %q: exit %d, want %d\n%s", c.args, direct.code, c.code, direct.stderr)
		}
		for _, r := range []struct {
			how string
			res result
		}{{"found from the holder record", found[i]}, {"--socket", viaSocket[i]}} {
			if r.res.code != direct.code || r.res.stdout != direct.stdout {
				t.Errorf("%q routed (%s): exit %d, %d bytes; direct: exit %d, %d bytes\nrouted stdout:\n%.2000s\ndirect stdout:\n%.2000s\nrouted stderr:\n%s",
					c.args, r.how, r.res.code, len(r.res.stdout), direct.code, len(direct.stdout), r.res.stdout, direct.stdout, r.res.stderr)
			}
			if r.res.code != 0 && !strings.Contains(r.res.stderr, "the daemon at "+s.sock+" answered") && r.res.code != exitUsage {
				t.Errorf("%q routed (%s): stderr does not say the daemon answered:\n%s", c.args, r.how, r.res.stderr)
			}
		}
	}
	if r := quiet(t, "export", "--table", "balances", "--base64", "--db", s.db, "--out", filepath.Join(outDir, "direct.json")); r.code != 0 {
		t.Fatalf("direct export --out: exit %d\n%s", r.code, r.stderr)
	}
	a, errA := os.ReadFile(filepath.Join(outDir, "routed.json"))
	b, errB := os.ReadFile(filepath.Join(outDir, "direct.json"))
	if errA != nil || errB != nil || string(a) != string(b) {
		t.Errorf("export --out: routed and direct files differ (%v, %v; %d and %d bytes)", errA, errB, len(a), len(b))
	}
	// Contents against the oracle, on the direct path's output (equal to
	// the routed one above).
	tb := tablesJSON(t, s.db)["balances"]
	if tb.Keys != int64(len(want)) || tb.Records != read || tb.Skipped != skipped {
		t.Fatalf("tables: %d keys, %d records, %d skipped; oracle %d, %d, %d", tb.Keys, tb.Records, tb.Skipped, len(want), read, skipped)
	}
	gen := tb.Generation

	// Rebuilds through a restarted daemon (which serves the published
	// tables without building them again).
	routedRebuild(t, s, s.start(t), topic, slowTopic, gen, recs, slowRecs, rng)
}

// publishedLine matches rebuild's stdout.
var publishedLine = regexp.MustCompile(`^published table (\S+): generation (\d+), (\d+) keys, (\d+) records read, (\d+) skipped( \([^)]*\))?, in \S+\n$`)

// routedRebuild is the rebuild half of TestRoutedCLI, with the daemon of s
// running as p and balances published at generation gen; it stops p.
func routedRebuild(t *testing.T, s daemonSetup, p *proc, topic, slowTopic string, gen uint64, recs, slowRecs []rec, rng *rand.Rand) {
	t.Helper()
	if g := tablesJSON(t, s.db)["balances"].Generation; g != gen {
		t.Fatalf("the restarted daemon serves generation %d, want the published %d", g, gen)
	}
	all := append(append([]rec(nil), recs...), produce(t, topic, routeRecords(rng, []int32{0, 1, 2}, 500, 2600))...)
	want, read, skipped := oracle(all, nil)
	// checkPublished checks a rebuild's line against the oracle and the
	// table's generation afterwards (generations count per file, so after
	// prev) and returns the new generation.
	checkPublished := func(r result, prev uint64) uint64 {
		t.Helper()
		m := publishedLine.FindStringSubmatch(r.stdout)
		if r.code != 0 || m == nil {
			t.Fatalf("rebuild: exit %d, stdout %q\n%s", r.code, r.stdout, r.stderr)
		}
		g, _ := strconv.ParseUint(m[2], 10, 64)
		if m[1] != "balances" || g <= prev || g != tablesJSON(t, s.db)["balances"].Generation ||
			m[3] != fmt.Sprint(len(want)) || m[4] != fmt.Sprint(read) || m[5] != fmt.Sprint(skipped) {
			t.Fatalf("rebuild printed %q; want a generation after %d (the one tables shows), oracle %d keys, %d read, %d skipped", r.stdout, prev, len(want), read, skipped)
		}
		return g
	}
	r := quiet(t, "rebuild", "--db", s.db, "--table", "balances", "--lock-timeout", "0")
	gen = checkPublished(r, gen)
	routedLine := r.stdout
	scan := quiet(t, "scan", "--db", s.db, "--table", "balances", "--base64", "--format", "jsonl", "--lock-timeout", "0")
	if diff := cmp.Diff(want, decodeRows(t, scan.stdout)); scan.code != 0 || diff != "" {
		t.Fatalf("routed scan after the routed rebuild: exit %d\n%s", scan.code, diff)
	}
	// --config names the database; the file's topic and brokers are not
	// flags of the user's.
	gen = checkPublished(quiet(t, "rebuild", "--config", s.cfg, "--table", "balances", "--lock-timeout", "0"), gen)

	for _, extra := range [][]string{
		{"--end", "stable"}, {"-X", "fetch.max.bytes=1024"}, {"--topic", slowTopic}, {"--from-offsets", "0=1"},
		{"--fold", "count"}, {"--allow-empty"}, {"--brokers", broker.Addr}, {"--stall-timeout", "5s"},
	} {
		args := append([]string{"rebuild", "--db", s.db, "--table", "balances", "--lock-timeout", "0"}, extra...)
		r := quiet(t, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, extra[0]) || !strings.Contains(r.stderr, "config") || r.stdout != "" {
			t.Errorf("routed rebuild with %q: exit %d, want 2 naming the flag and the daemon's config\n%s", extra, r.code, r.stderr)
		}
	}
	// --topic without --table names the table after the topic, as on the
	// file: refused the same way rather than left to a busy database.
	if r := quiet(t, "rebuild", "--db", s.db, "--topic", "balances", "--brokers", broker.Addr, "--lock-timeout", "0"); r.code != exitUsage || !strings.Contains(r.stderr, "--topic") || !strings.Contains(r.stderr, "config") {
		t.Errorf("routed rebuild with --topic and no --table: exit %d, want 2\n%s", r.code, r.stderr)
	}
	// A table the daemon's config does not define: exit 2, as a rebuild
	// without its definition.
	if r := quiet(t, "rebuild", "--db", s.db, "--table", "nope", "--lock-timeout", "0"); r.code != exitUsage || !strings.Contains(r.stderr, "config") {
		t.Errorf("routed rebuild of an unconfigured table: exit %d, want 2\n%s", r.code, r.stderr)
	}
	if g := tablesJSON(t, s.db)["balances"].Generation; g != gen {
		t.Fatalf("after refused rebuilds: generation %d, want %d (nothing run)", g, gen)
	}

	// A run held by an open transaction on slow's topic: a second request
	// gets 409, exit 7.
	tx, err := broker.BeginTxn(context.Background(), slowTopic, runName(t))
	if err != nil {
		t.Fatal(err)
	}
	open := genRecords(rng, []int32{0}, 5)
	offs, err := tx.Produce(context.Background(), open)
	if err != nil {
		t.Fatal(err)
	}
	slowGen := tablesJSON(t, s.db)["slow"].Generation
	first := startProc(t, "rebuild", "--db", s.db, "--table", "slow")
	cl := unixClient(t, s.sock)
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body, _ := httpGet(t, cl, "/v1/tables/slow")
		var tj struct {
			State string          `json:"state"`
			Run   json.RawMessage `json:"run"`
		}
		if code == http.StatusOK && json.Unmarshal([]byte(body), &tj) == nil && tj.State == "rebuilding" && string(tj.Run) != "null" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slow never showed a run going: %d %s\nfirst rebuild's stderr:\n%s", code, body, first.stderrText())
		}
		time.Sleep(20 * time.Millisecond)
	}
	second := quiet(t, "rebuild", "--db", s.db, "--table", "slow", "--lock-timeout", "0")
	if second.code != exitBusy || !strings.Contains(second.stderr, "already running") || second.stdout != "" {
		t.Fatalf("rebuild while one runs: exit %d, want 7 saying one is running\n%s", second.code, second.stderr)
	}
	if err := tx.End(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if code := first.wait(t, 120*time.Second); code != 0 {
		t.Fatalf("the held rebuild: exit %d\n%s", code, first.stderrText())
	}
	slowAll := append(append([]rec(nil), slowRecs...), withOffsets(open, offs, true)...)
	slowWant, slowRead, slowSkipped := oracle(slowAll, nil)
	m := publishedLine.FindStringSubmatch(first.stdout.String())
	if m == nil || m[2] != fmt.Sprint(tablesJSON(t, s.db)["slow"].Generation) || m[2] == fmt.Sprint(slowGen) || m[3] != fmt.Sprint(len(slowWant)) || m[4] != fmt.Sprint(slowRead) || m[5] != fmt.Sprint(slowSkipped) {
		t.Fatalf("the held rebuild printed %q; want a generation after %d (the one tables shows), oracle %d keys, %d read, %d skipped", first.stdout.String(), slowGen, len(slowWant), slowRead, slowSkipped)
	}

	// The direct rebuild of the same records prints the same line but for
	// the generation and the time taken.
	stopDaemon(t, p)
	r = quiet(t, "rebuild", "--config", s.cfg, "--table", "balances", "--lock-timeout", "0")
	checkPublished(r, gen)
	mask := func(s string) string {
		return publishedLine.ReplaceAllString(s, "published table $1: generation N, $3 keys, $4 records read, $5 skipped$6, in T\n")
	}
	if mask(r.stdout) != mask(routedLine) {
		t.Fatalf("direct rebuild printed %q, routed %q", r.stdout, routedLine)
	}
}

// TestRoutedCLIAfterKill9: a daemon killed with SIGKILL leaves its holder
// record and its socket file behind. The CLI sees that the record's pid is
// gone and reads the file itself; a record whose pid is alive (reused) but
// whose socket nobody listens on is also left to the file; --socket naming
// the dead socket is exit 1 saying no daemon listens there.
func TestRoutedCLIAfterKill9(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 2)
	want, _, _ := oracle(produce(t, topic, routeRecords(rng, []int32{0, 1}, 300, 100)), nil)
	s := newDaemonSetup(t, map[string]string{"balances": topic})
	p := s.start(t)
	pid := p.cmd.Process.Pid
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != -1 {
		t.Fatalf("killed daemon: exit code %d, want -1 (killed by a signal)", code)
	}

	// What the kill left: the record naming the dead pid and the socket,
	// and the socket file.
	raw, err := os.ReadFile(store.HolderPath(s.db))
	if err != nil {
		t.Fatalf("no holder record after the kill: %v", err)
	}
	var h store.Holder
	if err := json.Unmarshal(raw, &h); err != nil || h.PID != pid || h.Socket != s.sock {
		t.Fatalf("holder record %s (%v), want pid %d and socket %s", raw, err, pid, s.sock)
	}
	if fi, err := os.Lstat(s.sock); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("socket file after the kill: %v, %v", fi, err)
	}
	if store.ReadHolder(s.db) != nil {
		t.Fatal("ReadHolder returned the record of a dead pid")
	}

	direct := func(what string) {
		t.Helper()
		got := decodeRows(t, quiet(t, "scan", "--db", s.db, "--table", "balances", "--base64", "--format", "jsonl", "--lock-timeout", "0").stdout)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("%s: scan vs the oracle (-want +got):\n%s", what, diff)
		}
		k := anyKey(t, withPrefix(want, "k"))
		if r := quiet(t, "get", "--db", s.db, "--table", "balances", "--lock-timeout", "0", k); r.code != 0 || r.stdout != want[k]+"\n" {
			t.Fatalf("%s: get %s: exit %d, %q; oracle %q", what, k, r.code, r.stdout, want[k])
		}
		if r := quiet(t, "tables", "--db", s.db, "--lock-timeout", "0", "--format", "json"); r.code != 0 || !strings.Contains(r.stdout, `"name": "balances"`) {
			t.Fatalf("%s: tables: exit %d\n%s", what, r.code, r.stdout)
		}
	}
	direct("dead holder")

	// A live pid (this test's) in the record, the dead socket in it: the
	// socket does not answer, so the file decides.
	h.PID = os.Getpid()
	b, _ := json.Marshal(h)
	if err := os.WriteFile(store.HolderPath(s.db), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := store.ReadHolder(s.db); got == nil || got.Socket != s.sock {
		t.Fatalf("ReadHolder of a live pid's record: %+v", got)
	}
	direct("live pid, dead socket")

	r := quiet(t, "get", "--db", s.db, "--table", "balances", "--socket", s.sock, "k00001")
	if r.code != exitError || !strings.Contains(r.stderr, "no daemon answers at "+s.sock) || r.stdout != "" {
		t.Fatalf("--socket naming a dead socket: exit %d, want 1 saying no daemon answers there\n%s", r.code, r.stderr)
	}
}

// TestRoutedCLINotReady: while the daemon's first build of a table is held
// by an open transaction, the API answers 503 for it; the routed commands
// exit 6 as the file (which has no such table) does, and tables lists
// nothing, byte for byte as on the file after SIGTERM (exit 0 mid-build).
func TestRoutedCLINotReady(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 1)
	produce(t, topic, genRecords(rng, []int32{0}, 20))
	tx, err := broker.BeginTxn(context.Background(), topic, runName(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Produce(context.Background(), genRecords(rng, []int32{0}, 3)); err != nil {
		t.Fatal(err)
	}
	defer tx.End(context.Background(), false)
	s := newDaemonSetup(t, map[string]string{"held": topic})
	p := startProc(t, "--log-format", "json", "serve", "--config", s.cfg)
	cl := unixClient(t, s.sock)
	// The first build is running (the fault: it waits for the open
	// transaction) and the table answers 503.
	awaitStatus(t, cl, p, "/v1/tables/held/keys/p0-k00", http.StatusServiceUnavailable)
	if code, body, _ := httpGet(t, cl, "/v1/tables/held"); code != http.StatusOK || !strings.Contains(body, `"state":"building"`) {
		t.Fatalf("GET /v1/tables/held: %d %s, want state building", code, body)
	}
	cases := []struct {
		code int
		args []string
	}{
		{exitNotFound, []string{"get", "--table", "held", "--db", s.db, "--lock-timeout", "0", "p0-k00"}},
		{exitNotFound, []string{"scan", "--table", "held", "--db", s.db, "--lock-timeout", "0"}},
		{exitNotFound, []string{"export", "--table", "held", "--db", s.db, "--lock-timeout", "0"}},
		{0, []string{"tables", "--db", s.db, "--lock-timeout", "0"}},
		{0, []string{"tables", "--db", s.db, "--lock-timeout", "0", "--format", "json"}},
	}
	routed := make([]result, len(cases))
	for i, c := range cases {
		routed[i] = quiet(t, c.args...)
		if c.code != 0 && !strings.Contains(routed[i].stderr, "has not been published yet") {
			t.Errorf("%q routed: stderr does not say the table is not published yet:\n%s", c.args, routed[i].stderr)
		}
	}
	stopDaemon(t, p)
	for i, c := range cases {
		direct := quiet(t, c.args...)
		if direct.code != c.code || routed[i].code != c.code || routed[i].stdout != direct.stdout {
			t.Errorf("%q: routed exit %d stdout %q, direct exit %d stdout %q, want exit %d", c.args, routed[i].code, routed[i].stdout, direct.code, direct.stdout, c.code)
		}
	}
}

// TestRoutedScanAcrossPublish: routed scans while the daemon rebuilds the
// table again and again (a client asks, with wait, in a loop) until the
// daemon has answered a page with 409 (its metrics count it: a publish
// landed between two pages of a scan); every scan still exits 0 with the
// oracle's rows, because the CLI starts a scan over when its generation is
// replaced.
func TestRoutedScanAcrossPublish(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 2)
	want, _, _ := oracle(produce(t, topic, routeRecords(rng, []int32{0, 1}, 4000, 3000)), nil)
	s := newDaemonSetup(t, map[string]string{"balances": topic})
	p := s.start(t)

	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		cl := unixClient(t, s.sock)
		defer cl.CloseIdleConnections()
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			resp, err := cl.Post("http://kmaterialize/v1/tables/balances/rebuild?wait=1", "", nil)
			if err != nil {
				done <- err
				return
			}
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				// Publishes a little apart, as a schedule makes them: a
				// scan that a publish interrupted starts over (up to
				// scanAttempts times) and must finish before the next.
				// Back to back (this table rebuilds in about 30 ms),
				// three publishes could land inside one scan's attempts.
				select {
				case <-stop:
				case <-time.After(150 * time.Millisecond):
				}
			case http.StatusConflict:
				// A run is going (the daemon's start-up build, at first):
				// ask again once it may have ended.
				time.Sleep(20 * time.Millisecond)
			default:
				done <- fmt.Errorf("POST rebuild: %d", resp.StatusCode)
				return
			}
		}
	}()
	scans := 0
	deadline := time.Now().Add(90 * time.Second)
	for rowsAnswers(t, s.sock, "409") == 0 {
		select {
		case err := <-done:
			t.Fatalf("the rebuilds stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no publish landed between two pages in %d scans", scans)
		}
		var out, errb strings.Builder
		code := run(context.Background(), []string{"kmaterialize", "scan", "--db", s.db, "--table", "balances", "--base64", "--format", "jsonl", "--lock-timeout", "0"}, &out, &errb)
		scans++
		if code != 0 {
			t.Fatalf("scan %d during rebuilds: exit %d\n%s", scans, code, errb.String())
		}
		if diff := cmp.Diff(want, decodeRows(t, out.String())); diff != "" {
			t.Fatalf("scan %d during rebuilds vs the oracle (-want +got):\n%s", scans, diff)
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d scans until a page got 409; %d pages answered 409 in all", scans, rowsAnswers(t, s.sock, "409"))
	stopDaemon(t, p)
}
