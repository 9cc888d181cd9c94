package serve

import (
	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/store"
)

// The daemon's answers as the tests decode them: the wire spelled out
// field for field, null as nil (serve writes them with package api's
// types). The tests read what was sent, not what api's decoder makes of
// it: a null generation stays distinguishable from 0, a time stays the
// string on the wire.

// tableJSON is a table as the API shows it. Fields of the published
// generation are null while it has none.
type tableJSON struct {
	Name   string            `json:"name"`
	Topic  string            `json:"topic"`
	Fold   string            `json:"fold"`
	Params map[string]string `json:"params,omitempty"`
	State  string            `json:"state"`
	// Retry is the planned retry of a failed first build (retry.go);
	// absent when none is planned.
	Retry *retryJSON `json:"retry,omitempty"`
	// Definition says whether the configured definition differs from the
	// one the published table was built by (definition.go); absent when
	// there is nothing to compare.
	Definition *definitionJSON        `json:"definition,omitempty"`
	Configured bool                   `json:"configured"`
	Schedule   *string                `json:"schedule"`
	Generation *uint64                `json:"generation"`
	Keys       *int64                 `json:"keys"`
	BuiltAt    *string                `json:"built_at"`
	TookMS     *int64                 `json:"took_ms"`
	Records    *int64                 `json:"records"`
	Skipped    *int64                 `json:"skipped"`
	EndMark    string                 `json:"end_mark,omitempty"`
	Partitions []partitionAndLiveJSON `json:"partitions"`
	// UpdatesSinceRebuild and CheckpointCapturedAt are the checkpoint's
	// provenance: incremental updates since the last full rebuild, and
	// when its end marks were captured (null: unknown, an imported table).
	UpdatesSinceRebuild  int64          `json:"updates_since_rebuild"`
	CheckpointCapturedAt *string        `json:"checkpoint_captured_at"`
	LastError            *lastErrorJSON `json:"last_error"`
	NextRun              *string        `json:"next_run"`
	Run                  *runJSON       `json:"run"`
	// SkippedRuns counts scheduled runs skipped because one was going.
	SkippedRuns int64 `json:"skipped_runs"`

	// The rest of the stored metadata, so that a client (the routed
	// `kmaterialize tables`) shows exactly what the file says: built_at
	// has nanoseconds, duration_ns is took_ms unrounded.
	DurationNS      *int64           `json:"duration_ns"`
	SkippedByReason map[string]int64 `json:"skipped_by_reason,omitempty"`
	Empty           bool             `json:"empty,omitempty"`
	Extra           map[string]int64 `json:"extra,omitempty"`
	// Follow is a followed table's follower (follow.go); absent otherwise.
	Follow *followJSON `json:"follow,omitempty"`

	// History: the end bound of an as-of rebuild, what the last publish
	// changed, and the generations kept (--keep / keep), newest first.
	Until   *store.Bound   `json:"until,omitempty"`
	Changes *store.Changes `json:"changes,omitempty"`
	Kept    []keptJSON     `json:"kept,omitempty"`
}

// keptJSON is a kept generation with the metadata and checkpoint it was
// published with.
type keptJSON struct {
	Generation      uint64                 `json:"generation"`
	Topic           string                 `json:"topic"`
	Fold            string                 `json:"fold"`
	Params          map[string]string      `json:"params,omitempty"`
	Keys            int64                  `json:"keys"`
	BuiltAt         string                 `json:"built_at"`
	DurationNS      int64                  `json:"duration_ns"`
	Records         int64                  `json:"records"`
	Skipped         int64                  `json:"skipped"`
	SkippedByReason map[string]int64       `json:"skipped_by_reason,omitempty"`
	Empty           bool                   `json:"empty,omitempty"`
	Extra           map[string]int64       `json:"extra,omitempty"`
	Until           *store.Bound           `json:"until,omitempty"`
	Changes         *store.Changes         `json:"changes,omitempty"`
	EndMark         string                 `json:"end_mark,omitempty"`
	Partitions      []checkpoint.Partition `json:"partitions"`
	// As the table's: its checkpoint's incremental updates and capture
	// time, as they were.
	UpdatesSinceRebuild  int64   `json:"updates_since_rebuild"`
	CheckpointCapturedAt *string `json:"checkpoint_captured_at"`
}

