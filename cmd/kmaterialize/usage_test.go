package main

// Tests of the habits of good CLIs (issue 18, point 3): help, did-you-mean,
// global flags after the command, durations without a unit, a directory as
// --db, no empty database left by a failed run, hints with the user's own
// values, serve --check-config.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestHelpCommand: `help` lists the commands, `help COMMAND` shows that
// command's help as `COMMAND --help` does, and `help` of a misspelt
// command exits 2 with the command meant. The binary, as a user runs it.
func TestHelpCommand(t *testing.T) {
	r := binExec(t, binPath, "", "help")
	if r.code != 0 {
		t.Fatalf("help: exit %d", r.code)
	}
	for _, cmd := range []string{"rebuild", "update", "get", "scan", "copy", "verify", "serve", "help"} {
		if !regexp.MustCompile(`(?m)^\s+` + cmd + `\b`).MatchString(r.stdout) {
			t.Errorf("help does not list %s:\n%s", cmd, r.stdout)
		}
	}
	for _, cmd := range []string{"rebuild", "serve", "get"} {
		h := binExec(t, binPath, "", "help", cmd)
		f := binExec(t, binPath, "", cmd, "--help")
		if h.code != 0 || f.code != 0 {
			t.Fatalf("help %s: exit %d; %s --help: exit %d", cmd, h.code, cmd, f.code)
		}
		if !strings.Contains(h.stdout, "kmaterialize "+cmd+" - ") || h.stdout != f.stdout {
			t.Fatalf("help %s differs from %s --help:\n%s\n---\n%s", cmd, cmd, h.stdout, f.stdout)
		}
	}
	r = binExec(t, binPath, "", "help", "rebuld")
	if r.code != exitUsage || !strings.Contains(r.stderr, `unknown command "rebuld"; did you mean "rebuild"?`) ||
		!strings.Contains(r.stderr, "Try: kmaterialize help rebuild") {
		t.Fatalf("help rebuld: exit %d, want %d with the command meant", r.code, exitUsage)
	}
}

// TestDidYouMean: each mistake is exit 2 with a message that says what to
// type instead, nothing on stdout.
func TestDidYouMean(t *testing.T) {
	db := dbPath(t)
	for _, tc := range []struct {
		args []string
		want []string // in stderr
	}{
		{[]string{"rebuld", "--topic", "t"}, []string{`unknown command "rebuld"; did you mean "rebuild"?`, "Try: kmaterialize help rebuild"}},
		{[]string{"tabels"}, []string{`did you mean "tables"?`}},
		{[]string{"frobnicate"}, []string{`unknown command "frobnicate"`, "Try: kmaterialize help"}},
		{[]string{"rebuild", "--broker", broker.Addr, "--topic", "t", "--db", db},
			[]string{"rebuild: unknown flag --broker; did you mean --brokers?", "Try: kmaterialize rebuild --help"}},
		{[]string{"scan", "--db", db, "--tabel", "t"}, []string{"scan: unknown flag --tabel; did you mean --table?"}},
		{[]string{"--log-levl", "debug", "tables", "--db", db}, []string{"unknown global flag --log-levl; did you mean --log-level?"}},
		{[]string{"get", "--db", db, "--frobnicate", "1"}, []string{"get: unknown flag --frobnicate", "Try: kmaterialize get --help"}},
		// A global flag after the command: where it goes, with the
		// user's own value.
		{[]string{"rebuild", "--log-level", "debug", "--topic", "t", "--db", db},
			[]string{"--log-level is a global flag: it goes before the command (rebuild)", "Try: kmaterialize --log-level debug rebuild ..."}},
		{[]string{"tables", "--db", db, "--log-format=json"}, []string{"Try: kmaterialize --log-format json tables ..."}},
		// A command's flag before the command.
		{[]string{"--db", db, "tables"}, []string{"--db is a flag of the command", "it goes after the command name"}},
		// A duration without a unit.
		{rebuildArgs("t", db, "--stall-timeout", "30"), []string{"--stall-timeout 30: a duration needs a unit: use 30s", "Try: --stall-timeout 30s"}},
		{[]string{"tables", "--db", db, "--lock-timeout", "2.5"}, []string{"use 2.5s"}},
		{rebuildArgs("t", db, "--stall-timeout", "soon"), []string{`--stall-timeout "soon": not a duration`}},
	} {
		r := kmz(t, tc.args...)
		if r.code != exitUsage || r.stdout != "" {
			t.Errorf("%q: exit %d with stdout %q, want %d and nothing", tc.args, r.code, r.stdout, exitUsage)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%q: stderr lacks %q:\n%s", tc.args, w, r.stderr)
			}
		}
	}
	if _, err := os.Stat(db); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a usage error created %s: %v", db, err)
	}
}

