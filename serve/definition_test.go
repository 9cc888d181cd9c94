package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/store"
)

// spacedRecords returns n records over keys j00..j(keys-1) whose values
// are JSON objects written with insignificant whitespace (their keys in
// sorted order), every ninth a tombstone.
func spacedRecords(round, n, keys int) []localkafka.Record {
	recs := make([]localkafka.Record, n)
	for i := range recs {
		k := []byte(fmt.Sprintf("j%02d", (i*3+round)%keys))
		var v []byte
		if i%9 != 4 {
			v = []byte(fmt.Sprintf(`{ "n" :  %d ,	"r" : "r%d" }`, i, round))
		}
		recs[i] = localkafka.Record{Key: k, Value: v}
	}
	return recs
}

// compacted is o with every value as encoding/json's Compact writes it:
// what value_format json stores for a JSON object whose keys are sorted.
func compacted(t *testing.T, o oracle) oracle {
	t.Helper()
	out := oracle{}
	for k, v := range o {
		var b bytes.Buffer
		if err := json.Compact(&b, []byte(v)); err != nil {
			t.Fatalf("oracle value %q: %v", v, err)
		}
		out[k] = b.String()
	}
	return out
}

// specTable is the table spec defines, built as the daemon's config
// builds it (Spec.Options, materialize.Rebuild). A build waits for gate,
// when it is not nil, before it starts: the test then sees the daemon's
// state while the run is going.
func specTable(spec materialize.Spec, gate <-chan struct{}) Table {
	return Table{
		Name: spec.Name, Topic: spec.Topic, Fold: spec.Fold, Spec: &spec,
		Build: func(ctx context.Context, db *store.DB, log zerolog.Logger) (materialize.Report, error) {
			if gate != nil {
				select {
				case <-gate:
				case <-ctx.Done():
					return materialize.Report{}, ctx.Err()
				}
			}
			opts, err := spec.Options(db, broker.Addr, nil, log)
			if err != nil {
				return materialize.Report{}, err
			}
			return materialize.Rebuild(ctx, opts)
		},
	}
}

// testUpdate is the daemon's update as cmd/kmaterialize wires it.
func testUpdate(ctx context.Context, db *store.DB, table string, rebuildIfNeeded bool, log zerolog.Logger) (materialize.Report, error) {
	return materialize.Update(ctx, materialize.UpdateOptions{DB: db, Table: table, Brokers: broker.Addr, RebuildIfNeeded: rebuildIfNeeded, Log: log})
}

// checkDefinition asserts GET's definition of table.
func checkDefinition(t *testing.T, tj tableJSON, changed bool, fields ...string) {
	t.Helper()
	if fields == nil {
		fields = []string{}
	}
	want := &definitionJSON{Changed: changed, Fields: fields}
	if diff := cmp.Diff(want, tj.Definition); diff != "" {
		t.Fatalf("table %s: definition (-want +got):\n%s", tj.Name, diff)
	}
}

// checkRows asserts that table's rows through the API are want.
func checkRows(t *testing.T, c *client, table, what string, want oracle) {
	t.Helper()
	got, _, ok := c.scan(t, table, 7)
	if !ok {
		t.Fatalf("%s: a publish during the scan", what)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%s: rows differ from the oracle (-oracle +table):\n%s", what, diff)
	}
}