type lastErrorJSON struct {
	Error    string `json:"error"`
	ExitCode int    `json:"exit_code"`
	Run      uint64 `json:"run"`
	At       string `json:"at"`
}

// runJSON is the run queued or going. Started is null while it is queued;
// Phase is queued, reading (its replay) or publishing (merging,
// publishing: it ends by itself, and cannot be cancelled).
type runJSON struct {
	ID       uint64  `json:"id"`
	Trigger  string  `json:"trigger"`
	Phase    string  `json:"phase"`
	QueuedAt string  `json:"queued_at"`
	Started  *string `json:"started"`
}

// followJSON is a followed table's follower in GET /v1/tables/{table}.
type followJSON struct {
	Running        bool    `json:"running"`
	Error          *string `json:"error"`
	ErrorAt        *string `json:"error_at"`
	MaxLag         int64   `json:"max_lag"`
	Lag            *int64  `json:"lag"` // the largest partition lag; null before the first live marks
	RecordsApplied int64   `json:"records_applied"`
	Applies        int64   `json:"applies"`
	ApplyRate      float64 `json:"apply_rate"` // records per second, last ~10s
	LastApply      *string `json:"last_apply"`
}

// partitionAndLiveJSON is a checkpoint partition, with the live marks of a
// followed table.
type partitionAndLiveJSON struct {
	checkpoint.Partition
	LiveHigh *int64 `json:"live_high,omitempty"`
	Lag      *int64 `json:"lag,omitempty"`
}

// retryJSON is the retry beside a table's state in GET /v1/tables/{table}.
type retryJSON struct {
	Next     *string `json:"next"` // null while the retry is queued or running
	Attempts int     `json:"attempts"`
	Backoff  string  `json:"backoff"`
}

// definitionJSON is a table's definition as GET /v1/tables/{table} shows
// it: whether the configured definition differs from the stored one, and
// in which fields (the config file's names).
type definitionJSON struct {
	Changed bool     `json:"changed"`
	Fields  []string `json:"fields"`
}

// rebuildResult is the body of POST .../rebuild?wait=1.
type rebuildResult struct {
	Run        uint64  `json:"run"`
	ExitCode   int     `json:"exit_code"`
	Error      *string `json:"error"`
	Generation *uint64 `json:"generation"`
}

// updateResult is the body of POST .../update: the run's outcome, as the
// CLI's update prints it.
type updateResult struct {
	Run        uint64  `json:"run"`
	ExitCode   int     `json:"exit_code"`
	Error      *string `json:"error"`
	Generation *uint64 `json:"generation"`
	// Mode is materialize.Report.Mode: "in-place", "merged" or "rebuilt".
	Mode    string `json:"mode,omitempty"`
	Keys    int64  `json:"keys"`
	Records int64  `json:"records"` // new records the update read
	Updates int64  `json:"updates"` // updates since the last full rebuild
}

// apiError is the body of every error response.
type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	// Run is the run going, on a 409 run_in_progress.
	Run uint64 `json:"run,omitempty"`
	// Tables are the tables not ready, on /readyz's 503.
	Tables []readyTable `json:"tables,omitempty"`

	// A 503 table_build_failed: why the first build failed, its exit code,
	// and when it is tried again (null: not retried by itself: a request
	// or a reload retries it), after how many failed attempts.
	Reason    string  `json:"reason,omitempty"`
	ExitCode  int     `json:"exit_code,omitempty"`
	NextRetry *string `json:"next_retry,omitempty"`
	Attempts  int     `json:"attempts,omitempty"`
}

// readyTable is one table in /readyz's answer.
type readyTable struct {
	Name   string `json:"name"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
}