// TestConfigDidYouMean: a misspelt field of the config file is exit 2
// naming the file, the line and the field meant, in a command that reads
// --config and in serve --check-config.
func TestConfigDidYouMean(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kmaterialize.yaml")
	doc := fmt.Sprintf("db: t.db\nkafka:\n  brokers: %s\ntables:\n  - name: a\n    topic: t\n    folow: true\n", broker.Addr)
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`config %s:7: unknown field "folow"; did you mean "follow"?`, path)
	for _, args := range [][]string{
		{"rebuild", "--config", path, "--table", "a"},
		{"serve", "--check-config", path},
	} {
		r := kmz(t, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, want) {
			t.Errorf("%q: exit %d, want %d and %q in:\n%s", args, r.code, exitUsage, want, r.stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "t.db")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a config that does not load created the database: %v", err)
	}
}

// TestDBDirectory: a directory given as --db is exit 2 saying so, with a
// file in that directory as the hint, for a reading and a writing command;
// the directory is left as it was.
func TestDBDirectory(t *testing.T) {
	dir := t.TempDir()
	topic := newTopic(t, 1)
	produce(t, topic, genRecords(newRand(t), []int32{0}, 20))
	for _, args := range [][]string{
		{"get", "--db", dir, "--table", "t", "k"},
		{"tables", "--db", dir},
		rebuildArgs(topic, dir),
	} {
		r := kmz(t, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--db "+dir+" is a directory; the database is a file") ||
			!strings.Contains(r.stderr, "Try: --db "+filepath.Join(dir, "tables.db")) {
			t.Errorf("%q: exit %d, want %d saying the path is a directory:\n%s", args, r.code, exitUsage, r.stderr)
		}
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Fatalf("the directory given as --db holds %v (%v), want nothing", ents, err)
	}
}

// TestFailedRunLeavesNoFile: a rebuild of a topic that does not exist and
// an update of a table that does not exist fail (5 and 6) without leaving
// the database file they created; a file that was there before a failed
// run is kept with its table, and so is one a successful run created.
func TestFailedRunLeavesNoFile(t *testing.T) {
	dir := t.TempDir()
	fresh := filepath.Join(dir, "fresh.db")
	missing := runName(t) + "-missing"
	if r := kmz(t, rebuildArgs(missing, fresh)...); r.code != exitUnavailable {
		t.Fatalf("rebuild of a missing topic: exit %d, want %d", r.code, exitUnavailable)
	}
	if r := kmz(t, "update", "--db", fresh, "--table", "nope", "--brokers", broker.Addr); r.code != exitNotFound {
		t.Fatalf("update of a missing table: exit %d, want %d", r.code, exitNotFound)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Fatalf("failed runs left %v (%v) in the directory, want nothing", names(ents), err)
	}

	// A database with a table: a failed rebuild of another table keeps it.
	topic := newTopic(t, 2)
	recs := produce(t, topic, genRecords(newRand(t), []int32{0, 1}, 100))
	mustCLI(t, 0, rebuildArgs(topic, fresh)...)
	if r := kmz(t, rebuildArgs(missing, fresh)...); r.code != exitUnavailable {
		t.Fatalf("rebuild of a missing topic into a database: exit %d, want %d", r.code, exitUnavailable)
	}
	want, _, _ := oracle(recs, nil)
	checkTable(t, want, scanTable(t, fresh, topic))
}

func names(ents []fs.DirEntry) []string {
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestHintsUseUserValues: a hint with a placeholder for the database or
// the topic shows the user's own.
func TestHintsUseUserValues(t *testing.T) {
	topic := newTopic(t, 1)
	produce(t, topic, genRecords(newRand(t), []int32{0}, 20))
	db := dbPath(t)
	mustCLI(t, 0, rebuildArgs(topic, db)...)
	r := kmz(t, "get", "--db", db, "--table", "nosuch", "k")
	if r.code != exitNotFound || !strings.Contains(r.stderr, "Try: kmaterialize tables --db "+db+"\n") {
		t.Fatalf("get of a missing table: exit %d, want %d and a hint with --db %s:\n%s", r.code, exitNotFound, db, r.stderr)
	}
	missing := runName(t) + "-missing"
	r = kmz(t, "describe", "--brokers", broker.Addr, "--topic", missing)
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "Try: kmaterialize describe --brokers "+broker.Addr+" --topic "+missing) {
		t.Fatalf("describe of a missing topic: exit %d, want %d and a hint with the user's brokers and topic:\n%s", r.code, exitUnavailable, r.stderr)
	}
}

// TestPersonalHint: placeholders are replaced by values from the command
// line (any spelling of the flag) or the environment, never by a value a
// hint could not quote.
func TestPersonalHint(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		hint string
		args []string
		env  map[string]string
		want string
	}{
		{"kmaterialize tables --db PATH", []string{"get", "--db", "/d/t.db", "k"}, nil, "kmaterialize tables --db /d/t.db"},
		{"kmaterialize tables --db PATH", []string{"get", "--db=/d/t.db"}, nil, "kmaterialize tables --db /d/t.db"},
		{"kmaterialize tables --db PATH", []string{"get", "-db", "/d/t.db"}, nil, "kmaterialize tables --db /d/t.db"},
		{"kmaterialize tables --db PATH", []string{"get"}, map[string]string{"KMATERIALIZE_DB": "/e.db"}, "kmaterialize tables --db /e.db"},
		{"kmaterialize tables --db PATH", []string{"get"}, nil, "kmaterialize tables --db PATH"},
		{"describe --brokers HOST:PORT --topic TOPIC", []string{"rebuild", "-b", "k:9092", "-t", "orders"}, nil, "describe --brokers k:9092 --topic orders"},
		{"kmaterialize tables --db PATH", []string{"get", "--db", "/my dir/t.db"}, nil, "kmaterialize tables --db PATH"},
		{"kmaterialize tables --db PATH", []string{"get", "--", "--db", "/d.db"}, nil, "kmaterialize tables --db PATH"},
	} {
		if got := personalHint(tc.hint, tc.args, env(tc.env)); got != tc.want {
			t.Errorf("personalHint(%q, %q) = %q, want %q", tc.hint, tc.args, got, tc.want)
		}
	}
}

