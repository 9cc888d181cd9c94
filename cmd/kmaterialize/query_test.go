package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// TestQueries: get, scan and tables on the full scenario's table, against the
// oracle: a present key prints its value and a newline (exit 0); an absent,
// deleted or aborted-only key exits 6; a missing table exits 6 for get and
// scan and stderr lists the tables that exist; tables names topic,
// generation, keys, records read and skipped and each partition's bounds.
func TestQueries(t *testing.T) {
	s := fullScenario(t)
	db := dbPath(t)
	mustCLI(t, 0, rebuildArgs(s.topic, db)...)
	want, read, skipped := oracle(s.recs, nil)

	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		r := mustCLI(t, 0, "get", "--db", db, "--table", s.topic, k)
		if r.stdout != want[k]+"\n" {
			t.Fatalf("get %s printed %q, want %q", k, r.stdout, want[k]+"\n")
		}
	}
	k := keys[len(keys)/2]
	r := mustCLI(t, 0, "get", "--db", db, "--table", s.topic, "--base64", k)
	if r.stdout != base64.StdEncoding.EncodeToString([]byte(want[k]))+"\n" {
		t.Fatalf("get --base64 %s printed %q", k, r.stdout)
	}

	// Absent keys: never written, only in the aborted transaction, and
	// every key whose last record is a tombstone.
	absent := []string{"no-such-key", "only-in-aborted"}
	for _, rc := range s.recs {
		if rc.K != nil {
			if _, ok := want[string(rc.K)]; !ok && rc.Committed {
				absent = append(absent, string(rc.K))
			}
		}
	}
	for _, k := range absent {
		r := mustCLI(t, exitNotFound, "get", "--db", db, "--table", s.topic, k)
		if r.stdout != "" {
			t.Fatalf("get of absent key %q printed %q", k, r.stdout)
		}
	}

	// Prefix and limit scans are the ordered slice of the oracle.
	r = mustCLI(t, 0, "scan", "--db", db, "--table", s.topic, "--prefix", "p3-", "--limit", "3", "--format", "tsv")
	var wantTSV strings.Builder
	n := 0
	for _, k := range keys {
		if strings.HasPrefix(k, "p3-") && n < 3 {
			fmt.Fprintf(&wantTSV, "%s\t%s\n", k, want[k])
			n++
		}
	}
	if r.stdout != wantTSV.String() {
		t.Fatalf("scan --prefix p3- --limit 3 --format tsv printed %q, want %q", r.stdout, wantTSV.String())
	}

	// A missing table: exit 6, and stderr lists the tables there are.
	for _, args := range [][]string{
		{"get", "--db", db, "--table", "no-such-table", keys[0]},
		{"scan", "--db", db, "--table", "no-such-table"},
	} {
		r := mustCLI(t, exitNotFound, args...)
		if !strings.Contains(r.stderr, "no-such-table") || !strings.Contains(r.stderr, "tables: "+s.topic) {
			t.Fatalf("%s on a missing table: stderr does not name it and list %s:\n%s", args[0], s.topic, r.stderr)
		}
	}

	// tables, as text.
	r = mustCLI(t, 0, "tables", "--db", db)
	for _, re := range []string{
		`(?m)^table ` + regexp.QuoteMeta(s.topic) + `$`,
		`(?m)^\s+topic:\s+` + regexp.QuoteMeta(s.topic) + `$`,
		`(?m)^\s+fold:\s+latest$`,
		`(?m)^\s+generation:\s+1$`,
		`(?m)^\s+keys:\s+` + strconv.Itoa(len(want)) + `$`,
		`(?m)^\s+records read:\s+` + strconv.FormatInt(read, 10) + `$`,
		`(?m)^\s+records skipped:\s+` + strconv.FormatInt(skipped, 10) + regexp.QuoteMeta(nullKeyReason(skipped)) + `$`,
		`(?m)^\s+end mark:\s+high$`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Fatalf("tables output does not match %s:\n%s", re, r.stdout)
		}
	}
	rows := regexp.MustCompile(`(?m)^\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$`).FindAllStringSubmatch(r.stdout, -1)
	if len(rows) != 4 {
		t.Fatalf("tables output has %d partition rows, want 4:\n%s", len(rows), r.stdout)
	}
	for i, row := range rows {
		hw := marksOf(t, s.topic)[int32(i)].High
		wantRow := []string{strconv.Itoa(i), "0", "0", strconv.FormatInt(hw, 10), strconv.FormatInt(hw, 10)}
		if strings.Join(row[1:], " ") != strings.Join(wantRow, " ") {
			t.Fatalf("tables partition row %q, want partition low start end-mark reached = %v", row[0], wantRow)
		}
	}

	// A second rebuild publishes generation 2 with the same table.
	mustCLI(t, 0, rebuildArgs(s.topic, db)...)
	if g := tablesJSON(t, db)[s.topic].Generation; g != 2 {
		t.Fatalf("generation %d after a second rebuild, want 2", g)
	}
	checkTable(t, want, scanTable(t, db, s.topic))

	// Queries on a database that does not exist: no table is found there,
	// and the query does not create the file.
	missing := dbPath(t)
	for _, args := range [][]string{
		{"scan", "--db", missing, "--table", s.topic},
		{"get", "--db", missing, "--table", s.topic, "k"},
		{"tables", "--db", missing},
		{"export", "--db", missing, "--table", s.topic},
	} {
		if r := mustCLI(t, exitNotFound, args...); !strings.Contains(r.stderr, "no database at "+missing) {
			t.Fatalf("%q: stderr does not name the missing database:\n%s", args, r.stderr)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a query created %s: %v", missing, err)
	}
}

