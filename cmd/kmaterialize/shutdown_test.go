package main

// Process tests of the daemon's shutdown (serve/shutdown.go): SIGTERM
// lets a run past its replay (in its merge or its publish) publish and
// exits 0; SIGTERM during a replay cancels the run (nothing published) and
// exits within shutdown_timeout.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/internal/failpoint"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// TestDaemonSIGTERMDuringPublish: a requested rebuild is held in its
// publish transaction (failpoint publish-commit-before, the second hit:
// the first is the build at start), so it is past its replay: GET shows
// it publishing and a cancel is 409 run_publishing. SIGTERM then tells
// systemd STOPPING=1; the run, released, publishes; the daemon exits 0;
// a restart serves the new generation, every key as the oracle says.
func TestDaemonSIGTERMDuringPublish(t *testing.T) {
	bin := failpointBinary(t)
	rng := newRand(t)
	topic := newTopic(t, 1)
	a := produce(t, topic, genRecords(rng, []int32{0}, 40))
	r := newDaemonRig(t, topic, "shutdown_timeout: 60s\n")

	notifyPath := filepath.Join(shortTempDir(t), "notify.sock")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	fpFile := filepath.Join(t.TempDir(), "failpoint")
	c := startChild(t, []string{failpoint.EnvPoint + "=" + failpoint.PublishCommitBefore + "@2=wait", failpoint.EnvFile + "=" + fpFile,
		"NOTIFY_SOCKET=" + notifyPath}, bin, "--log-format", "json", "serve", "--config", r.cfgPath)
	if got := readNotify(t, notify); got != "READY=1" {
		t.Fatalf("notify: %q, want READY=1", got)
	}
	awaitChildStatus(t, r.cl, c, "/readyz", http.StatusOK)
	gen := *r.status(t).Generation

	all := append(append([]rec(nil), a...), produce(t, topic, genRecords(rng, []int32{0}, 50))...)
	if code, body := r.rebuild(t, false); code != http.StatusAccepted {
		t.Fatalf("POST rebuild: %d %s", code, body)
	}
	awaitFailpoint(t, c, fpFile, "failpoint "+failpoint.PublishCommitBefore+" waiting")
	var st struct {
		State string `json:"state"`
		Run   *struct {
			ID    uint64 `json:"id"`
			Phase string `json:"phase"`
		} `json:"run"`
	}
	if code, body, _ := httpGet(t, r.cl, "/v1/tables/"+r.table); code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil ||
		st.State != "rebuilding" || st.Run == nil || st.Run.Phase != "publishing" {
		t.Fatalf("during the publish: %d %s, want rebuilding, phase publishing", code, body)
	}
	resp, err := r.cl.Post("http://kmaterialize/v1/tables/"+r.table+"/cancel", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(body), `"run_publishing"`) {
		t.Fatalf("cancel during the publish: %d %s, want 409 run_publishing", resp.StatusCode, body)
	}

	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := readNotify(t, notify); got != "STOPPING=1" {
		t.Fatalf("notify after SIGTERM: %q, want STOPPING=1", got)
	}
	// The shutdown has seen the run publishing (the condition), then the
	// run is released.
	awaitChildLog(t, c, func(l map[string]any) bool {
		runs, _ := l["publishing"].([]any)
		return strings.HasPrefix(toString(l["message"]), "shutting down") && len(runs) == 1 && runs[0] == float64(st.Run.ID)
	})
	if err := os.Remove(fpFile); err != nil {
		t.Fatal(err)
	}
	if ws := c.wait(t, 60*time.Second); ws.ExitStatus() != 0 {
		t.Fatalf("exit %d after SIGTERM during the publish, want 0; stderr:\n%s", ws.ExitStatus(), c.stderr.String())
	}
	published := false
	for _, l := range logLines(c.stderr.String()) {
		published = published || (l["message"] == "rebuild published" && l["trigger"] == "request")
	}
	if !published {
		t.Fatalf("no \"rebuild published\" line for the requested run; stderr:\n%s", c.stderr.String())
	}

	p2 := r.start(t)
	wantAll, readAll, _ := oracle(all, nil)
	tb := r.status(t)
	if *tb.Generation <= gen {
		t.Fatalf("after the restart: generation %d, want the one published at shutdown (above %d)", *tb.Generation, gen)
	}
	r.checkServed(t, wantAll, *tb.Generation, readAll)
	if n := len(rebuildLogs(p2, "rebuild started")); n != 0 {
		t.Fatalf("the restart started %d rebuilds, want 0", n)
	}
}

