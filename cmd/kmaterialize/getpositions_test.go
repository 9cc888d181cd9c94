package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// TestGetMinPositions: get --min-positions needs a daemon (exit 2 when the
// command reads the file), and its values are checked before anything is
// read (exit 2). Through the daemon, positions the table has reached
// answer the value (0), positions one record past it exit 4 after
// --wait, naming the table's positions; a partition it lacks exits 2.
func TestGetMinPositions(t *testing.T) {
	topic := newTopic(t, 1)
	recs := produce(t, topic, []localkafka.Record{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("a"), Value: []byte("2")}})
	end := recs[len(recs)-1].O + 1 // the table's position once built

	r := newDaemonRig(t, topic, "")
	mustCLI(t, 0, rebuildArgs(topic, r.db, "--table", r.table)...)
	direct := []string{"get", "--db", r.db, "--table", r.table}
	if res := mustCLI(t, 2, append(direct, "--min-positions", fmt.Sprintf("0:%d", end), "a")...); !strings.Contains(res.stderr, "needs a daemon") {
		t.Fatalf("without a daemon: %s", res.stderr)
	}
	for _, bad := range [][]string{{"--min-positions", "0:x"}, {"--min-positions", ""}, {"--wait", "2s"}, {"--min-positions", "0:1", "--wait", "31s"}} {
		mustCLI(t, 2, append(append(append([]string(nil), direct...), bad...), "a")...)
	}

	r.start(t) // killed at the test's end
	if res := mustCLI(t, 0, append(direct, "--min-positions", fmt.Sprintf("0:%d", end), "--wait", "1s", "a")...); res.stdout != "2\n" {
		t.Fatalf("at the table's positions: %q, want \"2\\n\"", res.stdout)
	}
	res := mustCLI(t, 4, append(direct, "--min-positions", fmt.Sprintf("0:%d", end+1), "--wait", "50ms", "a")...)
	if !strings.Contains(res.stderr, "has not reached") || !strings.Contains(res.stderr, fmt.Sprintf("0:%d", end)) {
		t.Fatalf("past the table: stderr %s", res.stderr)
	}
	mustCLI(t, 2, append(direct, "--min-positions", "3:1", "a")...)
}
