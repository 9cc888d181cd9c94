package main

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// upTo are the records of recs below each partition's end in st (the
// positions an export of a table says it reflects).
func upTo(recs []rec, st tableState) []rec {
	var out []rec
	for _, r := range recs {
		if r.O < st.Partitions[r.P][3] {
			out = append(out, r)
		}
	}
	return out
}

// TestBackup: kmaterialize backup through a daemon (a real process) that
// follows a topic while a producer writes: each copy passes check, and
// its table, exported from the copy, equals the oracle fold of the records
// below the positions the copy's export says. --out naming --db is exit 2.
// With the daemon stopped, backup reads the file itself and the copy's
// export equals the original's. Restored (the copy put in place of the
// file while nothing holds it), the daemon serves the copy's table and
// follows it on to the end of the topic.
func TestBackup(t *testing.T) {
	topic := newTopic(t, 2)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	var mu sync.Mutex
	recs := produce(t, topic, genRecords(rng, []int32{0, 1}, 300))
	r := newDaemonRig(t, topic, "    follow: true\n    follow_interval: 50ms\n")
	p := r.start(t)
	if res := mustCLI(t, 2, "backup", "--db", r.db, "--out", r.db); !strings.Contains(res.stderr, "is the database itself") {
		t.Fatalf("backup over the database: %s", res.stderr)
	}

	// The producer writes while the backups are taken.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		prng := rand.New(rand.NewSource(rng.Int63()))
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			got := produce(t, topic, genRecords(prng, []int32{0, 1}, 50))
			mu.Lock()
			recs = append(recs, got...)
			mu.Unlock()
		}
	}()
	dir := t.TempDir()
	var copies []string
	for i := 0; i < 3; i++ {
		out := filepath.Join(dir, fmt.Sprintf("copy-%d.db", i))
		res := mustCLI(t, 0, "backup", "--db", r.db, "--out", out)
		if !strings.Contains(res.stdout, "through the daemon") || !strings.Contains(res.stdout, "sha256 ") {
			t.Fatalf("backup %d: stdout %q", i, res.stdout)
		}
		copies = append(copies, out)
		time.Sleep(100 * time.Millisecond) // let the follower apply more between copies
	}
	close(stop)
	wg.Wait()
	for i, c := range copies {
		mustCLI(t, 0, "check", "--db", c)
		st := exportState(t, c, r.table)
		want, _, _ := oracle(upTo(recs, st), nil)
		if diff := cmp.Diff(want, st.Rows); diff != "" {
			t.Fatalf("copy %d at %v (-oracle +copy):\n%s", i, st.Partitions, diff)
		}
	}

	// Without the daemon: the file itself.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("the daemon exited %d at SIGTERM", code)
	}
	direct := filepath.Join(dir, "direct.db")
	if res := mustCLI(t, 0, "backup", "--db", r.db, "--out", direct); strings.Contains(res.stdout, "through the daemon") {
		t.Fatalf("a backup without a daemon went through one: %q", res.stdout)
	}
	mustCLI(t, 0, "check", "--db", direct)
	if diff := cmp.Diff(exportState(t, r.db, r.table), exportState(t, direct, r.table)); diff != "" {
		t.Fatalf("the copy of the file (-original +copy):\n%s", diff)
	}

	// Restore the first copy, produce more, and start the daemon on it.
	raw, err := os.ReadFile(copies[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.db, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	recs = append(recs, produce(t, topic, genRecords(rng, []int32{0, 1}, 100))...)
	ends := map[int32]int64{}
	for _, rc := range recs {
		ends[rc.P] = max(ends[rc.P], rc.O+1)
	}
	restored := r.start(t)
	var st tableState
	waitFor(t, 60*time.Second, "the restored table followed to the end", func() bool {
		if err := restored.cmd.Process.Signal(syscall.Signal(0)); err != nil {
			t.Fatalf("the restored daemon is gone: %s", restored.stderrText())
		}
		st = exportState(t, r.db, r.table) // through the daemon
		return st.Partitions[0][3] == ends[0] && st.Partitions[1][3] == ends[1]
	})
	want, _, _ := oracle(recs, nil)
	if diff := cmp.Diff(want, st.Rows); diff != "" {
		t.Fatalf("restored and followed (-oracle +daemon):\n%s", diff)
	}
}

// TestCompactThroughDaemon: compact --db of a file a daemon (a real
// process) holds and follows goes through the daemon: exit 0, a smaller
// file, the table equal to the oracle before and after, the follower going
// on; the file passes check once the daemon stops.
func TestCompactThroughDaemon(t *testing.T) {
	topic := newTopic(t, 2)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	recs := produce(t, topic, genRecords(rng, []int32{0, 1}, 400))
	r := newDaemonRig(t, topic, "    follow: true\n    follow_interval: 50ms\n")
	p := r.start(t)
	for i := 0; i < 3; i++ { // free pages: each rebuild frees the generation before
		mustCLI(t, 0, "rebuild", "--db", r.db, "--table", r.table)
	}
	before := exportState(t, r.db, r.table)
	res := mustCLI(t, 0, "compact", "--db", r.db)
	var from, to int64
	if _, err := fmt.Sscanf(res.stdout[strings.Index(res.stdout, ": ")+2:], "%d -> %d bytes", &from, &to); err != nil || !strings.Contains(res.stdout, "through the daemon") || to >= from {
		t.Fatalf("compact through the daemon: %q (%v)", res.stdout, err)
	}
	if diff := cmp.Diff(before.Rows, exportState(t, r.db, r.table).Rows); diff != "" {
		t.Fatalf("the table after the compaction (-before +after):\n%s", diff)
	}
	recs = append(recs, produce(t, topic, genRecords(rng, []int32{0, 1}, 100))...)
	ends := map[int32]int64{}
	for _, rc := range recs {
		ends[rc.P] = max(ends[rc.P], rc.O+1)
	}
	var st tableState
	waitFor(t, 60*time.Second, "the follower after the compaction", func() bool {
		st = exportState(t, r.db, r.table)
		return st.Partitions[0][3] == ends[0] && st.Partitions[1][3] == ends[1]
	})
	want, _, _ := oracle(recs, nil)
	if diff := cmp.Diff(want, st.Rows); diff != "" {
		t.Fatalf("followed after the compaction (-oracle +daemon):\n%s", diff)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("the daemon exited %d", code)
	}
	mustCLI(t, 0, "check", "--db", r.db)
}
