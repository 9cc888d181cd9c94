package client

import (
	"context"
	"time"
)

// Table is a table as the daemon shows it. The fields of the published
// generation (Generation to Extra, EndMark, Partitions) are zero while the
// table has none (State StateEmpty or StateBuilding).
type Table struct {
	Name   string            `json:"name"`
	Topic  string            `json:"topic"`
	Fold   string            `json:"fold"`
	Params map[string]string `json:"params"`
	// State is one of the State* constants.
	State string `json:"state"`
	// Configured is true for a table in the daemon's config (which it
	// rebuilds); false for one the file holds that it only serves.
	Configured bool `json:"configured"`
	// Schedule is "" when the table is not scheduled.
	Schedule string `json:"schedule"`

	// Generation is the published generation; 0 when there is none.
	Generation      uint64           `json:"generation"`
	Keys            int64            `json:"keys"`
	BuiltAt         time.Time        `json:"built_at"`
	Duration        time.Duration    `json:"duration_ns"`
	Records         int64            `json:"records"`
	Skipped         int64            `json:"skipped"`
	SkippedByReason map[string]int64 `json:"skipped_by_reason"`
	Empty           bool             `json:"empty"`
	Extra           map[string]int64 `json:"extra"`
	// EndMark is "high" or "stable": what Partition.High is.
	EndMark    string      `json:"end_mark"`
	Partitions []Partition `json:"partitions"`
	// UpdatesSinceRebuild is how many incremental updates followed the
	// last full rebuild; CheckpointCapturedAt is when the checkpoint's
	// end marks were captured (zero: unknown, an imported table).
	UpdatesSinceRebuild  int64     `json:"updates_since_rebuild"`
	CheckpointCapturedAt time.Time `json:"checkpoint_captured_at"`
	// Until is the end bound of an as-of rebuild; nil when it read to the
	// end mark.
	Until *Bound `json:"until"`
	// Changes is what the last publish changed; nil when not recorded.
	Changes *Changes `json:"changes"`
	// Kept are the generations kept for rollback and diff, newest first.
	Kept []KeptGeneration `json:"kept"`

	// LastError is the last run's failure, nil when it succeeded.
	LastError *LastError `json:"last_error"`
	// NextRun is the next scheduled run, zero when unscheduled.
	NextRun time.Time `json:"next_run"`
	// Run is the run going, nil when none.
	Run *Run `json:"run"`
	// SkippedRuns counts scheduled runs skipped because one was going.
	SkippedRuns int64 `json:"skipped_runs"`
}

// Table states.
const (
	StateEmpty      = "empty"      // never published, no run going
	StateBuilding   = "building"   // never published, its first build running
	StateReady      = "ready"      // published, last run succeeded
	StateRebuilding = "rebuilding" // published and served while a rebuild runs
	StateFailed     = "failed"     // the last run failed; the previous generation (if any) is served
	StateQueued     = "queued"     // a run waits in the daemon's queue (max_concurrent_runs)
)

// Partition is one partition of a table's checkpoint, as `kmaterialize
// export` shows it.
type Partition struct {
	Partition int32 `json:"partition"`
	// Low is the retained low offset captured at the start.
	Low int64 `json:"low"`
	// Start is the first offset the rebuild read from.
	Start int64 `json:"start"`
	// High is the end mark captured at the start.
	High int64 `json:"high"`
	// End is the position reached; == High when complete.
	End int64 `json:"end"`
}

// LastError is a failed run.
type LastError struct {
	Error string `json:"error"`
	// ExitCode is the exit code `kmaterialize rebuild` would have given.
	ExitCode int       `json:"exit_code"`
	Run      uint64    `json:"run"`
	At       time.Time `json:"at"`
}

// Run is a run going.
type Run struct {
	ID      uint64    `json:"id"`
	Trigger string    `json:"trigger"`
	Started time.Time `json:"started"`
}

// Tables lists every table the database holds and every configured one,
// sorted by name (GET /v1/tables).
func (c *Client) Tables(ctx context.Context) ([]Table, error) {
	var out struct {
		Tables []Table `json:"tables"`
	}
	if err := c.getJSON(ctx, "/v1/tables", &out); err != nil {
		return nil, err
	}
	return out.Tables, nil
}

// Table describes one table (GET /v1/tables/{table}); an unknown table is
// an *Error with CodeTableNotFound.
func (c *Client) Table(ctx context.Context, table string) (Table, error) {
	var t Table
	err := c.getJSON(ctx, tablePath(table, ""), &t)
	return t, err
}

// Bound is the end bound of an as-of rebuild: a timestamp, or end offsets by
// partition.
type Bound struct {
	Timestamp time.Time       `json:"timestamp"`
	Offsets   map[int32]int64 `json:"offsets"`
}

// Changes is what a publish changed compared with the generation it
// replaced (From; 0 for a table's first).
type Changes struct {
	From     uint64 `json:"from"`
	FromKeys int64  `json:"from_keys"`
	Added    int64  `json:"added"`
	Removed  int64  `json:"removed"`
	Changed  int64  `json:"changed"`
}

// KeptGeneration is a kept generation of a table, with the metadata and
// checkpoint it was published with.
type KeptGeneration struct {
	Generation      uint64            `json:"generation"`
	Topic           string            `json:"topic"`
	Fold            string            `json:"fold"`
	Params          map[string]string `json:"params"`
	Keys            int64             `json:"keys"`
	BuiltAt         time.Time         `json:"built_at"`
	Duration        time.Duration     `json:"duration_ns"`
	Records         int64             `json:"records"`
	Skipped         int64             `json:"skipped"`
	SkippedByReason map[string]int64  `json:"skipped_by_reason"`
	Empty           bool              `json:"empty"`
	Extra           map[string]int64  `json:"extra"`
	Until           *Bound            `json:"until"`
	Changes         *Changes          `json:"changes"`
	EndMark         string            `json:"end_mark"`
	Partitions      []Partition       `json:"partitions"`
	// As Table's, for this generation's checkpoint.
	UpdatesSinceRebuild  int64     `json:"updates_since_rebuild"`
	CheckpointCapturedAt time.Time `json:"checkpoint_captured_at"`
}