// mergeRecords are n records of about 2 KiB over keys "mg-NNNNN" drawn
// from 2n (a key repeats now and then, in one partition: k%2), every
// twentieth a tombstone of an earlier key: about 0.8n distinct keys,
// 3 MiB of rows for n = 2000. At memory: 1MiB a rebuild holds 256 KiB of
// rows before spilling (a dozen runs), and its merge commits blocks of 1,
// then 2 MiB: at least two.
func mergeRecords(rng *rand.Rand, n int) []localkafka.Record {
	out := make([]localkafka.Record, 0, n)
	var keys []int
	for i := range n {
		if i%20 == 19 && len(keys) > 0 {
			k := keys[rng.Intn(len(keys))]
			out = append(out, localkafka.Record{Partition: int32(k % 2), Key: []byte(fmt.Sprintf("mg-%05d", k))})
			continue
		}
		k := rng.Intn(2 * n)
		keys = append(keys, k)
		v := append([]byte(fmt.Sprintf("%d-", i)), bytes.Repeat([]byte{byte('a' + rng.Intn(26))}, 2000)...)
		out = append(out, localkafka.Record{Partition: int32(k % 2), Key: []byte(fmt.Sprintf("mg-%05d", k)), Value: v})
	}
	return out
}

// TestDaemonSIGTERMDuringMerge: a table with memory: 1MiB; a requested
// rebuild of 2000 records of 2 KiB spills sorted runs and is held in its
// merge, at the commit of the merge's second block (failpoint
// fold-commit-before@3: the latest fold commits only in merges, and the
// build at start, of a few small records, commits one block). Before the
// signal the test checks the condition: the failpoint file says waiting,
// GET shows the run in phase publishing (past its replay) and cancel is
// 409 run_publishing, and the run files are on disk (a merge removes them
// when it ends). SIGTERM then tells systemd STOPPING=1 and the shutdown
// line names the run as publishing; released, the merge ends and the run
// publishes (its "published" line reports as many runs as were on disk),
// the daemon exits 0 and leaves no run file; a restart serves the new
// generation, every key as the oracle says.
func TestDaemonSIGTERMDuringMerge(t *testing.T) {
	bin := failpointBinary(t)
	rng := newRand(t)
	topic := newTopic(t, 2)
	a := produce(t, topic, genRecords(rng, []int32{0, 1}, 40))
	r := newDaemonRig(t, topic, "    memory: "+spillMemory+"\nshutdown_timeout: 60s\n")

	notifyPath := filepath.Join(shortTempDir(t), "notify.sock")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	fpFile := filepath.Join(t.TempDir(), "failpoint")
	c := startChild(t, []string{failpoint.EnvPoint + "=" + failpoint.FoldCommitBefore + "@3=wait", failpoint.EnvFile + "=" + fpFile,
		"NOTIFY_SOCKET=" + notifyPath}, bin, "--log-format", "json", "serve", "--config", r.cfgPath)
	if got := readNotify(t, notify); got != "READY=1" {
		t.Fatalf("notify: %q, want READY=1", got)
	}
	awaitChildStatus(t, r.cl, c, "/readyz", http.StatusOK)
	gen := *r.status(t).Generation
	// The build at start did not spill: its one merge block was the
	// failpoint's first hit.
	for _, l := range logLines(c.stderr.String()) {
		if l["message"] == "published" && l["runs"] != float64(0) {
			t.Fatalf("the build at start spilled (%v): the failpoint's hits would not land in the requested merge", l)
		}
	}

	all := append(append([]rec(nil), a...), produce(t, topic, mergeRecords(rng, 2000))...)
	if code, body := r.rebuild(t, false); code != http.StatusAccepted {
		t.Fatalf("POST rebuild: %d %s", code, body)
	}
	awaitFailpoint(t, c, fpFile, "failpoint "+failpoint.FoldCommitBefore+" waiting")
	var st struct {
		State string `json:"state"`
		Run   *struct {
			ID    uint64 `json:"id"`
			Phase string `json:"phase"`
		} `json:"run"`
	}
	if code, body, _ := httpGet(t, r.cl, "/v1/tables/"+r.table); code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil ||
		st.State != "rebuilding" || st.Run == nil || st.Run.Phase != "publishing" {
		t.Fatalf("during the merge: %d %s, want rebuilding, phase publishing", code, body)
	}
	resp, err := r.cl.Post("http://kmaterialize/v1/tables/"+r.table+"/cancel", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(body), `"run_publishing"`) {
		t.Fatalf("cancel during the merge: %d %s, want 409 run_publishing", resp.StatusCode, body)
	}
	// Past its replay and its run files still there: the run is in its
	// merge (the runs are removed when the merge ends, whatever happens).
	runs := runFiles(t, r.db)
	if len(runs) < 2 {
		t.Fatalf("run files during the merge: %v, want several (memory: %s)", runs, spillMemory)
	}

	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := readNotify(t, notify); got != "STOPPING=1" {
		t.Fatalf("notify after SIGTERM: %q, want STOPPING=1", got)
	}
	awaitChildLog(t, c, func(l map[string]any) bool {
		pub, _ := l["publishing"].([]any)
		return strings.HasPrefix(toString(l["message"]), "shutting down") && len(pub) == 1 && pub[0] == float64(st.Run.ID)
	})
	if err := os.Remove(fpFile); err != nil {
		t.Fatal(err)
	}
	if ws := c.wait(t, 60*time.Second); ws.ExitStatus() != 0 {
		t.Fatalf("exit %d after SIGTERM during the merge, want 0; stderr:\n%s", ws.ExitStatus(), c.stderr.String())
	}
	published, spilled := false, -1
	for _, l := range logLines(c.stderr.String()) {
		if l["run"] != float64(st.Run.ID) {
			continue
		}
		published = published || (l["message"] == "rebuild published" && l["trigger"] == "request")
		if n, ok := l["runs"].(float64); ok && l["message"] == "published" {
			spilled = int(n)
		}
	}
	if !published {
		t.Fatalf("no \"rebuild published\" line for the requested run; stderr:\n%s", c.stderr.String())
	}
	if spilled != len(runs) {
		t.Fatalf("the requested run's published line reports %d runs, want the %d on disk during its merge; stderr:\n%s", spilled, len(runs), c.stderr.String())
	}
	if left := runFiles(t, r.db); len(left) != 0 {
		t.Fatalf("run files after the published merge: %v", left)
	}

	p2 := r.start(t)
	wantAll, readAll, _ := oracle(all, nil)
	tb := r.status(t)
	if *tb.Generation <= gen {
		t.Fatalf("after the restart: generation %d, want the one published at shutdown (above %d)", *tb.Generation, gen)
	}
	r.checkServed(t, wantAll, *tb.Generation, readAll)
	if n := len(rebuildLogs(p2, "rebuild started")); n != 0 {
		t.Fatalf("the restart started %d rebuilds, want 0", n)
	}
}

