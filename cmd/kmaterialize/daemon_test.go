package main

// Process tests of `kmaterialize serve` as a daemon that others rely on: a
// SIGTERM or a kill -9 in the middle of a rebuild, a restart over what the
// killed daemon left behind, and a schedule firing in a real process. Every
// table read through the socket is compared with the oracle fold of the
// records the test produced.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/store"
)

// daemonRig is one daemon's config file, database and socket in a temp
// dir, serving one table of one topic.
type daemonRig struct {
	dir, cfgPath, db, sock string
	table, topic           string
	cl                     *http.Client
}

// newDaemonRig writes a config with one table (name "balances") of topic;
// extra is appended to the table's entry (e.g. a schedule). The Kafka
// properties keep each fetch to about one batch (localkafka.SmallFetches)
// so that a parked fetch provably stops the read in the middle.
func newDaemonRig(t *testing.T, topic, extra string) *daemonRig {
	t.Helper()
	dir := t.TempDir()
	r := &daemonRig{dir: dir, cfgPath: filepath.Join(dir, "kmaterialize.yaml"), db: filepath.Join(dir, "tables.db"),
		sock: filepath.Join(dir, "tables.db.sock"), table: "balances", topic: topic}
	var props strings.Builder
	keys := make([]string, 0, len(localkafka.SmallFetches))
	for k := range localkafka.SmallFetches {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&props, "    %s: %q\n", k, localkafka.SmallFetches[k])
	}
	doc := fmt.Sprintf("db: tables.db\nkafka:\n  brokers: %s\n  properties:\n%stables:\n  - name: %s\n    topic: %s\n    stall_timeout: 120s\n%s",
		broker.Addr, props.String(), r.table, topic, extra)
	if err := os.WriteFile(r.cfgPath, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	r.cl = unixClient(t, r.sock)
	return r
}

// start starts the daemon and waits until every configured table is
// published (/readyz 200).
func (r *daemonRig) start(t *testing.T) *proc {
	t.Helper()
	p := startProc(t, "--log-format", "json", "serve", "--config", r.cfgPath)
	awaitStatus(t, r.cl, p, "/readyz", http.StatusOK)
	return p
}

// apiTable is the part of GET /v1/tables/{table} these tests read.
type apiTable struct {
	State      string  `json:"state"`
	Generation *uint64 `json:"generation"`
	Keys       *int64  `json:"keys"`
	Records    *int64  `json:"records"`
	NextRun    *string `json:"next_run"`
	LastError  *struct {
		Error    string `json:"error"`
		ExitCode int    `json:"exit_code"`
	} `json:"last_error"`
}

func (r *daemonRig) status(t *testing.T) apiTable {
	t.Helper()
	code, body, _ := httpGet(t, r.cl, "/v1/tables/"+r.table)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/tables/%s: %d %s", r.table, code, body)
	}
	var tb apiTable
	if err := json.Unmarshal([]byte(body), &tb); err != nil {
		t.Fatalf("GET /v1/tables/%s: %v\n%s", r.table, err, body)
	}
	if tb.Generation == nil || tb.Records == nil || tb.Keys == nil {
		t.Fatalf("GET /v1/tables/%s: no published generation: %s", r.table, body)
	}
	return tb
}

