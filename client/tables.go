package client

import (
	"context"

	"github.com/kmaterialize/kmaterialize/api"
)

// The table as the daemon shows it, and its parts: the API's types
// (package api), under the names this package has always had.
type (
	// Table is a table as the daemon shows it. The fields of the published
	// generation (Generation to Extra, EndMark, Partitions) are zero while
	// the table has none (State StateEmpty or StateBuilding).
	Table = api.Table
	// Partition is one partition of a table's checkpoint, with a followed
	// table's live marks.
	Partition = api.Partition
	// LastError is a failed run.
	LastError = api.LastError
	// Run is the run queued or going.
	Run = api.Run
	// Follow is a followed table's follower.
	Follow = api.Follow
	// Retry is the planned retry of a failed first build.
	Retry = api.Retry
	// Definition says whether the configured definition differs from the
	// stored one.
	Definition = api.Definition
	// Bound is the end bound of an as-of rebuild: a timestamp, or end
	// offsets by partition.
	Bound = api.Bound
	// Changes is what a publish changed compared with the generation it
	// replaced (From; 0 for a table's first).
	Changes = api.Changes
	// KeptGeneration is a kept generation of a table, with the metadata
	// and checkpoint it was published with.
	KeptGeneration = api.KeptGeneration
)

// Table states.
const (
	StateEmpty      = api.StateEmpty      // never published, no run going
	StateBuilding   = api.StateBuilding   // never published, its first build running
	StateReady      = api.StateReady      // published, last run succeeded
	StateRebuilding = api.StateRebuilding // published and served while a rebuild runs
	StateFailed     = api.StateFailed     // the last run failed, or following stopped; the previous generation (if any) is served
	StateQueued     = api.StateQueued     // a run waits in the daemon's queue (max_concurrent_runs)
	StateFollowing  = api.StateFollowing  // published, its follower applying what the topic gains
)

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
