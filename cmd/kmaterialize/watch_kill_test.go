package main

// Process tests of `kmaterialize watch` that others rely on as a consumer
// of the change feed: a watcher killed with SIGKILL in the middle of its
// output is resumed from the last complete commit line it printed, and a
// daemon restarted under a watch ends it with exit 4, after which its
// cursor is gone (410, exit 4) and a new list and watch equal the oracle.
// The copies (a list plus the change lines) are compared with the oracle
// fold of what the test produced, at every commit line.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// watchLog is every record a test produced, with its offset: the oracle's
// input.
type watchLog struct{ recs []rec }

// write produces n records of round over two partitions, each key of its
// own partition, every fifth a tombstone, values padded by pad bytes;
// keys are 60 unless n is larger (then one per record).
func (l *watchLog) write(t *testing.T, topic string, round, n, pad int) {
	t.Helper()
	recs := make([]localkafka.Record, n)
	for i := range recs {
		p := int32(i % 2)
		recs[i] = localkafka.Record{Partition: p, Key: []byte(fmt.Sprintf("p%d-k%04d", p, (i*7+round)%max(60, n)))}
		if i%5 != 3 {
			recs[i].Value = []byte(fmt.Sprintf("r%d-%d-%s", round, i, strings.Repeat("v", pad)))
		}
	}
	l.recs = append(l.recs, produce(t, topic, recs)...)
}

// foldAt is the latest fold of the records below pos (per partition).
// Keys belong to one partition, so the order across partitions does not
// matter.
func (l *watchLog) foldAt(pos api.Positions) map[string]string {
	o := map[string]string{}
	for _, r := range l.recs {
		switch {
		case r.O >= pos[r.P]:
		case r.V == nil:
			delete(o, string(r.K))
		default:
			o[string(r.K)] = string(r.V)
		}
	}
	return o
}

// ends are the positions after every record.
func (l *watchLog) ends() api.Positions {
	out := api.Positions{}
	for _, r := range l.recs {
		out[r.P] = max(out[r.P], r.O+1)
	}
	return out
}

// listRows reads the rig's table in one page: its rows, positions and
// cursor.
func listRows(t *testing.T, r *daemonRig) (map[string]string, api.Positions, string) {
	t.Helper()
	resp, err := r.cl.Get("http://kmaterialize/v1/tables/" + r.table + "/rows?limit=10000")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get(api.HeaderMore) != "false" {
		t.Fatalf("GET rows: %d more=%q %s", resp.StatusCode, resp.Header.Get(api.HeaderMore), buf.String())
	}
	rows := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var row struct{ Key, Value string }
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("row %q: %v", line, err)
		}
		rows[row.Key] = row.Value
	}
	pos, err := api.ParsePositions(resp.Header.Get(api.HeaderPositions))
	cursor := resp.Header.Get(api.HeaderCursor)
	if err != nil || cursor == "" {
		t.Fatalf("GET rows: positions %q (%v), cursor %q", resp.Header.Get(api.HeaderPositions), err, cursor)
	}
	return rows, pos, cursor
}

// touchFeed opens and closes the table's feed (from=now): a daemon
// captures changes only for a feed watched now or lately (serve's
// captureBound), so a commit between a list and the first watch would
// otherwise restart the feed and make the list's cursor 410 (the client
// then lists again; these tests want that list's cursor to hold).
func touchFeed(t *testing.T, r *daemonRig) {
	t.Helper()
	resp, err := (&http.Client{Transport: r.cl.Transport}).Get("http://kmaterialize/v1/tables/" + r.table + "/changes?from=now")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET changes?from=now: %d", resp.StatusCode)
	}
}

// awaitApplied waits until the daemon has applied pos (a read with
// min_positions): then no commit of what was produced is in flight, and
// a list's cursor is one the feed keeps.
func awaitApplied(t *testing.T, r *daemonRig, pos api.Positions) {
	t.Helper()
	code, body, _ := httpGet(t, r.cl, "/v1/tables/"+r.table+"/count?min_positions="+pos.String()+"&wait=30s")
	if code != http.StatusOK {
		t.Fatalf("awaiting the apply of %v: %d %s", pos, code, body)
	}
}

