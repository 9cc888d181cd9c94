package main

import (
	"bufio"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// TestWatch: watch needs a daemon and one of --from and --from-now (exit
// 2). Through the daemon, a watch from a list's cursor prints a requested
// rebuild's publish as change lines and a commit line: the list plus the
// changes equal the oracle fold of every record produced; SIGINT ends it
// with 0. A cursor of another epoch exits 4 (410 cursor_gone), an unknown
// table 6.
func TestWatch(t *testing.T) {
	topic := newTopic(t, 1)
	oracle := map[string]string{}
	fold := func(recs []localkafka.Record) {
		for _, r := range produce(t, topic, recs) {
			if r.V == nil {
				delete(oracle, string(r.K))
			} else {
				oracle[string(r.K)] = string(r.V)
			}
		}
	}
	fold([]localkafka.Record{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")}, {Key: []byte("c"), Value: []byte("3")}})
	r := newDaemonRig(t, topic, "")
	mustCLI(t, 0, rebuildArgs(topic, r.db, "--table", r.table)...)
	watchArgs := []string{"watch", "--db", r.db, "--table", r.table}
	if res := mustCLI(t, 2, append(watchArgs, "--from-now")...); !strings.Contains(res.stderr, "needs a daemon") {
		t.Fatalf("without a daemon: %s", res.stderr)
	}
	r.start(t)
	mustCLI(t, 2, watchArgs...)
	mustCLI(t, 2, append(watchArgs, "--from-now", "--from", "AQ")...)
	mustCLI(t, 2, append(watchArgs, "--from", "not-a-cursor!")...)
	mustCLI(t, 2, append(watchArgs, "--from-now", "--format", "json")...)

	resp, err := r.cl.Get("http://kmaterialize/v1/tables/" + r.table + "/rows")
	if err != nil {
		t.Fatal(err)
	}
	copyOf := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var row struct{ Key, Value string }
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatal(err)
		}
		copyOf[row.Key] = row.Value
	}
	resp.Body.Close()
	cursor := resp.Header.Get(api.HeaderCursor)
	if resp.StatusCode != http.StatusOK || cursor == "" || !maps.Equal(copyOf, oracle) {
		t.Fatalf("GET rows: %d cursor %q rows %v, oracle %v", resp.StatusCode, cursor, copyOf, oracle)
	}

	cmd := exec.Command(binPath, append(watchArgs, "--from", cursor)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()

	fold([]localkafka.Record{{Key: []byte("a"), Value: []byte("10")}, {Key: []byte("b")}, {Key: []byte("d"), Value: []byte("4")}})
	if code, body := r.rebuild(t, true); code != http.StatusOK {
		t.Fatalf("rebuild: %d %s", code, body)
	}
	for done := false; !done; {
		var line string
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("watch ended: %s", stderr.String())
			}
			line = l
		case <-time.After(60 * time.Second):
			t.Fatal("no line from watch in 60s")
		}
		var l api.FeedLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		switch {
		case l.Key != nil && l.Value == nil:
			delete(copyOf, *l.Key)
		case l.Key != nil:
			copyOf[*l.Key] = *l.Value
		case l.Commit != nil:
			done = l.Commit.Generation == 2
		}
	}
	if !maps.Equal(copyOf, oracle) {
		t.Fatalf("after the rebuild's commit the copy is %v, the oracle %v", copyOf, oracle)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("watch after SIGINT: %v; stderr %s", err, stderr.String())
	}

	c, err := api.ParseCursor(cursor)
	if err != nil {
		t.Fatal(err)
	}
	c.Epoch += 1000
	if res := mustCLI(t, 4, append(watchArgs, "--from", c.String())...); !strings.Contains(res.stderr, "cursor") {
		t.Fatalf("a cursor of another epoch: %s", res.stderr)
	}
	mustCLI(t, 6, "watch", "--db", r.db, "--table", "nope", "--from-now")
}
