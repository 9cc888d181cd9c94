package api

// Error codes, the "code" of an error body.
const (
	CodeBadRequest         = "bad_request"
	CodeBadTableName       = "bad_table_name"
	CodeBadKey             = "bad_key"
	CodeBadLimit           = "bad_limit"
	CodeBadGeneration      = "bad_generation"
	CodeBadEncoding        = "bad_encoding"
	CodeTableNotFound      = "table_not_found"
	CodeTableNotReady      = "table_not_ready"
	CodeTableNotConfigured = "table_not_configured"
	CodeTableConfigured    = "table_configured"
	CodeKeyNotFound        = "key_not_found"
	CodeGenerationGone     = "generation_gone"
	CodeNotUTF8            = "not_utf8"
	CodeRunInProgress      = "run_in_progress"
	CodeForbidden          = "forbidden"
	CodeUnauthorized       = "unauthorized" // 401: a listener with allow_remote, without a token it knows
	CodeShuttingDown       = "shutting_down"
	CodeNotReady           = "not_ready"
	CodeRouteNotFound      = "route_not_found"
	CodeMethodNotAllowed   = "method_not_allowed"
	CodeInternal           = "internal"
	CodeGenerationNotFound = "generation_not_found"
	// CodeTableFollowed: POST .../update of a followed table, which its
	// follower keeps current (409).
	CodeTableFollowed = "table_followed"
	// CodeDefinitionChanged: POST .../update of a table the config defines
	// otherwise than it was built (409); the daemon is rebuilding it.
	CodeDefinitionChanged = "definition_changed"
	// CodeTableBuildFailed: a read of a table whose first build failed
	// (503, with ErrorBody's Reason, ExitCode, NextRetry and Attempts).
	CodeTableBuildFailed = "table_build_failed"
	CodeRunPublishing    = "run_publishing"  // 409: a cancel of a run past its replay
	CodeNoRun            = "no_run"          // 404: a cancel with nothing queued or going
	CodeSpoolFull        = "spool_full"      // a spooled answer would pass spool_max_bytes
	CodeBusy             = "busy"            // max_heavy_requests are running
	CodeBackupRunning    = "backup_running"  // 409: GET /v1/backup while another is taken
	CodeCompactRunning   = "compact_running" // 409: a backup or compaction while the database is compacted
	CodeNoSpace          = "no_space"        // 507: a backup would not fit on the database's file system
	// CodeBadPositions: a min_positions that does not parse, or names a
	// partition the table does not have (400).
	CodeBadPositions = "bad_positions"
	// CodeBadWait: a wait= that is not a duration from 0 to 30s (400).
	CodeBadWait = "bad_wait"
	// CodePositionsNotReached: a read with min_positions whose wait ended
	// before the table reached them (409, with ErrorBody's Positions).
	CodePositionsNotReached = "positions_not_reached"
	// CodeTooManyWaiters: a read with min_positions that would wait while
	// the daemon's bound of waiting reads is reached (503).
	CodeTooManyWaiters = "too_many_waiters"
	// The change feed (GET .../changes): a from= that is neither a cursor
	// nor "now" (400); a cursor the feed no longer keeps, of an earlier
	// epoch or of a restarted feed (410, with ErrorBody's Positions and
	// Cursor of the table now: list again); the bound of open feeds
	// reached (503); a watcher cut off for falling behind (a stream's
	// error line: resume from the last commit's cursor).
	CodeBadCursor       = "bad_cursor"
	CodeCursorGone      = "cursor_gone"
	CodeTooManyWatchers = "too_many_watchers"
	CodeWatcherTooSlow  = "watcher_too_slow"
	// Shards (docs/shards.md): a key read of a subset table whose
	// partitioner puts the key in a partition it does not hold (421, with
	// ErrorBody's Partition and PartitionSet: ask a daemon that holds
	// it); a key read of a subset table whose topic's partition count
	// changed (409: keys may no longer be where their hash says); GET
	// .../partition of a table without a partitioner, or with a key the
	// partitioner does not place (a null or, under consistent, an empty
	// key) (400).
	CodeKeyNotHere     = "key_not_here"
	CodeRepartitioned  = "repartitioned"
	CodeNoPartitioner  = "no_partitioner"
	CodeKeyNoPartition = "key_has_no_partition"
)

// ErrorBody is the body of every error answer.
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	// Run is the run going, on a 409 run_in_progress.
	Run uint64 `json:"run,omitempty"`
	// Tables are the tables not ready, on /readyz's 503.
	Tables []ReadyTable `json:"tables,omitempty"`

	// A 503 table_build_failed: why the first build failed, its exit code,
	// and when it is tried again ("": not retried by itself: a request or
	// a reload retries it; else RFC 3339 in UTC), after how many failed
	// attempts.
	Reason    string `json:"reason,omitempty"`
	ExitCode  int    `json:"exit_code,omitempty"`
	NextRetry string `json:"next_retry,omitempty"`
	Attempts  int    `json:"attempts,omitempty"`

	// Positions are the table's current positions, on a 409
	// positions_not_reached.
	Positions Positions `json:"positions,omitempty"`
	// Cursor is the table's current cursor, on a 410 cursor_gone: a feed
	// may start from it (after a list that reads at it or later).
	Cursor string `json:"cursor,omitempty"`

	// Partition is the key's partition, on a 421 key_not_here; a pointer,
	// for partition 0 is one. PartitionSet is the table's partitions, on
	// a 421 key_not_here and on a subset table's 404 key_not_found (with
	// HeaderPartial).
	Partition    *int32  `json:"partition,omitempty"`
	PartitionSet []int32 `json:"partition_set,omitempty"`
}

// ReadyTable is one table in /readyz's answer.
type ReadyTable struct {
	Name   string `json:"name"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// PartitionSet are the partitions a table over a subset of its
	// topic's holds (a shard): readiness speaks for those only.
	PartitionSet []int32 `json:"partition_set,omitempty"`
}