// watchProc is a `kmaterialize watch` process printing jsonl to a file.
// Its stdout is a pipe that the test copies to the file, chunk by chunk,
// so that it can hold the process mid-stream (hold): what reaches the
// file is exactly what the process wrote, in order, up to its end.
type watchProc struct {
	cmd    *exec.Cmd
	out    string
	stderr lockedBuffer  // crash_test.go's
	done   chan struct{} // the process ended
	copied chan struct{} // the copier wrote everything it wrote
	gate   sync.RWMutex  // the copier writes a chunk under RLock
	held   bool          // the test holds gate (its goroutine only)
}

func startWatch(t *testing.T, r *daemonRig, from, out string) *watchProc {
	t.Helper()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w := &watchProc{out: out, done: make(chan struct{}), copied: make(chan struct{})}
	w.cmd = exec.Command(binPath, "watch", "--db", r.db, "--table", r.table, "--from", from, "--format", "jsonl")
	w.cmd.Stdout, w.cmd.Stderr = pw, &w.stderr
	err = w.cmd.Start()
	pw.Close() // the child's copy is the pipe's only writer: EOF at its end
	if err != nil {
		pr.Close()
		f.Close()
		t.Fatal(err)
	}
	go func() { _ = w.cmd.Wait(); close(w.done) }()
	go func() {
		defer close(w.copied)
		defer f.Close()
		defer pr.Close()
		buf := make([]byte, 4<<10)
		for {
			n, err := pr.Read(buf)
			if n > 0 {
				w.gate.RLock()
				_, werr := f.Write(buf[:n])
				w.gate.RUnlock()
				if werr != nil {
					return
				}
			}
			if err != nil {
				return // EOF: the process ended
			}
		}
	}()
	t.Cleanup(func() {
		_ = w.cmd.Process.Kill()
		if w.held { // a test that failed while holding it
			w.release()
		}
		<-w.done
		<-w.copied
	})
	return w
}

// hold stops copying the process's output: once the pipe is full, the
// process blocks in its next write. release copies again.
func (w *watchProc) hold()    { w.gate.Lock(); w.held = true }
func (w *watchProc) release() { w.held = false; w.gate.Unlock() }

// exitCode waits for the process to end (a "did not hang" bound).
func (w *watchProc) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("watch did not end within 60s; stderr:\n%s", w.stderr.String())
	}
	<-w.copied // the pipe is at EOF: everything it wrote is in the file
	return w.cmd.ProcessState.ExitCode()
}

// watchOutput is what a watch printed: its complete lines, decoded, and
// whether a partial last line was left out.
type watchOutput struct {
	lines   []api.FeedLine
	partial bool
}

func readWatch(t *testing.T, path string) watchOutput {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var o watchOutput
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			o.partial = true // the process was killed writing it
			break
		}
		var l api.FeedLine
		if err := json.Unmarshal(b[:i], &l); err != nil {
			t.Fatalf("%s: line %q: %v", path, b[:i], err)
		}
		o.lines = append(o.lines, l)
		b = b[i+1:]
	}
	return o
}

// commits are the output's commit lines.
func (o watchOutput) commits() []api.FeedState {
	var out []api.FeedState
	for _, l := range o.lines {
		if l.Commit != nil {
			out = append(out, *l.Commit)
		}
	}
	return out
}

