package serve

import "github.com/kmaterialize/kmaterialize/api"

// Table states: the "state" of GET /v1/tables/{table} and /readyz, as api
// names them (kept here for the programs that import serve). tableState
// decides them, in one place; docs/daemon.md lists them in the same order.
const (
	StateEmpty      = api.StateEmpty
	StateQueued     = api.StateQueued
	StateBuilding   = api.StateBuilding
	StateRebuilding = api.StateRebuilding
	StateFailed     = api.StateFailed
	StateFollowing  = api.StateFollowing
	StateReady      = api.StateReady
	StateCompacting = api.StateCompacting
)

// stateInputs is what a table's state is computed from.
type stateInputs struct {
	published    bool
	active       *run       // the run queued or going
	phase        runPhase   // active's phase
	last         *runResult // the last run that ended
	followed     bool       // configured with follow
	following    bool       // its follower runs
	followFailed bool       // its follower stopped with an error
	compacting   bool       // the daemon compacts the database now
}

// tableState is the table's state; the first case that holds wins:
//
//  0. compacting: published while the daemon compacts the database (its
//     writes wait);
//  1. queued: a run of it waits in the queue;
//  2. rebuilding: a run goes and a generation is published (and served);
//  3. building: a run goes and nothing is published yet;
//  4. failed: its last run failed (the previous generation, if any, is
//     served; a first build's retry shows beside the state), or it is
//     published and its follower stopped;
//  5. following: published, its follower running;
//  6. ready: published;
//  7. empty: never published and nothing queued or going.
func tableState(in stateInputs) string {
	switch {
	case in.compacting && in.published:
		return StateCompacting
	case in.active != nil && in.phase == phaseQueued:
		return StateQueued
	case in.active != nil && in.published:
		return StateRebuilding
	case in.active != nil:
		return StateBuilding
	case in.last != nil && in.last.Err != nil:
		return StateFailed
	case in.published && in.followFailed:
		return StateFailed
	case in.published && in.followed && in.following:
		return StateFollowing
	case in.published:
		return StateReady
	}
	return StateEmpty
}
