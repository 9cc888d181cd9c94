package main

// The daemon's JSON log lines as a log pipeline reads them (issue 18,
// point 5): no key twice in one line, and durations with their unit in the
// key (took_ms, as the API says it).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// duplicateKeys returns the keys that appear more than once in one object
// of line, at any depth; encoding/json would keep the last silently.
func duplicateKeys(line string) ([]string, error) {
	dec := json.NewDecoder(strings.NewReader(line))
	var dups []string
	var object func() error
	var value func() error
	value = func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			return object()
		case json.Delim('['):
			for dec.More() {
				if err := value(); err != nil {
					return err
				}
			}
			_, err := dec.Token() // ]
			return err
		}
		return nil
	}
	object = func() error {
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			k := tok.(string)
			if seen[k] {
				dups = append(dups, k)
			}
			seen[k] = true
			if err := value(); err != nil {
				return err
			}
		}
		_, err := dec.Token() // }
		return err
	}
	return dups, value()
}

func TestDuplicateKeys(t *testing.T) {
	for line, want := range map[string]string{
		`{"a":1,"b":2}`:                           "",
		`{"table":"x","table":"x"}`:               "table",
		`{"a":{"b":1,"b":2},"c":[{"d":1,"d":1}]}`: "b d",
	} {
		got, err := duplicateKeys(line)
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("duplicateKeys(%s) = %q, %v; want %q", line, got, err, want)
		}
	}
}

// TestDaemonLogKeys runs a daemon through a first build, a requested
// rebuild, a requested update and following, stops it, and checks every
// JSON line on its stderr: no key twice in a line (the table's name was
// written by both the daemon and the use case it runs); the lines of the
// use cases name their table once; durations are took_ms, a whole number,
// never "took".
func TestDaemonLogKeys(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 2)
	produce(t, topic, genRecords(rng, []int32{0, 1}, 60))
	dir := t.TempDir()
	cfg := filepath.Join(dir, "kmaterialize.yaml")
	doc := fmt.Sprintf(`db: tables.db
kafka:
  brokers: %s
tables:
  - name: balances
    topic: %s
    stall_timeout: 60s
  - name: live
    topic: %s
    stall_timeout: 60s
    follow: true
    follow_interval: 50ms
`, broker.Addr, topic, topic)
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := unixClient(t, filepath.Join(dir, "tables.db.sock"))
	p := startProc(t, "--log-format", "json", "--log-level", "debug", "serve", "--config", cfg)
	awaitStatus(t, cl, p, "/readyz", http.StatusOK)

	post := func(path string) {
		t.Helper()
		long := &http.Client{Transport: cl.Transport}
		resp, err := long.Post("http://kmaterialize"+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"exit_code":0`)) {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, body)
		}
	}
	post("/v1/tables/balances/rebuild?wait=1")
	produce(t, topic, []localkafka.Record{{Partition: 1, Key: []byte("followed"), Value: []byte("yes")}})
	post("/v1/tables/balances/update") // waits for its run
	// Following applies the new record.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, body, _ := httpGet(t, cl, "/v1/tables/live/keys/followed")
		if code == http.StatusOK && strings.Contains(body, "yes") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the followed table never got the new record; stderr:\n%s", p.stderrText())
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0", code)
	}

	lines := logLines(p.stderrText())
	if len(lines) == 0 {
		t.Fatal("no JSON log lines")
	}
	for _, raw := range strings.Split(p.stderrText(), "\n") {
		if !strings.HasPrefix(raw, "{") {
			continue
		}
		dups, err := duplicateKeys(raw)
		if err != nil {
			t.Fatalf("log line %s: %v", raw, err)
		}
		if len(dups) > 0 {
			t.Errorf("log line repeats %v: %s", dups, raw)
		}
	}
	// Each of these lines, written by the daemon or by the use case it
	// ran, names its table (once: checked above) and says how long it
	// took in milliseconds.
	seen := map[string]int{}
	for _, l := range lines {
		msg, _ := l["message"].(string)
		if _, ok := l["took"]; ok {
			t.Errorf("line %q has took, want took_ms: %v", msg, l)
		}
		switch msg {
		case "rebuild published", "update published", "published", "updated":
			seen[msg]++
			if tb, _ := l["table"].(string); tb != "balances" && tb != "live" {
				t.Errorf("line %q names table %v: %v", msg, l["table"], l)
			}
			ms, ok := l["took_ms"].(float64)
			if !ok || ms < 0 || ms != float64(int64(ms)) {
				t.Errorf("line %q: took_ms %v, want a whole number of milliseconds: %v", msg, l["took_ms"], l)
			}
		case "following":
			seen[msg]++
			if l["table"] != "live" {
				t.Errorf("line %q names table %v, want live: %v", msg, l["table"], l)
			}
		}
	}
	// Both daemon lines and use-case lines were there to check: the first
	// builds and the requested rebuild (3 published), the update, the
	// follower.
	for msg, n := range map[string]int{"rebuild published": 3, "published": 3, "update published": 1, "updated": 1, "following": 1} {
		if seen[msg] < n {
			t.Errorf("%d %q lines, want at least %d; stderr:\n%s", seen[msg], msg, n, p.stderrText())
		}
	}
}