// replay applies o's change lines to rows up to its last commit line,
// checking at every commit line that rows equal the oracle at its
// positions and that the positions never go back (from start). It returns
// the last commit (nil: none) and fails t on an error line.
func (o watchOutput) replay(t *testing.T, what string, rows map[string]string, start api.Positions, l *watchLog) *api.FeedState {
	t.Helper()
	pending := map[string]*string{} // changes since the last commit line
	prev := start
	var last *api.FeedState
	for _, ln := range o.lines {
		switch {
		case ln.Key != nil:
			pending[*ln.Key] = ln.Value
		case ln.Commit != nil:
			for k, v := range pending {
				if v == nil {
					delete(rows, k)
				} else {
					rows[k] = *v
				}
			}
			clear(pending)
			c := ln.Commit
			if reached, _ := c.Positions.Reached(prev); !reached {
				t.Fatalf("%s: a commit at %v after one at %v: its positions went back", what, c.Positions, prev)
			}
			if want := l.foldAt(c.Positions); !maps.Equal(rows, want) {
				t.Fatalf("%s: at the commit %v the copy (%d rows) differs from the oracle (%d rows):\ncopy   %v\noracle %v", what, c.Positions, len(rows), len(want), rows, want)
			}
			prev, last = c.Positions, c
		case ln.Error != nil:
			t.Fatalf("%s: an error line %+v", what, *ln.Error)
		}
	}
	return last
}