// TestUsage: bad usage exits 2; demo runs end to end and prints its table.
func TestUsage(t *testing.T) {
	db := dbPath(t)
	for _, args := range [][]string{
		{"rebuild", "--no-such-flag", "--brokers", broker.Addr, "--topic", "x", "--db", db},
		{"--no-such-flag", "tables", "--db", db},
		{"scan", "--db", db, "--table", "t", "--format", "xml"},
		{"tables", "--db", db, "--format", "xml"},
		{"rebuild", "--brokers", broker.Addr, "--topic", "x", "--db", db, "--end", "middle"},
		{"rebuild", "--brokers", broker.Addr, "--topic", "x", "--db", db, "-X", "novalue"},
		{"get", "--db", db, "--table", "t"},
		{"--log-level", "loud", "rebuild", "--brokers", broker.Addr, "--topic", "x", "--db", db},
	} {
		r := mustCLI(t, exitUsage, args...)
		if !strings.Contains(r.stderr, "Try:") {
			t.Errorf("%v: stderr has no hint:\n%s", args, r.stderr)
		}
	}

	// The demo starts its own kfake: kfake-only by nature.
	t.Run("demo", func(t *testing.T) {
		localkafka.KfakeOnly(t)
		r := mustCLI(t, 0, "demo")
		// The scan section is the JSON object between the scan and the tables
		// prompts.
		_, after, ok := strings.Cut(r.stdout, "$ kmaterialize scan")
		if !ok {
			t.Fatalf("demo printed no scan:\n%s", r.stdout)
		}
		_, after, _ = strings.Cut(after, "\n")
		scanned, _, ok := strings.Cut(after, "\n$ kmaterialize tables")
		if !ok {
			t.Fatalf("demo printed no tables listing:\n%s", r.stdout)
		}
		var got map[string]string
		if err := jsonUnmarshal(scanned, &got); err != nil {
			t.Fatalf("demo table is not a JSON object: %v\n%s", err, scanned)
		}
		// The demo's stream, as its help describes it: acct-1..12 over 3 rounds
		// (last round wins, i*100+30), acct-7 tombstoned, the aborted
		// transaction's values never seen, and the committed transfer setting
		// acct-4 and acct-5.
		want := map[string]string{}
		for i := 1; i <= 12; i++ {
			want[fmt.Sprintf("acct-%d", i)] = fmt.Sprintf("%d.00", i*100+30)
		}
		delete(want, "acct-7")
		want["acct-4"], want["acct-5"] = "350.00", "610.00"
		checkTable(t, want, got)

		// The closing text explains the table: the tombstoned key gone, the
		// aborted values absent (and what the keys hold instead), the
		// committed transfer, the null-keyed record skipped and counted.
		_, explained, ok := strings.Cut(r.stdout, "\nWhat the output shows:\n")
		if !ok {
			t.Fatalf("demo printed no explanation:\n%s", r.stdout)
		}
		explained, next, ok := strings.Cut(explained, "\nNext steps")
		if !ok {
			t.Fatalf("demo printed no next steps:\n%s", r.stdout)
		}
		for _, w := range []string{
			"acct-7 is not in the table: its last record is a tombstone",
			fmt.Sprintf("acct-1 is %s and acct-2 is %s, never 999999.00 or -1.00", want["acct-1"], want["acct-2"]),
			"aborted", "read_committed",
			fmt.Sprintf("acct-4 is %s and acct-5 is %s: written in a committed transaction", want["acct-4"], want["acct-5"]),
			"records skipped: 1 (null_key=1): a record without a key",
		} {
			if !strings.Contains(explained, w) {
				t.Errorf("the explanation does not say %q:\n%s", w, explained)
			}
		}
		if _, ok := got["999999.00"]; ok || strings.Contains(scanned, "999999.00") {
			t.Errorf("an aborted value is in the table:\n%s", scanned)
		}
		// The next steps must work after the demo exits: they start a broker
		// of their own and never name the demo's removed temporary database
		// (TestDemoNextSteps runs them).
		if !strings.Contains(next, "$ kmaterialize dev broker --topic account-balances:4") {
			t.Errorf("the next steps do not start the dev broker:\n%s", next)
		}
		if strings.Contains(next, "kmaterialize-demo-") {
			t.Errorf("the next steps name the demo's temporary database, gone after it exits:\n%s", next)
		}
	})
}
