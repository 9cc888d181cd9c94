package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// configRig is a config file with a latest table (balances) over a topic
// of random records and a count table (votes) over the "main" votes
// scenario, its catalog beside the file under a relative path, its
// database relative to the file's directory.
type configRig struct {
	path, dir, db string
	topic         string
	recs          []rec
	votes         *votesScenario
}

type votesScenario struct {
	topic, catalog string
	args           []string // the equivalent count flags, without --table
	rows           map[string]string
}

func newConfigRig(t *testing.T, extra string) *configRig {
	t.Helper()
	r := &configRig{dir: t.TempDir()}
	r.topic = newTopic(t, 3)
	r.recs = produce(t, r.topic, genRecords(newRand(t), []int32{0, 1, 2}, 400))
	s := loadScenario(t, "main")
	cat, err := os.ReadFile(s.CatalogPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(r.dir, "cat"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "cat", "booths.json"), cat, 0o644); err != nil {
		t.Fatal(err)
	}
	r.votes = &votesScenario{topic: s.Topic, rows: s.Expected.Rows}
	r.votes.args = countArgs(s, "votes")[2:]
	ignore := ""
	if len(s.IgnoreFields) > 0 {
		ignore = "\n    ignore_fields: [" + strings.Join(s.IgnoreFields, ", ") + "]"
	}
	r.db = filepath.Join(r.dir, "data", "tables.db")
	if err := os.MkdirAll(filepath.Dir(r.db), 0o755); err != nil {
		t.Fatal(err)
	}
	doc := fmt.Sprintf(`db: data/tables.db
kafka:
  brokers: %s
tables:
  - name: balances
    topic: %s
    stall_timeout: 20s
  - name: votes
    topic: %s
    fold: count
    identity_field: %s
    group_field: %s%s
    catalog: cat/booths.json
%s`, broker.Addr, r.topic, s.Topic, s.IdentityField, s.GroupField, ignore, extra)
	r.path = filepath.Join(r.dir, "kmaterialize.yaml")
	if err := os.WriteFile(r.path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

func exportBytes(t *testing.T, db, table string) string {
	t.Helper()
	return mustCLI(t, 0, "export", "--db", db, "--table", table).stdout
}

// TestRebuildFromConfig rebuilds both tables of a config file with only
// --config and --table, and checks each against its oracle and, byte for
// byte (export), against the same table built with the equivalent flags.
func TestRebuildFromConfig(t *testing.T) {
	r := newConfigRig(t, "")
	mustCLI(t, 0, "rebuild", "--config", r.path, "--table", "balances")
	want, _, _ := oracle(r.recs, nil)
	checkTable(t, want, scanTable(t, r.db, "balances"))

	mustCLI(t, 0, "rebuild", "--config", r.path, "--table", "votes")
	if diff := cmp.Diff(r.votes.rows, scanRows(t, r.db, "votes")); diff != "" {
		t.Fatalf("votes (-want +got):\n%s", diff)
	}

	flags := dbPath(t)
	mustCLI(t, 0, rebuildArgs(r.topic, flags, "--table", "balances")...)
	catalog := filepath.Join(r.dir, "cat", "booths.json")
	args := append(rebuildArgs(r.votes.topic, flags, "--table", "votes"), r.votes.args...)
	for i, a := range args {
		if a == "--catalog" {
			args[i+1] = catalog
		}
	}
	mustCLI(t, 0, args...)
	for _, table := range []string{"balances", "votes"} {
		if diff := cmp.Diff(exportBytes(t, flags, table), exportBytes(t, r.db, table)); diff != "" {
			t.Fatalf("export of %s (-flags +config):\n%s", table, diff)
		}
	}
	// The query commands take the database from the file too.
	for k, v := range want {
		if got := mustCLI(t, 0, "get", "--config", r.path, "--table", "balances", k).stdout; got != v+"\n" {
			t.Fatalf("get --config %s: %q, want %q", k, got, v)
		}
		break
	}
	tabs := mustCLI(t, 0, "tables", "--config", r.path, "--format", "json").stdout
	if !strings.Contains(tabs, `"balances"`) || !strings.Contains(tabs, `"votes"`) {
		t.Fatalf("tables --config: %s", tabs)
	}
	// describe takes the brokers from the file.
	d := mustCLI(t, 0, "describe", "--config", r.path, "--topic", r.topic, "--format", "json").stdout
	if !strings.Contains(d, r.topic) {
		t.Fatalf("describe --config: %s", d)
	}
}

// TestConfigFlagsWin checks that flags given with --config replace the
// file's values: the database, the topic, the end mark and the fold (whose
// file fields are then dropped).
func TestConfigFlagsWin(t *testing.T) {
	r := newConfigRig(t, "")
	other := dbPath(t)
	topic2 := newTopic(t, 2)
	recs2 := produce(t, topic2, genRecords(newRand(t), []int32{0, 1}, 200))
	mustCLI(t, 0, "rebuild", "--config", r.path, "--table", "balances", "--db", other, "--topic", topic2, "--end", "stable")
	want, _, _ := oracle(recs2, nil)
	checkTable(t, want, scanTable(t, other, "balances"))
	tb := tablesJSON(t, other)["balances"]
	if tb.Topic != topic2 || tb.EndMark != "stable" || tb.Fold != "latest" {
		t.Fatalf("table %+v: want topic %s, end stable, fold latest", tb, topic2)
	}
	if _, err := os.Stat(r.db); !os.IsNotExist(err) {
		t.Fatalf("the config's database was created though --db was given (%v)", err)
	}

	// --fold latest over the file's count table: the file's count fields
	// go with its fold, and the table is the latest fold of the topic.
	mustCLI(t, 0, "rebuild", "--config", r.path, "--table", "votes", "--db", other, "--fold", "latest")
	if tb := tablesJSON(t, other)["votes"]; tb.Fold != "latest" || tb.Topic != r.votes.topic {
		t.Fatalf("votes %+v: want fold latest from topic %s", tb, r.votes.topic)
	}
	// A count-only flag over a latest table from the file is refused as
	// on the command line alone.
	res := mustCLI(t, exitUsage, "rebuild", "--config", r.path, "--table", "balances", "--db", other, "--identity-field", "id")
	if !strings.Contains(res.stderr, "--identity-field applies to --fold count only") {
		t.Fatalf("stderr: %s", res.stderr)
	}
	// -X wins over the file's property of the same name: an invalid value
	// given by flag is the one refused.
	res = mustCLI(t, exitUsage, "rebuild", "--config", r.path, "--table", "balances", "-X", "fetch.wait.max.ms=notanumber")
	if !strings.Contains(res.stderr, "fetch.wait.max.ms") {
		t.Fatalf("stderr: %s", res.stderr)
	}
}

// TestConfigUsageErrors checks exit 2, before any work, for a table the
// file does not define (naming those it does), a config that does not
// load (naming the line), and a rebuild without --table; and that a
// secret property's value is never printed.
func TestConfigUsageErrors(t *testing.T) {
	r := newConfigRig(t, "")
	res := mustCLI(t, exitUsage, "rebuild", "--config", r.path, "--table", "balance")
	for _, s := range []string{`"balance"`, "balances, votes", "Try:"} {
		if !strings.Contains(res.stderr, s) {
			t.Fatalf("stderr lacks %q:\n%s", s, res.stderr)
		}
	}
	res = mustCLI(t, exitUsage, "rebuild", "--config", r.path)
	if !strings.Contains(res.stderr, "--table") || !strings.Contains(res.stderr, "balances, votes") {
		t.Fatalf("stderr: %s", res.stderr)
	}
	// A --table the file lacks, defined by --topic: the file gives only
	// the connection and the database.
	mustCLI(t, 0, "rebuild", "--config", r.path, "--table", "extra", "--topic", r.topic)
	want, _, _ := oracle(r.recs, nil)
	checkTable(t, want, scanTable(t, r.db, "extra"))

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("db: x.db\ntables:\n  - name: a\n    topic: t\n    fold: sum\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"rebuild", "--table", "a"}, {"get", "--table", "a", "k"}, {"check"}} {
		res := mustCLI(t, exitUsage, append([]string{cmd[0], "--config", bad}, cmd[1:]...)...)
		if !strings.Contains(res.stderr, bad+":5:") || !strings.Contains(res.stderr, "latest or count") {
			t.Fatalf("%v: stderr: %s", cmd, res.stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(bad), "x.db")); !os.IsNotExist(err) {
		t.Fatalf("a bad config created its database (%v)", err)
	}

	const secret = "pw-93e1d0c7"
	leaky := newConfigRig(t, "")
	doc, err := os.ReadFile(leaky.path)
	if err != nil {
		t.Fatal(err)
	}
	doc = bytes.Replace(doc, []byte("  brokers:"), []byte("  properties:\n    sasl.passwordd: "+secret+"\n  brokers:"), 1)
	if err := os.WriteFile(leaky.path, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	res = mustCLI(t, exitUsage, "rebuild", "--config", leaky.path, "--table", "balances")
	if !strings.Contains(res.stderr, "sasl.passwordd") || strings.Contains(res.stdout+res.stderr, secret) {
		t.Fatalf("want the property named and its value hidden:\n%s", res.stderr)
	}
}

// TestConfigFromEnvironment runs the binary with KMATERIALIZE_CONFIG and
// no --config: rebuild and get take everything from the file.
func TestConfigFromEnvironment(t *testing.T) {
	r := newConfigRig(t, "")
	runEnv := func(args ...string) (string, string, int) {
		cmd := exec.Command(binPath, args...)
		cmd.Env = append(os.Environ(), configEnv+"="+r.path)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		t.Logf("$ %s=%s kmaterialize %s -> %d\n%s", configEnv, r.path, strings.Join(args, " "), code, errb.String())
		return out.String(), errb.String(), code
	}
	if _, stderr, code := runEnv("rebuild", "--table", "balances"); code != 0 {
		t.Fatalf("rebuild: exit %d\n%s", code, stderr)
	}
	want, _, _ := oracle(r.recs, nil)
	checkTable(t, want, scanTable(t, r.db, "balances"))
	n := 0
	for k, v := range want {
		if out, _, code := runEnv("get", "--table", "balances", k); code != 0 || out != v+"\n" {
			t.Fatalf("get %s: exit %d, %q, want %q", k, code, out, v)
		}
		if n++; n == 3 {
			break
		}
	}
	if _, stderr, code := runEnv("rebuild", "--table", "nope"); code != exitUsage || !strings.Contains(stderr, "balances, votes") {
		t.Fatalf("unknown table: exit %d\n%s", code, stderr)
	}
}