// TestDaemonSIGTERMDuringReplay: SIGTERM while a requested rebuild is
// parked in the middle of its read cancels it at once (its log line says
// cancelled at shutdown, exit code 4): the daemon exits 0 within
// shutdown_timeout, the file holds only the old generation, and the
// restart serves the old table.
func TestDaemonSIGTERMDuringReplay(t *testing.T) {
	localkafka.KfakeOnly(t)
	rng := newRand(t)
	topic := newTopic(t, 1)
	a := produce(t, topic, genRecords(rng, []int32{0}, 30))
	r := newDaemonRig(t, topic, "shutdown_timeout: 20s\n")
	p := r.start(t)
	wantA, readA, _ := oracle(a, nil)
	gen := *r.status(t).Generation
	produceEach(t, topic, genRecords(rng, []int32{0}, 40))
	r.parkMidRebuild(t, p, int64(len(a))+5, gen)

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// shutdown_timeout bounds the wait: the run was cancelled, not waited for.
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM during the replay, want 0", code)
	}
	cancelled := false
	for _, l := range rebuildLogs(p, "rebuild failed; the previous generation stays served") {
		cancelled = cancelled || (l["trigger"] == "request" && l["exit_code"] == float64(exitIncomplete) &&
			strings.HasPrefix(toString(l["error"]), "cancelled at shutdown"))
	}
	if !cancelled {
		t.Fatalf("no log line of the requested run cancelled at shutdown; stderr:\n%s", p.stderrText())
	}
	if ids := generationIDsOf(t, r.db); len(ids) != 1 || ids[0] != gen {
		t.Fatalf("generation buckets after SIGTERM: %v, want only the published %d", ids, gen)
	}
	r.start(t)
	r.checkServed(t, wantA, gen, readA)
}

func toString(v any) string { s, _ := v.(string); return s }

// shortTempDir is a directory for unix sockets (t.TempDir paths can pass
// the 108-byte limit).
func shortTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "kmsd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// readNotify reads one sd_notify datagram.
func readNotify(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(60 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("notify socket: %v", err)
	}
	return string(buf[:n])
}

// awaitChildStatus polls path until it answers want; the child must not
// exit first.
func awaitChildStatus(t *testing.T, cl *http.Client, c *child, path string, want int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if resp, err := cl.Get("http://kmaterialize" + path); err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return
			}
		}
		select {
		case <-c.done:
			t.Fatalf("the daemon exited (%v) before %s answered %d; stderr:\n%s", c.err, path, want, c.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer %d; stderr:\n%s", path, want, c.stderr.String())
		}
	}
}

// awaitChildLog polls the child's JSON log lines until one matches.
func awaitChildLog(t *testing.T, c *child, match func(map[string]any) bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		for _, l := range logLines(c.stderr.String()) {
			if match(l) {
				return
			}
		}
		select {
		case <-c.done:
			t.Fatalf("the daemon exited (%v) before the log line; stderr:\n%s", c.err, c.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no such log line; stderr:\n%s", c.stderr.String())
		}
	}
}
