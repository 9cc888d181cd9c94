package main

// Process tests of the daemon's shutdown (serve/shutdown.go): SIGTERM
// lets a run past its replay publish and exits 0; SIGTERM during a replay
// cancels the run (nothing published) and exits within shutdown_timeout.

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/internal/failpoint"
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

// TestDaemonSIGTERMDuringReplay: SIGTERM while a requested rebuild is
// parked in the middle of its read cancels it at once (its log line says
// cancelled at shutdown, exit code 4): the daemon exits 0 within
// shutdown_timeout, the file holds only the old generation, and the
// restart serves the old table.
func TestDaemonSIGTERMDuringReplay(t *testing.T) {
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