// TestServeCheckConfig: serve --check-config exits 0 for a config serve
// would start with (printing its tables) and 2 naming the file and line
// for one it would refuse, opening no database and no socket; with
// --check-kafka it also finds each table's topic on the broker (0) or
// names the missing one (5).
func TestServeCheckConfig(t *testing.T) {
	dir := t.TempDir()
	topic := newTopic(t, 3)
	write := func(name, doc string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	head := fmt.Sprintf("db: data.db\nkafka:\n  brokers: %s\ntables:\n", broker.Addr)
	ok := write("ok.yaml", head+"  - name: balances\n    topic: "+topic+"\n    schedule: \"@every 10m\"\n")
	r := mustCLI(t, 0, "serve", "--check-config", ok)
	if !strings.Contains(r.stdout, "config "+ok+": ok") || !strings.Contains(r.stdout, "table balances: topic "+topic+", fold latest, schedule @every 10m") {
		t.Fatalf("check of a good config printed:\n%s", r.stdout)
	}
	r = mustCLI(t, 0, "serve", "--check-config", ok, "--check-kafka")
	if !strings.Contains(r.stdout, "topic "+topic+": 3 partition(s)") {
		t.Fatalf("--check-kafka of a good config printed:\n%s", r.stdout)
	}

	for _, tc := range []struct{ name, doc, want string }{
		{"field.yaml", head + "  - name: a\n    topic: t\n    scheduel: \"@every 1m\"\n", `:7: unknown field "scheduel"; did you mean "schedule"?`},
		{"value.yaml", head + "  - name: a\n    topic: t\n    fold: sum\n", `:7: tables[0].fold`},
		{"unit.yaml", head + "  - name: a\n    topic: t\n    stall_timeout: 30\n", `:7: tables[0].stall_timeout: "30": a duration needs a unit: use 30s`},
		{"nodb.yaml", "kafka:\n  brokers: x:1\n", `: db: required by serve`},
	} {
		p := write(tc.name, tc.doc)
		r := kmz(t, "serve", "--check-config", p)
		if r.code != exitUsage || !strings.Contains(r.stderr, "config "+p+tc.want) || r.stdout != "" {
			t.Errorf("check of %s: exit %d, want %d and %q in:\n%s", tc.name, r.code, exitUsage, "config "+p+tc.want, r.stderr)
		}
	}

	missing := runName(t) + "-missing"
	bad := write("missing.yaml", head+"  - name: balances\n    topic: "+topic+"\n  - name: gone\n    topic: "+missing+"\n")
	r = kmz(t, "serve", "--check-config", bad, "--check-kafka")
	if r.code != exitUnavailable || !strings.Contains(r.stderr, fmt.Sprintf("config %s:7: table %q: topic %q", bad, "gone", missing)) {
		t.Fatalf("--check-kafka with a missing topic: exit %d, want %d naming the table's line and topic:\n%s", r.code, exitUnavailable, r.stderr)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 6 {
		t.Fatalf("the checks left files beside the configs: %v", names(ents))
	}
	if r := kmz(t, "serve", "--config", ok, "--check-kafka"); r.code != exitUsage || !strings.Contains(r.stderr, "--check-kafka goes with --check-config") {
		t.Fatalf("--check-kafka without --check-config: exit %d", r.code)
	}
}
