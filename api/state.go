package api

// Table states, the "state" of a table and of /readyz's tables, in the
// order the daemon decides them (serve's tableState; docs/daemon.md).
const (
	StateEmpty      = "empty"      // never published, no run queued or going
	StateQueued     = "queued"     // a run waits in the daemon's queue (max_concurrent_runs), published or not
	StateBuilding   = "building"   // never published, its first build running
	StateRebuilding = "rebuilding" // published and served while a run goes
	StateFailed     = "failed"     // the last run failed, or following stopped; the previous generation (if any) is served
	StateFollowing  = "following"  // published, its follower applying what the topic gains
	StateReady      = "ready"      // published, its last run succeeded
	// StateCompacting: published and served while the daemon compacts
	// the database (POST /v1/compact): its writes (runs, follower,
	// updates) wait until the compacted file is in place.
	StateCompacting = "compacting"
)