// awaitDefinitionRun waits until table has a run going that the changed
// definition started, and returns the table then.
func awaitDefinitionRun(t *testing.T, c *client, table string) tableJSON {
	t.Helper()
	var tj tableJSON
	// It starts once the run going has ended: a rebuild, bounded like the
	// other rebuilds here (on Kafka, with the machine loaded, the requested
	// run of 30 records once took longer than 30 s).
	deadline := time.Now().Add(60 * time.Second)
	for {
		tj = c.table(t, table)
		if tj.Run != nil && tj.Run.Trigger == triggerDefinition {
			return tj
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 60s waiting for a rebuild started by the changed definition; table %s", c.get(t, "/v1/tables/"+table).body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkUpdateRefused asserts that POST update of table is 409
// definition_changed naming fields.
func checkUpdateRefused(t *testing.T, c *client, table string, field string) {
	t.Helper()
	r := c.do(t, "POST", "/v1/tables/"+table+"/update", nil)
	if r.status != http.StatusConflict {
		t.Fatalf("POST update while the definition differs: %d %s, want 409", r.status, r.body)
	}
	if e := r.apiErr(t); e.Code != api.CodeDefinitionChanged || !bytes.Contains([]byte(e.Error), []byte(field)) {
		t.Fatalf("POST update: %+v, want code %s naming %s", e, api.CodeDefinitionChanged, field)
	}
}

// checkUpdated runs POST update and asserts it published.
func checkUpdated(t *testing.T, c *client, table string) {
	t.Helper()
	r := c.do(t, "POST", "/v1/tables/"+table+"/update", nil)
	var res updateResult
	if r.status != http.StatusOK || json.Unmarshal(r.body, &res) != nil || res.ExitCode != 0 || res.Error != nil {
		t.Fatalf("POST update: %d %s, want 200 with exit_code 0", r.status, r.body)
	}
}

// TestDefinitionChangedOnReload: a table that is not followed, built raw,
// is reloaded with value_format json. The daemon starts a rebuild by the
// new definition (trigger definition); while it runs, GET says
// definition changed in value_format, POST update is 409
// definition_changed and the raw table is served. Once it publishes, the
// rows are the canonical JSON of the oracle, the definition agrees, and
// updates go by the new definition. A change of the other options (here
// stall_timeout, keep) starts no rebuild.
func TestDefinitionChangedOnReload(t *testing.T) {
	topic := newTopic(t)
	first := spacedRecords(1, 40, 12)
	produce(t, topic, first)
	raw := materialize.Spec{Name: "docs", Topic: topic, StallTimeout: 20 * time.Second}
	cfg := baseConfig(t, specTable(raw, nil))
	cfg.Update = testUpdate
	d := start(t, cfg)
	waitFor(t, "the first build", 30*time.Second, func() bool { tj := d.c.table(t, "docs"); return tj.State == StateReady })
	tj := d.c.table(t, "docs")
	checkDefinition(t, tj, false)
	rawOracle := latestOracle(nil, first)
	checkRows(t, d.c, "docs", "built raw", rawOracle)
	gen := *tj.Generation

	// Options that are not the definition: no rebuild.
	other := raw
	other.StallTimeout, other.Keep = 30*time.Second, 1
	if err := d.s.SetTables([]Table{specTable(other, nil)}); err != nil {
		t.Fatal(err)
	}
	tj = d.c.table(t, "docs")
	if tj.Run != nil || *tj.Generation != gen {
		t.Fatalf("a change of stall_timeout and keep started a run or published: run %+v, generation %d (was %d)", tj.Run, *tj.Generation, gen)
	}
	checkDefinition(t, tj, false)

	gate := make(chan struct{})
	js := raw
	js.ValueFormat = decode.JSON
	if err := d.s.SetTables([]Table{specTable(js, gate)}); err != nil {
		t.Fatal(err)
	}
	tj = awaitDefinitionRun(t, d.c, "docs")
	if tj.State != StateRebuilding || *tj.Generation != gen {
		t.Fatalf("while rebuilding by the new definition: state %s generation %d, want %s, %d", tj.State, *tj.Generation, StateRebuilding, gen)
	}
	checkDefinition(t, tj, true, "value_format")
	checkUpdateRefused(t, d.c, "docs", "value_format")
	checkRows(t, d.c, "docs", "while rebuilding", rawOracle)

	close(gate)
	waitFor(t, "the rebuild by the new definition to publish", 60*time.Second, func() bool {
		tj = d.c.table(t, "docs")
		return tj.Run == nil && tj.Generation != nil && *tj.Generation > gen
	})
	if tj.State != StateReady || tj.LastError != nil {
		t.Fatalf("after the rebuild: state %s, last_error %+v", tj.State, tj.LastError)
	}
	checkDefinition(t, tj, false)
	checkRows(t, d.c, "docs", "rebuilt by value_format json", compacted(t, rawOracle))

	// The update reads on by the stored definition, now json.
	second := spacedRecords(2, 25, 12)
	produce(t, topic, second)
	checkUpdated(t, d.c, "docs")
	checkRows(t, d.c, "docs", "updated", compacted(t, latestOracle(rawOracle, second)))
}

// TestDefinitionChangedWhileStopped: the config is edited while the daemon
// is stopped. At the next start the published table, whose stored
// definition is raw, is rebuilt by value_format json, the raw table served
// meanwhile and updates refused.
func TestDefinitionChangedWhileStopped(t *testing.T) {
	topic := newTopic(t)
	recs := spacedRecords(3, 30, 9)
	produce(t, topic, recs)
	raw := materialize.Spec{Name: "docs", Topic: topic, StallTimeout: 20 * time.Second}
	cfg := baseConfig(t, specTable(raw, nil))
	cfg.Update = testUpdate
	d := start(t, cfg)
	waitFor(t, "the first build", 30*time.Second, func() bool { return d.c.table(t, "docs").State == StateReady })
	gen := *d.c.table(t, "docs").Generation
	d.stop(t)

	gate := make(chan struct{})
	js := raw
	js.ValueFormat = decode.JSON
	cfg.Tables = []Table{specTable(js, gate)}
	d = start(t, cfg)
	tj := awaitDefinitionRun(t, d.c, "docs")
	if tj.State != StateRebuilding || *tj.Generation != gen {
		t.Fatalf("at start: state %s generation %d, want %s, %d", tj.State, *tj.Generation, StateRebuilding, gen)
	}
	checkDefinition(t, tj, true, "value_format")
	checkUpdateRefused(t, d.c, "docs", "value_format")
	rawOracle := latestOracle(nil, recs)
	checkRows(t, d.c, "docs", "served while rebuilding", rawOracle)
	close(gate)
	waitFor(t, "the rebuild by the new definition to publish", 60*time.Second, func() bool {
		tj = d.c.table(t, "docs")
		return tj.Run == nil && *tj.Generation > gen
	})
	checkDefinition(t, tj, false)
	checkRows(t, d.c, "docs", "rebuilt by value_format json", compacted(t, rawOracle))
}

// TestDefinitionChangedDuringRun: the config changes while a requested
// rebuild by the old definition is going. That run publishes raw; when it
// ends the definitions are compared again and a rebuild by the new one
// (trigger definition) publishes the canonical table.
func TestDefinitionChangedDuringRun(t *testing.T) {
	topic := newTopic(t)
	recs := spacedRecords(4, 30, 10)
	produce(t, topic, recs)
	rawGate := make(chan struct{}, 2)
	rawGate <- struct{}{} // the first build
	raw := materialize.Spec{Name: "docs", Topic: topic, StallTimeout: 20 * time.Second}
	d := start(t, baseConfig(t, specTable(raw, rawGate)))
	waitFor(t, "the first build", 30*time.Second, func() bool { return d.c.table(t, "docs").State == StateReady })
	gen := *d.c.table(t, "docs").Generation

	if r := d.c.do(t, "POST", "/v1/tables/docs/rebuild", nil); r.status != http.StatusAccepted {
		t.Fatalf("POST rebuild: %d %s", r.status, r.body)
	}
	jsGate := make(chan struct{})
	js := raw
	js.ValueFormat = decode.JSON
	if err := d.s.SetTables([]Table{specTable(js, jsGate)}); err != nil {
		t.Fatal(err)
	}
	tj := d.c.table(t, "docs")
	if tj.Run == nil || tj.Run.Trigger != triggerRequest {
		t.Fatalf("after the reload: run %+v, want the requested run still going", tj.Run)
	}
	checkDefinition(t, tj, true, "value_format")

	rawGate <- struct{}{} // the requested run, by the old definition
	tj = awaitDefinitionRun(t, d.c, "docs")
	if *tj.Generation != gen+1 {
		t.Fatalf("the requested run published generation %d, want %d", *tj.Generation, gen+1)
	}
	rawOracle := latestOracle(nil, recs)
	checkRows(t, d.c, "docs", "published by the requested run", rawOracle)
	checkDefinition(t, tj, true, "value_format")
	close(jsGate)
	waitFor(t, "the rebuild by the new definition to publish", 60*time.Second, func() bool {
		tj = d.c.table(t, "docs")
		return tj.Run == nil && *tj.Generation > gen+1
	})
	checkDefinition(t, tj, false)
	checkRows(t, d.c, "docs", "rebuilt by value_format json", compacted(t, rawOracle))
}
