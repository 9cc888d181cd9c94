package main

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// closedPort is 127.0.0.1 with a port nothing listens on: listened on, then
// closed, so a connect is refused.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections: the test shows nothing", addr)
	}
	return addr
}

// TestUnreachableBrokers: rebuild, update, describe, copy and verify given
// only brokers that refuse the connection (a closed port) or whose name
// does not resolve (nonexistent.invalid) exit 5 naming the brokers and the
// cause, with --stall-timeout 30s; before, each waited the whole 30 s and
// said "Local: Timed out". (The test logs each command's duration.)
func TestUnreachableBrokers(t *testing.T) {
	topic := newTopic(t, 1)
	dst := newTopic(t, 1)
	produce(t, topic, []localkafka.Record{{Key: []byte("k"), Value: []byte("v")}})
	// update needs a table whose stored definition it continues.
	db := dbPath(t)
	mustCLI(t, 0, rebuildArgs(topic, db)...)

	refused := closedPort(t)
	for _, tc := range []struct {
		name     string
		brokers  string
		want     []string // in stderr
		commands int      // the first so many of the commands below
	}{
		{"refused", refused, []string{refused, "connection refused"}, 5},
		{"no such host", "nonexistent.invalid:9092", []string{"nonexistent.invalid:9092", "resolve"}, 5},
		// Every broker is named with its own cause (one command is enough:
		// the rule is the same code for all five).
		{"both", refused + ",nonexistent.invalid:9092", []string{refused, "connection refused", "nonexistent.invalid:9092", "resolve"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, args := range [][]string{
				{"describe", "--brokers", tc.brokers, "--topic", topic},
				{"rebuild", "--brokers", tc.brokers, "--topic", topic, "--db", dbPath(t)},
				{"update", "--brokers", tc.brokers, "--db", db, "--table", topic},
				{"verify", "--brokers", tc.brokers, "--from", topic, "--to", dst},
				{"copy", "--brokers", tc.brokers, "--from", topic, "--to", dst, "--group", topic + "-g", "--transactional-id", topic + "-t"},
			}[:tc.commands] {
				start := time.Now()
				r := mustCLI(t, exitUnavailable, append(args, "--stall-timeout", "30s")...)
				t.Logf("%s: exit %d after %s", args[0], r.code, time.Since(start).Round(time.Millisecond))
				for _, w := range tc.want {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("%s: stderr lacks %q:\n%s", args[0], w, r.stderr)
					}
				}
				if strings.Contains(r.stderr, "Local: Timed out") {
					t.Errorf("%s: stderr says the stall timeout passed:\n%s", args[0], r.stderr)
				}
			}
		})
	}
}
