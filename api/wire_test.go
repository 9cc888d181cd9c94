package api

// The documents in testdata are a real daemon's answers, captured by
// testdata/capture.sh (run from the repository root:
// `bash api/testdata/capture.sh`; it needs curl and jq). It starts `kmaterialize
// dev broker`, writes records with testdata/produce (the machine has no
// kcat), builds an as-of table with `kmaterialize rebuild --to-offsets`,
// serves a config with a plain scheduled table, a followed one, one with
// keep: 2 rebuilt twice and one whose first build fails (its topic does not
// exist), and records GET /v1/tables and /v1/tables/{table}, the answers of
// rebuild (started, waited, failed), update, rollback and drop, and error
// bodies. Run it
// again after a change of the daemon's JSON; the test then says whether
// these types still write it.

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// document returns a new value of the type testdata file name holds.
func document(t *testing.T, name string) any {
	switch {
	case name == "tables.json":
		return &struct {
			Tables []Table `json:"tables"`
		}{}
	case strings.HasPrefix(name, "table-"):
		return &Table{}
	case strings.HasPrefix(name, "error-"):
		return &ErrorBody{}
	case strings.HasPrefix(name, "rebuild-"):
		return &RebuildResult{}
	case name == "update.json":
		return &UpdateResult{}
	case name == "rollback.json":
		return &RollbackResult{}
	case name == "drop.json":
		return &Dropped{}
	}
	t.Fatalf("testdata/%s: no type for it", name)
	return nil
}

func TestCapturedDocumentsRoundTrip(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 15 {
		t.Fatalf("%d documents in testdata: run testdata/capture.sh", len(files))
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			v := document(t, name)
			if err := json.Unmarshal(want, v); err != nil {
				t.Fatalf("decode: %v", err)
			}
			// Done is not on the wire: the status says it (200 waited,
			// 202 started).
			if r, ok := v.(*RebuildResult); ok {
				r.Done = name != "rebuild-started.json"
			}
			got, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			// The daemon ends each body with a newline.
			if got = append(got, '\n'); !bytes.Equal(got, want) {
				t.Errorf("re-encoded differs from the daemon's\n got: %s\nwant: %s", got, want)
			}
		})
	}
}

func load[T any](t *testing.T, name string) T {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return v
}

// TestCapturedDocumentsDecode checks that the round trip goes through the
// Go fields, not around them.
func TestCapturedDocumentsDecode(t *testing.T) {
	failed := load[Table](t, "table-failed.json")
	if failed.State != StateFailed || failed.Generation != 0 || failed.Retry == nil || failed.Retry.Backoff < time.Second ||
		failed.LastError == nil || failed.LastError.ExitCode == 0 || failed.LastError.At.IsZero() || failed.Partitions == nil {
		t.Errorf("failed table: %+v", failed)
	}
	followed := load[Table](t, "table-followed.json")
	if followed.State != StateFollowing || followed.Follow == nil || followed.Follow.RecordsApplied != 1 ||
		followed.Follow.LastApply.IsZero() || followed.Follow.Lag == nil || followed.Partitions[0].LiveHigh == nil {
		t.Errorf("followed table: %+v (follow %+v)", followed, followed.Follow)
	}
	kept := load[Table](t, "table-kept.json")
	if len(kept.Kept) != 2 || kept.Kept[0].Generation >= kept.Generation || kept.Kept[1].BuiltAt.IsZero() ||
		kept.Kept[0].Changes == nil || kept.Kept[0].CheckpointCapturedAt.IsZero() {
		t.Errorf("kept table: %+v", kept)
	}
	asof := load[Table](t, "table-asof.json")
	if asof.Configured || asof.Until == nil || len(asof.Until.Offsets) != 2 || asof.Duration < time.Millisecond ||
		asof.BuiltAt.Nanosecond() == 0 {
		t.Errorf("as-of table: %+v", asof)
	}
	plain := load[Table](t, "table-plain.json")
	if plain.Schedule == "" || plain.NextRun.IsZero() || plain.UpdatesSinceRebuild != 1 || plain.Definition == nil {
		t.Errorf("plain table: %+v", plain)
	}
	running := load[Table](t, "table-plain-running.json")
	if running.State != StateRebuilding || running.Run == nil || running.Run.Started.IsZero() || running.Run.QueuedAt.IsZero() {
		t.Errorf("running table: %+v", running)
	}
	busy := load[ErrorBody](t, "error-run-in-progress.json")
	if busy.Code != CodeRunInProgress || busy.Run != running.Run.ID {
		t.Errorf("run in progress: %+v", busy)
	}
	bf := load[ErrorBody](t, "error-table-build-failed.json")
	if bf.Code != CodeTableBuildFailed || bf.NextRetry == "" || bf.Reason == "" || bf.Attempts == 0 {
		t.Errorf("build failed: %+v", bf)
	}
	up := load[UpdateResult](t, "update.json")
	if up.Mode == "" || up.Generation == 0 || up.Error != "" {
		t.Errorf("update: %+v", up)
	}
}

// TestZeroTable is the JSON of a table the daemon has nothing of but its
// name: every published field null, partitions [].
func TestZeroTable(t *testing.T) {
	got, err := json.Marshal(Table{Name: "t", State: StateEmpty, Configured: true})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"t","topic":"","fold":"","state":"empty","configured":true,"schedule":null,"generation":null,"keys":null,"built_at":null,"took_ms":null,"records":null,"skipped":null,"partitions":[],"updates_since_rebuild":0,"checkpoint_captured_at":null,"last_error":null,"next_run":null,"run":null,"skipped_runs":0,"duration_ns":null}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
