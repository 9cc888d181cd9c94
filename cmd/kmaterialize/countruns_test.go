package main

// The count fold's run files (rebuild --fold count --memory): a rebuild
// whose identities exceed --memory/4 spills them as sorted runs and merges
// them into the identity index at the end; the table is compared with a
// plain count of the records produced.

import (
	"fmt"
	"math/rand"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/internal/failpoint"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// countRunRecords are n count events over n*3/4 identities on two
// partitions (an identity in one partition; its repeats are duplicates
// with the same content, some in later runs), in
// groups b0 to b6; and the oracle's rows: distinct identities per group.
func countRunRecords(rng *rand.Rand, n int) ([]localkafka.Record, map[string]string, int) {
	ids := n * 3 / 4
	out := make([]localkafka.Record, 0, n)
	seen := map[int]bool{}
	counts := map[string]int{}
	for range n {
		id := rng.Intn(ids)
		group := fmt.Sprintf("b%d", id%7)
		if !seen[id] {
			seen[id] = true
			counts[group]++
		}
		v := fmt.Sprintf(`{"id":"ev-%05d","g":%q,"pad":"%0150d"}`, id, group, id)
		out = append(out, localkafka.Record{Partition: int32(id % 2), Key: []byte(strconv.Itoa(id)), Value: []byte(v)})
	}
	rows := map[string]string{}
	for g, c := range counts {
		rows[g] = strconv.Itoa(c)
	}
	return out, rows, len(seen)
}

// TestCountRunsExactAndKill9: a count rebuild at --memory 1MiB spills
// several runs and publishes exactly the oracle's counts, with the
// logical events and duplicates the oracle counts, leaving no run file.
// Then a rebuild of the same table parked just after its second run
// (failpoint run-written@2) is killed with SIGKILL: its two run files are
// on disk, readers see the first table, and the next rebuild (default
// --memory: no runs of its own) removes them and publishes the table
// again.
func TestCountRunsExactAndKill9(t *testing.T) {
	bin := failpointBinary(t)
	rng := newRand(t)
	topic := crashTopic(t, 2)
	db := dbPath(t)
	recs, rows, logical := countRunRecords(rng, 10000)
	produce(t, topic, recs)
	countFlags := []string{"--fold", "count", "--identity-field", "id", "--group-field", "g"}

	r := mustCLI(t, 0, append([]string{"--log-format", "json"}, rebuildArgs(topic, db, append(countFlags, "--memory", spillMemory)...)...)...)
	if n := publishedRuns(t, r.stderr); n < 3 {
		t.Fatalf("the count rebuild spilled %d runs, want several", n)
	}
	if d := cmp.Diff(rows, scanRows(t, db, topic)); d != "" {
		t.Fatalf("rows (-oracle +table):\n%s", d)
	}
	var doc struct {
		Totals map[string]int64 `json:"totals"`
	}
	if err := jsonUnmarshal(quietCLI(t, 0, "export", "--db", db, "--table", topic).stdout, &doc); err != nil {
		t.Fatal(err)
	}
	wantTotals := map[string]int64{"records_read": int64(len(recs)), "logical_events": int64(logical),
		"duplicates_folded": int64(len(recs) - logical), "keys": int64(len(rows))}
	for k, v := range wantTotals {
		if doc.Totals[k] != v {
			t.Fatalf("export totals %v: %s = %d, want %d", doc.Totals, k, doc.Totals[k], v)
		}
	}
	if f := runFiles(t, db); len(f) != 0 {
		t.Fatalf("run files left after a successful rebuild: %v", f)
	}

	file := filepath.Join(t.TempDir(), "failpoint")
	c := startChild(t, []string{failpoint.EnvPoint + "=" + failpoint.RunWritten + "@2", failpoint.EnvFile + "=" + file},
		bin, append([]string{"--log-format", "json"}, rebuildArgs(topic, db, append(countFlags, "--memory", spillMemory)...)...)...)
	awaitFailpoint(t, c, file, "failpoint "+failpoint.RunWritten+" parked")
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if ws := c.wait(t, 30*time.Second); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed by SIGKILL", ws)
	}
	if left := runFiles(t, db); len(left) != 2 {
		t.Fatalf("run files after the kill: %v, want the 2 written", left)
	}
	boltCheck(t, db)
	if d := cmp.Diff(rows, scanRows(t, db, topic)); d != "" {
		t.Fatalf("rows after the kill (-first table +table):\n%s", d)
	}
	r = mustCLI(t, 0, append([]string{"--log-format", "json"}, rebuildArgs(topic, db, countFlags...)...)...)
	if n := publishedRuns(t, r.stderr); n != 0 {
		t.Fatalf("the cleanup rebuild spilled %d runs, want none (default --memory)", n)
	}
	if f := runFiles(t, db); len(f) != 0 {
		t.Fatalf("run files after the next rebuild: %v", f)
	}
	if d := cmp.Diff(rows, scanRows(t, db, topic)); d != "" {
		t.Fatalf("rows after the cleanup rebuild (-oracle +table):\n%s", d)
	}
	boltCheck(t, db)
}