// awaitWatch polls the watch's output until cond holds of it; it fails t
// if the process ends first or nothing comes within 90s.
func awaitWatch(t *testing.T, w *watchProc, what string, cond func(watchOutput) bool) watchOutput {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		o := readWatch(t, w.out)
		if cond(o) {
			return o
		}
		select {
		case <-w.done:
			<-w.copied
			if o := readWatch(t, w.out); cond(o) {
				return o
			}
			b, _ := os.ReadFile(w.out)
			t.Fatalf("watch ended (exit %d) before %s; stderr:\n%s\nstdout:\n%.2000s", w.cmd.ProcessState.ExitCode(), what, w.stderr.String(), b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 90s waiting for %s; stderr:\n%s", what, w.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lastAt reports whether o's last commit line is at or past want.
func lastAt(o watchOutput, want api.Positions) bool {
	cs := o.commits()
	if len(cs) == 0 {
		return false
	}
	reached, _ := cs[len(cs)-1].Positions.Reached(want)
	return reached
}

const followExtra = "    follow: true\n    follow_interval: 50ms\n"

// TestWatchKillResume: a watch process prints a followed table's feed to
// a file while records are produced; it is killed with SIGKILL once it
// has begun to print a large round, at whatever line it is writing. A new
// watch from the last complete commit line's cursor (a partial last line
// and the changes after that commit are left out) prints commits after
// that cursor's positions, never going back; the list plus the first
// watch's changes up to its last commit plus the resumed watch's changes
// equal the oracle at every commit line, up to the last record: nothing
// missed, and a change printed twice is harmless (changes are absolute).
func TestWatchKillResume(t *testing.T) {
	topic := newTopic(t, 2)
	var l watchLog
	l.write(t, topic, 0, 60, 10)
	r := newDaemonRig(t, topic, followExtra)
	r.start(t)
	touchFeed(t, r)
	awaitApplied(t, r, l.ends())
	rows, at, cursor := listRows(t, r)
	if want := l.foldAt(at); !maps.Equal(rows, want) {
		t.Fatalf("the list at %v: %v, oracle %v", at, rows, want)
	}
	dir := t.TempDir()
	w1 := startWatch(t, r, cursor, filepath.Join(dir, "first.jsonl"))
	for round := 1; round <= 3; round++ {
		l.write(t, topic, round, 40, 10)
		awaitWatch(t, w1, fmt.Sprintf("round %d's commit", round), func(o watchOutput) bool { return lastAt(o, l.ends()) })
	}
	// A round of 3000 keys, some 700 KiB of lines, far more than the
	// pipe holds: with the copy held, the daemon applies it all while the
	// watch blocks in the middle of printing it, where it is killed.
	w1.hold()
	l.write(t, topic, 4, 3000, 200)
	awaitApplied(t, r, l.ends())
	if err := w1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w1.release()
	if code := w1.exitCode(t); code != -1 {
		t.Fatalf("the killed watch: exit code %d, want -1 (killed)", code)
	}
	first := readWatch(t, w1.out)
	last := first.replay(t, "the killed watch", rows, at, &l)
	if last == nil {
		t.Fatal("the killed watch printed no commit line")
	}
	if reached, _ := last.Positions.Reached(l.ends()); reached {
		t.Fatalf("the killed watch printed every commit (to %v): it was not killed mid-stream", last.Positions)
	}
	t.Logf("killed after the commit at %v (partial last line: %v; %d lines)", last.Positions, first.partial, len(first.lines))

	l.write(t, topic, 5, 40, 10)
	w2 := startWatch(t, r, last.Cursor, filepath.Join(dir, "resumed.jsonl"))
	want := l.ends()
	resumed := awaitWatch(t, w2, "the resumed watch's commit of every record", func(o watchOutput) bool { return lastAt(o, want) })
	cs := resumed.commits()
	if reached, _ := cs[0].Positions.Reached(last.Positions); !reached || maps.Equal(cs[0].Positions, last.Positions) {
		t.Fatalf("the resumed watch's first commit at %v, want after the cursor's %v", cs[0].Positions, last.Positions)
	}
	resumed.replay(t, "the resumed watch", rows, last.Positions, &l)
	if err := w2.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := w2.exitCode(t); code != 0 {
		t.Fatalf("the resumed watch after SIGINT: exit %d, want 0; stderr:\n%s", code, w2.stderr.String())
	}
}

// TestWatchDaemonRestart: the daemon is stopped with SIGTERM while a
// watch runs: the watch exits 4 (shutting down). Once the daemon serves
// again, a watch from the last commit line's cursor exits 4 too (410: the
// new daemon's epoch), and a new list and watch equal the oracle at every
// commit line while more records are produced and followed.
func TestWatchDaemonRestart(t *testing.T) {
	topic := newTopic(t, 2)
	var l watchLog
	l.write(t, topic, 0, 40, 10)
	r := newDaemonRig(t, topic, followExtra)
	p := r.start(t)
	touchFeed(t, r)
	awaitApplied(t, r, l.ends())
	rows, at, cursor := listRows(t, r)
	dir := t.TempDir()
	w := startWatch(t, r, cursor, filepath.Join(dir, "before.jsonl"))
	l.write(t, topic, 1, 30, 10)
	awaitWatch(t, w, "round 1's commit", func(o watchOutput) bool { return lastAt(o, l.ends()) })

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("the daemon after SIGTERM: exit %d, want 0", code)
	}
	if code := w.exitCode(t); code != exitIncomplete || !strings.Contains(w.stderr.String(), "shutting down") {
		t.Fatalf("the watch when its daemon stopped: exit %d, want %d (shutting down); stderr:\n%s", code, exitIncomplete, w.stderr.String())
	}
	before := readWatch(t, w.out)
	last := before.replay(t, "the watch before the restart", rows, at, &l)
	if last == nil {
		t.Fatal("the watch printed no commit line")
	}

	l.write(t, topic, 2, 30, 10)
	r.start(t)
	// This refusal also makes the new daemon's feed watched (touchFeed).
	res := mustCLI(t, exitIncomplete, "watch", "--db", r.db, "--table", r.table, "--from", last.Cursor)
	if !strings.Contains(res.stderr, "410 cursor_gone") {
		t.Fatalf("the old cursor after the restart: %s", res.stderr)
	}
	awaitApplied(t, r, l.ends())
	rows, at, cursor = listRows(t, r)
	if want := l.foldAt(at); !maps.Equal(rows, want) {
		t.Fatalf("the list after the restart at %v: %v, oracle %v", at, rows, want)
	}
	w = startWatch(t, r, cursor, filepath.Join(dir, "after.jsonl"))
	for round := 3; round <= 5; round++ {
		l.write(t, topic, round, 30, 10)
		awaitWatch(t, w, fmt.Sprintf("round %d's commit after the restart", round), func(o watchOutput) bool { return lastAt(o, l.ends()) })
	}
	readWatch(t, w.out).replay(t, "the watch after the restart", rows, at, &l)
}
