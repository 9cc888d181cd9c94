package main

// The examples in contrib/examples run against a daemon: the Python one
// (standard library only) and the Go one (the client package) list the
// tables, get a key and page through the rows; curl.sh does the same and
// rebuilds. Each one's output is compared with the oracle fold of the
// records produced.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// exampleRig is a daemon serving one table of records with repeated keys
// and a tombstone, and the table's oracle.
func exampleRig(t *testing.T) (*daemonRig, map[string]string) {
	t.Helper()
	topic := newTopic(t, 2)
	// A key lives in one partition: the latest fold orders records per partition.
	var recs []localkafka.Record
	for i := 0; i < 40; i++ {
		recs = append(recs, localkafka.Record{Partition: int32(i % 11 % 2), Key: []byte(fmt.Sprintf("acct-%02d", i%11)), Value: []byte(fmt.Sprintf("balance %d", i))})
	}
	recs = append(recs, localkafka.Record{Partition: 1, Key: []byte("acct-03")}) // a tombstone
	want, _, _ := oracle(produce(t, topic, recs), nil)
	r := newDaemonRig(t, topic, "")
	r.start(t)
	return r, want
}

// exampleOutput is what the Python and Go examples print, parsed.
type exampleOutput struct {
	tables []string
	get    string
	rows   map[string]string
}

func parseExampleOutput(t *testing.T, out string) exampleOutput {
	t.Helper()
	o := exampleOutput{rows: map[string]string{}}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		kind, rest, _ := strings.Cut(line, " ")
		switch kind {
		case "table":
			o.tables = append(o.tables, rest)
		case "get":
			o.get = rest
		case "row":
			k, v, ok := strings.Cut(rest, "\t")
			if !ok {
				t.Fatalf("row line %q: no tab", line)
			}
			if _, dup := o.rows[k]; dup {
				t.Fatalf("row %q printed twice: paging repeated it", k)
			}
			o.rows[k] = v
		default:
			t.Fatalf("unexpected line %q in:\n%s", line, out)
		}
	}
	return o
}

// checkExample compares an example's output with the oracle.
func checkExample(t *testing.T, name, out string, r *daemonRig, want map[string]string) {
	t.Helper()
	o := parseExampleOutput(t, out)
	if diff := cmp.Diff([]string{r.table + " ready"}, o.tables); diff != "" {
		t.Errorf("%s: tables (-want +got):\n%s", name, diff)
	}
	if o.get != "acct-05 "+want["acct-05"] {
		t.Errorf("%s: get printed %q, want %q", name, o.get, "acct-05 "+want["acct-05"])
	}
	if diff := cmp.Diff(want, o.rows); diff != "" {
		t.Errorf("%s: rows differ from the oracle (-want +got):\n%s", name, diff)
	}
}

func runExample(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\nstderr:\n%s", strings.Join(cmd.Args, " "), err, stderr.String())
	}
	return string(out)
}

// need returns the path of a program the examples need, failing the test
// when the machine lacks it: CI must have it (.ci/run).
func need(t *testing.T, prog string) string {
	t.Helper()
	path, err := exec.LookPath(prog)
	if err != nil {
		t.Fatalf("%s is not on PATH: the contrib/examples tests need it (install it; .ci/run checks for it)", prog)
	}
	return path
}

func TestExamplePython(t *testing.T) {
	py := need(t, "python3")
	r, want := exampleRig(t)
	out := runExample(t, exec.Command(py, filepath.Join("..", "..", "contrib", "examples", "python", "kmaterialize_example.py"), r.sock, r.table, "acct-05"))
	checkExample(t, "python", out, r, want)
}

func TestExampleGo(t *testing.T) {
	r, want := exampleRig(t)
	bin := filepath.Join(t.TempDir(), "example")
	build := exec.Command("go", "build", "-o", bin, "../../contrib/examples/go")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build contrib/examples/go: %v\n%s", err, out)
	}
	out := runExample(t, exec.Command(bin, r.sock, r.table, "acct-05"))
	checkExample(t, "go", out, r, want)
}

// TestExampleCurl: curl.sh's pages together are the oracle's rows, its get
// the oracle's value, and its rebuild publishes a new generation.
func TestExampleCurl(t *testing.T) {
	need(t, "curl")
	r, want := exampleRig(t)
	gen := *r.status(t).Generation
	out := runExample(t, exec.Command("bash", filepath.Join("..", "..", "contrib", "examples", "curl.sh"), r.sock, r.table, "acct-05"))
	sections := map[string][]string{}
	var cur string
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if strings.HasPrefix(line, "# ") {
			cur = strings.Fields(line)[1]
			continue
		}
		sections[cur] = append(sections[cur], line)
	}
	var list struct {
		Tables []struct{ Name string }
	}
	if len(sections["tables"]) != 1 || json.Unmarshal([]byte(sections["tables"][0]), &list) != nil || len(list.Tables) != 1 || list.Tables[0].Name != r.table {
		t.Errorf("tables section %q", sections["tables"])
	}
	if got := sections["get"]; len(got) != 1 || got[0] != want["acct-05"] {
		t.Errorf("get section %q, want %q", got, want["acct-05"])
	}
	rows := map[string]string{}
	for _, line := range sections["rows"] {
		var row struct{ Key, Value string }
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("rows line %q: %v", line, err)
		}
		rows[row.Key] = row.Value
	}
	if len(rows) != len(sections["rows"]) {
		t.Errorf("rows printed %d lines for %d keys: paging repeated a row", len(sections["rows"]), len(rows))
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("curl.sh rows differ from the oracle (-want +got):\n%s", diff)
	}
	var rb struct {
		ExitCode   int     `json:"exit_code"`
		Generation *uint64 `json:"generation"`
	}
	if len(sections["rebuild"]) != 1 || json.Unmarshal([]byte(sections["rebuild"][0]), &rb) != nil || rb.ExitCode != 0 || rb.Generation == nil || *rb.Generation <= gen {
		t.Errorf("rebuild section %q: want exit_code 0 and a generation after %d", sections["rebuild"], gen)
	}
	r.checkServed(t, want, *rb.Generation, 41)
}