// rebuild POSTs a rebuild request and returns the status and body.
func (r *daemonRig) rebuild(t *testing.T, wait bool) (int, string) {
	t.Helper()
	path := "http://kmaterialize/v1/tables/" + r.table + "/rebuild"
	if wait {
		path += "?wait=1"
	}
	cl := r.cl
	if wait {
		// A rebuild takes as long as it takes: no client timeout.
		cl = &http.Client{Transport: r.cl.Transport}
	}
	resp, err := cl.Post(path, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// checkServed compares every key of the oracle with what the socket
// answers, checks that no read was answered by another generation than
// gen, and that GET /v1/tables says gen with the oracle's key count.
func (r *daemonRig) checkServed(t *testing.T, want map[string]string, gen uint64, records int64) {
	t.Helper()
	checkKeys(t, r.cl, r.table, want)
	for k := range want {
		_, _, g := httpGet(t, r.cl, "/v1/tables/"+r.table+"/keys/"+url.PathEscape(k))
		if g != fmt.Sprint(gen) {
			t.Fatalf("key %q answered by generation %q, want %d", k, g, gen)
		}
	}
	tb := r.status(t)
	if *tb.Generation != gen || *tb.Keys != int64(len(want)) || *tb.Records != records {
		t.Fatalf("table %s: generation %d, %d keys, %d records; want generation %d, %d keys (oracle), %d records",
			r.table, *tb.Generation, *tb.Keys, *tb.Records, gen, len(want), records)
	}
}

// produceEach writes recs one produce request (one batch) each, so that
// small fetches need one fetch per record and a parked fetch lands in the
// middle of them.
func produceEach(t *testing.T, topic string, recs []localkafka.Record) []rec {
	t.Helper()
	var out []rec
	for _, r := range recs {
		out = append(out, produce(t, topic, []localkafka.Record{r})...)
	}
	return out
}

// parkMidRebuild parks the daemon's next fetch of topic past offset from,
// requests a rebuild (202) and waits until the fetch is parked: the rebuild
// is then provably in the middle of its read. The table must still be
// served from gen, in state rebuilding.
func (r *daemonRig) parkMidRebuild(t *testing.T, p *proc, from int64, gen uint64) *localkafka.ParkedFetch {
	t.Helper()
	park := broker.ParkFetch(r.topic, from)
	t.Cleanup(park.Release)
	code, body := r.rebuild(t, false)
	if code != http.StatusAccepted {
		t.Fatalf("POST rebuild: %d %s, want 202", code, body)
	}
	select {
	case <-park.Seen:
	case <-p.done:
		t.Fatalf("the daemon exited before the rebuild's fetch was parked; stderr:\n%s", p.stderrText())
	case <-time.After(60 * time.Second):
		t.Fatalf("no fetch of %s past offset %d was parked; stderr:\n%s", r.topic, from, p.stderrText())
	}
	tb := r.status(t)
	if tb.State != "rebuilding" || *tb.Generation != gen {
		t.Fatalf("while the rebuild is parked: state %q generation %d, want rebuilding, generation %d", tb.State, *tb.Generation, gen)
	}
	return park
}

// rebuildLogs returns the daemon's JSON log lines with message msg.
func rebuildLogs(p *proc, msg string) []map[string]any {
	var out []map[string]any
	for _, l := range logLines(p.stderrText()) {
		if l["message"] == msg {
			out = append(out, l)
		}
	}
	return out
}

// generationIDsOf lists the generation buckets in the file, sorted.
func generationIDsOf(t *testing.T, db string) []uint64 {
	t.Helper()
	var ids []uint64
	for id := range generations(t, db) {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// requestRebuild runs a requested rebuild to its end (?wait=1) and checks
// that it published a generation above old; it returns that generation.
func (r *daemonRig) requestRebuild(t *testing.T, old uint64) uint64 {
	t.Helper()
	code, body := r.rebuild(t, true)
	var res struct {
		ExitCode   int     `json:"exit_code"`
		Error      *string `json:"error"`
		Generation *uint64 `json:"generation"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &res) != nil || res.ExitCode != 0 || res.Error != nil ||
		res.Generation == nil || *res.Generation <= old {
		t.Fatalf("POST rebuild?wait=1: %d %s; want 200, exit_code 0, a generation above %d", code, body, old)
	}
	return *res.Generation
}

// TestDaemonSIGTERMMidRebuild: SIGTERM while a requested rebuild is parked
// in the middle of its read exits 0, publishes nothing (the file holds the
// old generation only), and the next start serves the old table; a
// requested rebuild then publishes the table of every record.
func TestDaemonSIGTERMMidRebuild(t *testing.T) {
	localkafka.KfakeOnly(t)
	rng := newRand(t)
	topic := newTopic(t, 1)
	a := produce(t, topic, genRecords(rng, []int32{0}, 30))
	r := newDaemonRig(t, topic, "")
	p := r.start(t)
	wantA, readA, _ := oracle(a, nil)
	gen := *r.status(t).Generation
	r.checkServed(t, wantA, gen, readA)

	all := append(append([]rec(nil), a...), produceEach(t, topic, genRecords(rng, []int32{0}, 40))...)
	r.parkMidRebuild(t, p, int64(len(a))+5, gen)
	checkKeys(t, r.cl, r.table, wantA) // reads during the rebuild: the old generation

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM mid-rebuild, want 0", code)
	}
	if n := len(rebuildLogs(p, "rebuild published")); n != 1 {
		t.Fatalf("%d \"rebuild published\" log lines, want 1 (the first build only)", n)
	}
	// The requested run ended as interrupted (exit code 4, as the CLI's
	// rebuild would), not as finished.
	interrupted := false
	for _, l := range rebuildLogs(p, "rebuild failed; the previous generation stays served") {
		if l["trigger"] == "request" && l["exit_code"] == float64(exitIncomplete) {
			interrupted = true
		}
	}
	if !interrupted {
		t.Fatalf("no log line of the requested run failing with exit code %d; stderr:\n%s", exitIncomplete, p.stderrText())
	}
	// Nothing published, nothing left behind: the abandoned rebuild
	// dropped its generation.
	if ids := generationIDsOf(t, r.db); len(ids) != 1 || ids[0] != gen {
		t.Fatalf("generation buckets after SIGTERM: %v, want only the published %d", ids, gen)
	}
	if _, err := os.Stat(r.sock); !os.IsNotExist(err) {
		t.Fatalf("socket left after SIGTERM (%v)", err)
	}

	p2 := r.start(t)
	r.checkServed(t, wantA, gen, readA)
	if n := len(rebuildLogs(p2, "rebuild started")); n != 0 {
		t.Fatalf("the restart started %d rebuilds of a published table, want 0", n)
	}
	wantAll, readAll, _ := oracle(all, nil)
	g2 := r.requestRebuild(t, gen)
	r.checkServed(t, wantAll, g2, readAll)
}

// TestDaemonKill9MidRebuild: kill -9 of the daemon while a requested
// rebuild is parked in the middle of its read leaves the unpublished
// generation, the socket file and the holder record behind; a restart
// replaces the stale socket, serves the old table (the leftover removed)
// and the next run publishes the table of every record.
func TestDaemonKill9MidRebuild(t *testing.T) {
	localkafka.KfakeOnly(t)
	rng := newRand(t)
	topic := newTopic(t, 1)
	a := produce(t, topic, genRecords(rng, []int32{0}, 30))
	r := newDaemonRig(t, topic, "")
	p := r.start(t)
	wantA, readA, _ := oracle(a, nil)
	gen := *r.status(t).Generation
	r.checkServed(t, wantA, gen, readA)

	all := append(append([]rec(nil), a...), produceEach(t, topic, genRecords(rng, []int32{0}, 40))...)
	park := r.parkMidRebuild(t, p, int64(len(a))+5, gen)
	pid := p.cmd.Process.Pid
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != -1 {
		t.Fatalf("killed daemon exit code %d, want -1 (killed by a signal)", code)
	}
	park.Release()

	// What the killed daemon left: its unpublished generation beside the
	// published one, a socket file no one listens on, and a holder record
	// naming a dead pid.
	if ids := generationIDsOf(t, r.db); len(ids) != 2 || ids[0] != gen {
		t.Fatalf("generation buckets after kill -9: %v, want the published %d and the killed rebuild's", ids, gen)
	}
	if fi, err := os.Lstat(r.sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("the killed daemon's socket file is not there (%v, %v)", fi, err)
	}
	if _, err := net.Dial("unix", r.sock); err == nil {
		t.Fatalf("someone listens on the killed daemon's socket")
	}
	hb, err := os.ReadFile(store.HolderPath(r.db))
	if err != nil {
		t.Fatalf("the killed daemon's holder record: %v", err)
	}
	var h store.Holder
	if err := json.Unmarshal(hb, &h); err != nil || h.PID != pid || h.Socket != r.sock {
		t.Fatalf("holder record %s: %+v (%v), want pid %d, socket %s", hb, h, err, pid, r.sock)
	}

	p2 := r.start(t)
	r.checkServed(t, wantA, gen, readA)
	if n := len(rebuildLogs(p2, "rebuild started")); n != 0 {
		t.Fatalf("the restart started %d rebuilds of a published table, want 0 (an interrupted run is not resumed)", n)
	}
	hb, err = os.ReadFile(store.HolderPath(r.db))
	if err != nil || json.Unmarshal(hb, &h) != nil || h.PID != p2.cmd.Process.Pid {
		t.Fatalf("holder record after the restart: %s (%v), want pid %d", hb, err, p2.cmd.Process.Pid)
	}
	wantAll, readAll, _ := oracle(all, nil)
	g2 := r.requestRebuild(t, gen)
	r.checkServed(t, wantAll, g2, readAll)

	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p2.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0", code)
	}
	if ids := generationIDsOf(t, r.db); len(ids) != 1 || ids[0] != g2 {
		t.Fatalf("generation buckets at the end: %v, want only the published %d (the killed rebuild's leftover removed)", ids, g2)
	}
	if _, err := os.Stat(store.HolderPath(r.db)); !os.IsNotExist(err) {
		t.Fatalf("holder record left after a clean stop (%v)", err)
	}
}

// TestDaemonSchedule: a table with `schedule: "@every 2s"` in a real
// process: records produced after the first build reach the served table
// through a scheduled run (the daemon logs it with trigger schedule).
func TestDaemonSchedule(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 2)
	a := produce(t, topic, genRecords(rng, []int32{0, 1}, 100))
	r := newDaemonRig(t, topic, "    schedule: \"@every 2s\"\n")
	p := r.start(t)
	wantA, readA, _ := oracle(a, nil)
	// Scheduled runs may publish later generations of the same records
	// meanwhile: every generation so far is the oracle of a.
	first := r.status(t)
	checkKeys(t, r.cl, r.table, wantA)
	if tb := r.status(t); *tb.Keys != int64(len(wantA)) || *tb.Records != readA {
		t.Fatalf("table after the first build: %d keys, %d records; oracle %d keys, %d records", *tb.Keys, *tb.Records, len(wantA), readA)
	}
	if first.NextRun == nil {
		t.Fatalf("a scheduled table has no next_run")
	}

	all := append(append([]rec(nil), a...), produce(t, topic, genRecords(rng, []int32{0, 1}, 100))...)
	wantAll, readAll, _ := oracle(all, nil)
	var tb apiTable
	waitFor(t, 60*time.Second, "a scheduled run that read the new records", func() bool {
		tb = r.status(t)
		return *tb.Records == readAll
	})
	// Nothing but the schedule starts runs now (no request, the table is
	// published): the generation that first read every record was
	// published by a scheduled run, which the daemon logs (after its
	// commit, so the line may trail the read).
	if *tb.Generation <= *first.Generation {
		t.Fatalf("generation %d after the new records, want above %d", *tb.Generation, *first.Generation)
	}
	waitFor(t, 30*time.Second, fmt.Sprintf("the log line of the scheduled run that published generation %d", *tb.Generation), func() bool {
		for _, l := range rebuildLogs(p, "rebuild published") {
			if l["trigger"] == "schedule" && l["generation"] == float64(*tb.Generation) {
				return true
			}
		}
		return false
	})
	// No more records: every later generation is the oracle of all.
	checkKeys(t, r.cl, r.table, wantAll)
	if tb = r.status(t); *tb.Keys != int64(len(wantAll)) || *tb.Records != readAll {
		t.Fatalf("table after the scheduled run: %d keys, %d records; oracle %d keys, %d records", *tb.Keys, *tb.Records, len(wantAll), readAll)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0", code)
	}
}
