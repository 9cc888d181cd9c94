package serve

import (
	"errors"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/internal/tableview"
	"github.com/kmaterialize/kmaterialize/store"
)

// The table as the API shows it (GET /v1/tables, GET /v1/tables/{table},
// /readyz): describe fills an api.Table, which writes the JSON.

// describe returns table as the API shows it, reading its metadata and
// checkpoint in one transaction. found is false when the table is neither
// in the file nor configured.
func (s *Server) describe(db *store.DB, table string) (api.Table, bool, error) {
	t, _, found, err := s.describeAt(db, table)
	return t, found, err
}

// describeAt is describe, with the generation and positions its read
// transaction saw (zero when nothing is published).
func (s *Server) describeAt(db *store.DB, table string) (api.Table, readState, bool, error) {
	var rs readState
	s.mu.Lock()
	def, configured := s.tables[table]
	var active *run
	var phase runPhase
	var last *runResult
	var skipped int64
	var retry *api.Retry
	if st := s.runs[table]; st != nil {
		active, last, skipped = st.active, st.last, st.skipped
		if active != nil {
			phase = active.phase
		}
		if st.retry != nil {
			retry = st.retry.json()
		}
	}
	s.mu.Unlock()

	t := api.Table{Name: table, Configured: configured, Partitions: []api.Partition{}}
	if configured {
		t.Topic, t.Fold = def.Topic, def.Fold
	}
	published := false
	var stored *api.Shard
	err := db.ReadTable(table, func(snap *store.Snapshot) error {
		published = true
		var err error
		if stored, err = rs.loadWithShard(snap); err != nil {
			return err
		}
		t, err = tableview.FromSnapshot(snap)
		return err
	})
	if err != nil && !errors.Is(err, store.ErrTableNotFound) {
		return t, rs, false, err
	}
	if !published && !configured {
		return t, rs, false, nil
	}
	t.Name, t.Configured, t.SkippedRuns = table, configured, skipped
	if configured {
		t.Schedule = def.Schedule
	}
	if published && configured {
		if t.Definition, err = s.definitionInfo(db, table); err != nil {
			return t, rs, false, err
		}
	}
	fv, followed := s.followInfo(table)
	followFailed := followed && !fv.running && fv.err != nil
	t.State = tableState(stateInputs{published: published, active: active, phase: phase, last: last,
		followed: followed, following: fv.running, followFailed: followFailed, compacting: s.maintaining() == maintCompact})
	t.Retry = retry
	if last != nil && last.Err != nil {
		t.LastError = &api.LastError{Error: last.Err.Error(), ExitCode: last.ExitCode, Run: last.ID, At: last.Ended}
	}
	if followed {
		t.Follow = fv.json()
		t.Partitions = fv.withLive(t.Partitions)
		if followFailed && (last == nil || last.Err == nil || last.Ended.Before(fv.errAt)) {
			// The reason following stopped is the table's last error.
			t.LastError = &api.LastError{Error: "following stopped: " + fv.err.Error(), ExitCode: s.cfg.ExitCode(fv.err), At: fv.errAt}
		}
	}
	if active != nil {
		t.Run = &api.Run{ID: active.id, Trigger: active.trigger, Phase: phase.String(), QueuedAt: active.queued}
		if phase != phaseQueued {
			t.Run.Started = active.started
		}
	}
	if next := s.nextRun(table); next != nil {
		t.NextRun = *next
	}
	t.Shard = s.shard(table, stored)
	return t, rs, true, nil
}
