package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/internal/apitest"
)

// unixClient is an HTTP client of the daemon's socket; it fails t on an
// answer that does not match the OpenAPI document (apitest.Transport).
func unixClient(t testing.TB, sock string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: apitest.Transport(t, &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	})}
}

// httpGet returns the status, body and generation header of GET path; a
// connection error is status 0.
func httpGet(t *testing.T, cl *http.Client, path string) (int, string, string) {
	t.Helper()
	resp, err := cl.Get("http://kmaterialize" + path)
	if err != nil {
		return 0, err.Error(), ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header.Get("Kmaterialize-Generation")
}

// awaitStatus polls GET path until it answers want (a "did not hang"
// bound, not a timing assertion).
func awaitStatus(t *testing.T, cl *http.Client, p *proc, path string, want int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body, _ := httpGet(t, cl, path)
		if code == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %s, want %d; stderr:\n%s", path, code, body, want, p.stderrText())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkKeys reads every key of want through the socket, and one key that
// is not in the table.
func checkKeys(t *testing.T, cl *http.Client, table string, want map[string]string) {
	t.Helper()
	for k, v := range want {
		code, body, gen := httpGet(t, cl, "/v1/tables/"+table+"/keys/"+url.PathEscape(k))
		if code != http.StatusOK || body != v || gen == "" {
			t.Fatalf("GET %s/%s: %d %q (generation %q), oracle %q", table, k, code, body, gen, v)
		}
	}
	if code, body, _ := httpGet(t, cl, "/v1/tables/"+table+"/keys/no-such-key"); code != http.StatusNotFound || !strings.Contains(body, "key_not_found") {
		t.Fatalf("GET %s/no-such-key: %d %s", table, code, body)
	}
}

// TestServeProcess runs `serve --config` as a process: it tells systemd
// (NOTIFY_SOCKET) it is ready, builds the configured table, answers its
// keys as the oracle says; SIGHUP with a table added and one removed builds
// the new one and keeps the removed one readable; a SIGHUP with a broken
// file keeps the tables; SIGTERM exits 0.
func TestServeProcess(t *testing.T) {
	dir := t.TempDir()
	topic1, topic2 := newTopic(t, 2), newTopic(t, 3)
	want1, _, _ := oracle(produce(t, topic1, genRecords(newRand(t), []int32{0, 1}, 300)), nil)
	want2, _, _ := oracle(produce(t, topic2, genRecords(newRand(t), []int32{0, 1, 2}, 300)), nil)
	cfgPath := filepath.Join(dir, "kmaterialize.yaml")
	writeConfig := func(tables string) {
		doc := fmt.Sprintf("db: tables.db\nkafka:\n  brokers: %s\n  properties:\n    sasl.password: not-used-%d\ntables:\n%s",
			broker.Addr, os.Getpid(), tables)
		if err := os.WriteFile(cfgPath, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	balances := fmt.Sprintf("  - name: balances\n    topic: %s\n    stall_timeout: 20s\n", topic1)
	extra := fmt.Sprintf("  - name: extra\n    topic: %s\n    end: stable\n", topic2)
	writeConfig(balances)

	notifyPath := filepath.Join(dir, "notify.sock")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	t.Setenv("NOTIFY_SOCKET", notifyPath)
	p := startProc(t, "--log-format", "json", "serve", "--config", cfgPath)

	if err := notify.SetReadDeadline(time.Now().Add(60 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, err := notify.Read(buf)
	if err != nil || string(buf[:n]) != "READY=1" {
		t.Fatalf("notify socket: %q, %v; stderr:\n%s", buf[:n], err, p.stderrText())
	}
	sock := filepath.Join(dir, "tables.db.sock")
	cl := unixClient(t, sock)
	awaitStatus(t, cl, p, "/readyz", http.StatusOK)
	checkKeys(t, cl, "balances", want1)

	// Reload: extra added, balances removed.
	writeConfig(extra)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, cl, p, "/v1/tables/extra/keys/"+url.PathEscape(anyKey(t, want2)), http.StatusOK)
	checkKeys(t, cl, "extra", want2)
	checkKeys(t, cl, "balances", want1)
	// Removed: no longer rebuilt on request, still readable (above).
	resp, err := cl.Post("http://kmaterialize/v1/tables/balances/rebuild", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("POST rebuild of a removed table: %d, want 404", resp.StatusCode)
	}
	awaitStatus(t, cl, p, "/readyz", http.StatusOK)

	// A reload of a file that does not load keeps the running tables.
	if err := os.WriteFile(cfgPath, []byte("db: tables.db\ntables:\n  - name: x\n    topic: t\n    fold: sum\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	line := p.waitLine(t, 30*time.Second, "the failed reload's log line", func(l string) bool { return strings.Contains(l, "reload failed") })
	if !strings.Contains(line, cfgPath+":5:") {
		t.Fatalf("reload error does not name the line: %s", line)
	}
	checkKeys(t, cl, "extra", want2)
	if strings.Contains(p.stderrText(), fmt.Sprintf("not-used-%d", os.Getpid())) {
		t.Fatalf("a secret property's value reached the log:\n%s", p.stderrText())
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0", code)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("the socket is left after exit (%v)", err)
	}
}

// TestServeConfigErrors checks exit 2 before anything starts for a config
// the daemon refuses, and exit 7 for a second daemon on the same database.
func TestServeConfigErrors(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "k.yaml")
	write := func(doc string) {
		if err := os.WriteFile(cfgPath, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("db: t.db\nlisten: 0.0.0.0:9466\n")
	if r := mustCLI(t, exitUsage, "serve", "--config", cfgPath); !strings.Contains(r.stderr, "allow_remote") {
		t.Fatalf("stderr: %s", r.stderr)
	}
	// allow_remote without TLS (issue 19 point 6): exit 2 naming the line.
	write("db: t.db\nlisten: 10.0.0.5:9466\nread_token: r0k\nallow_remote: true\n")
	if r := mustCLI(t, exitUsage, "serve", "--config", cfgPath); !strings.Contains(r.stderr, ":4:") || !strings.Contains(r.stderr, "allow_plaintext_tokens") ||
		strings.Contains(r.stderr, "r0k") {
		t.Fatalf("stderr: %s", r.stderr)
	}
	write("db: t.db\nkafka:\n  brokers: " + broker.Addr + "\ntables:\n  - {name: a, topic: t, schedule: \"@hourly\"}\n")
	if r := mustCLI(t, exitUsage, "serve", "--config", cfgPath); !strings.Contains(r.stderr, ":5:") || !strings.Contains(r.stderr, "schedule") {
		t.Fatalf("stderr: %s", r.stderr)
	}
	if r := mustCLI(t, exitUsage, "serve"); !strings.Contains(r.stderr, "--config") {
		t.Fatalf("stderr: %s", r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "t.db")); !os.IsNotExist(err) {
		t.Fatalf("a refused config created the database (%v)", err)
	}

	write("db: t.db\nkafka:\n  brokers: " + broker.Addr + "\n")
	p := startProc(t, "--log-format", "json", "serve", "--config", cfgPath)
	p.waitLine(t, 60*time.Second, "serving", func(l string) bool { return strings.Contains(l, `"serving"`) })
	r := mustCLI(t, exitBusy, "serve", "--config", cfgPath, "--lock-timeout", "0")
	if !strings.Contains(r.stderr, "t.db.sock") {
		t.Fatalf("second daemon: stderr does not name the first one's socket:\n%s", r.stderr)
	}
	// A command that is not routed (check) is busy too; its hint says that
	// waiting cannot help and which socket answers instead.
	r = mustCLI(t, exitBusy, "check", "--db", filepath.Join(dir, "t.db"), "--lock-timeout", "0")
	if !strings.Contains(r.stderr, "a kmaterialize daemon holds the database") || !strings.Contains(r.stderr, "--socket "+filepath.Join(dir, "t.db.sock")) {
		t.Fatalf("check on a daemon's database: the hint does not point to the daemon:\n%s", r.stderr)
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGINT, want 0", code)
	}
}

func anyKey(t *testing.T, m map[string]string) string {
	t.Helper()
	for k := range m {
		return k
	}
	t.Fatal("empty oracle table")
	return ""
}
