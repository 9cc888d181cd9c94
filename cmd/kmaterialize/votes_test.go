package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	votes "github.com/kmaterialize/kmaterialize/internal/scenario"
)

// countArgs are the count-fold flags of a scenario: the same program and
// flags for every scenario, apart from topic, table and catalog.
func countArgs(s *votes.Scenario, table string) []string {
	args := []string{"--table", table, "--fold", "count", "--identity-field", s.IdentityField,
		"--group-field", s.GroupField, "--catalog", s.CatalogPath}
	for _, f := range s.IgnoreFields {
		args = append(args, "--ignore-field", f)
	}
	return args
}

func loadScenario(t *testing.T, name string) *votes.Scenario {
	t.Helper()
	s, err := votes.Load("../../testdata", name)
	if err != nil {
		t.Fatal(err)
	}
	// A topic of this run's own; the expected messages name it.
	own := runName(t) + "-" + s.Topic
	s.Expected.Error = strings.ReplaceAll(s.Expected.Error, s.Topic, own)
	s.Topic = own
	if _, err := s.Build(context.Background(), broker, ""); err != nil {
		t.Fatal(err)
	}
	return s
}

func scanRows(t *testing.T, db, table string) map[string]string {
	t.Helper()
	r := mustCLI(t, 0, "scan", "--db", db, "--table", table)
	rows := map[string]string{}
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("scan output is not a JSON object: %v\n%s", err, r.stdout)
	}
	return rows
}

func TestCountTablesCLI(t *testing.T) {
	db := dbPath(t)
	out := filepath.Join(t.TempDir(), "studio-votes.json")
	main := loadScenario(t, "main")
	mustCLI(t, 0, append(rebuildArgs(main.Topic, db), countArgs(main, "studio-votes")...)...)
	if diff := cmp.Diff(main.Expected.Rows, scanRows(t, db, "studio-votes")); diff != "" {
		t.Fatalf("main (-want +got):\n%s", diff)
	}
	tables := mustCLI(t, 0, "tables", "--db", db).stdout
	for _, s := range []string{"records read:", "logical events:", "duplicates folded:"} {
		if !strings.Contains(tables, s) {
			t.Fatalf("tables output lacks %q:\n%s", s, tables)
		}
	}
	mustCLI(t, 0, "export", "--db", db, "--table", "studio-votes", "--out", out)
	first, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Fold   string            `json:"fold"`
		Rows   map[string]string `json:"rows"`
		Totals map[string]int64  `json:"totals"`
	}
	if err := json.Unmarshal(first, &doc); err != nil {
		t.Fatalf("export is not JSON: %v", err)
	}
	if doc.Fold != "count" || doc.Totals["records_read"] != 8 || doc.Totals["logical_events"] != 5 {
		t.Fatalf("export header: %+v", doc)
	}
	if diff := cmp.Diff(main.Expected.Rows, doc.Rows); diff != "" {
		t.Fatalf("export rows (-want +got):\n%s", diff)
	}

	// Repeat: byte-identical export (stdout this time), same rows.
	mustCLI(t, 0, append(rebuildArgs(main.Topic, db), countArgs(main, "studio-votes")...)...)
	again := mustCLI(t, 0, "export", "--db", db, "--table", "studio-votes").stdout
	if sha256.Sum256(first) != sha256.Sum256([]byte(again)) {
		t.Fatalf("exports of the same frozen batch differ:\n%s\n---\n%s", first, again)
	}

	// check: another topic, same program and flags.
	check := loadScenario(t, "check")
	mustCLI(t, 0, append(rebuildArgs(check.Topic, db), countArgs(check, "check-votes")...)...)
	if diff := cmp.Diff(check.Expected.Rows, scanRows(t, db, "check-votes")); diff != "" {
		t.Fatalf("check (-want +got):\n%s", diff)
	}

	// conflict and data errors into the main table: exit 3, nothing changes.
	tablesBefore := mustCLI(t, 0, "tables", "--db", db, "--format", "json").stdout
	for _, name := range []string{"conflict", "malformed", "missing-field", "unknown-group"} {
		s := loadScenario(t, name)
		r := mustCLI(t, 3, append(rebuildArgs(s.Topic, db), countArgs(s, "studio-votes")...)...)
		if !strings.Contains(r.stderr, s.Expected.Error) {
			t.Fatalf("%s: stderr lacks %q:\n%s", name, s.Expected.Error, r.stderr)
		}
		if got := mustCLI(t, 0, "tables", "--db", db, "--format", "json").stdout; got != tablesBefore {
			t.Fatalf("%s: tables changed:\n%s\n---\n%s", name, tablesBefore, got)
		}
		if got := mustCLI(t, 0, "export", "--db", db, "--table", "studio-votes").stdout; got != string(first) {
			t.Fatalf("%s: the main export changed", name)
		}
	}

	// export --out on an error leaves the previous file untouched.
	mustCLI(t, 6, "export", "--db", db, "--table", "no-such-table", "--out", out)
	if b, _ := os.ReadFile(out); string(b) != string(first) {
		t.Fatal("a failed export changed the previous file")
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".*tmp*")); len(left) != 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}

	// Flag errors are usage errors.
	mustCLI(t, 2, append(rebuildArgs(main.Topic, db), "--fold", "count", "--group-field", "booth")...)
	mustCLI(t, 2, append(rebuildArgs(main.Topic, db), append(countArgs(main, "x"), "--catalog", "/nonexistent.json")...)...)
	mustCLI(t, 2, append(rebuildArgs(main.Topic, db), "--identity-field", "event_id")...)
}
