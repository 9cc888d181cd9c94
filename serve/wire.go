package serve

import (
	"errors"
	"time"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/store"
)

// The table as the API shows it (GET /v1/tables, GET /v1/tables/{table},
// /readyz): its JSON and describe, which fills it.

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

// describeHistory fills t's history fields from snap.
func describeHistory(t *tableJSON, snap *store.Snapshot) error {
	t.Until, t.Changes = snap.Meta.Until, snap.Meta.Changes
	kept, err := store.KeptGenerations(snap.Tx, snap.Meta.Name)
	if err != nil {
		return err
	}
	for _, k := range kept {
		m := k.Meta
		kj := keptJSON{Generation: k.Generation, Topic: m.Topic, Fold: m.Fold, Params: m.Params, Keys: m.Keys,
			BuiltAt: m.BuiltAt.UTC().Format(time.RFC3339Nano), DurationNS: int64(m.Duration), Records: m.Records, Skipped: m.Skipped,
			SkippedByReason: m.SkippedByReason, Empty: m.Empty, Extra: m.Extra, Until: m.Until, Changes: m.Changes,
			Partitions: []checkpoint.Partition{}}
		cp, ok, err := store.KeptCheckpoint(snap.Tx, m.Name, k.Generation)
		if err != nil {
			return err
		}
		if ok {
			kj.EndMark = cp.EndMark
			if cp.Partitions != nil {
				kj.Partitions = cp.Partitions
			}
			kj.UpdatesSinceRebuild = cp.Updates
			if !cp.CapturedAt.IsZero() {
				at := cp.CapturedAt.UTC().Format(time.RFC3339Nano)
				kj.CheckpointCapturedAt = &at
			}
		}
		t.Kept = append(t.Kept, kj)
	}
	return nil
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

// describe returns table as the API shows it, reading its metadata and
// checkpoint in one transaction. found is false when the table is neither
// in the file nor configured.
func (s *Server) describe(db *store.DB, table string) (tableJSON, bool, error) {
	s.mu.Lock()
	def, configured := s.tables[table]
	var active *run
	var phase runPhase
	var last *runResult
	var skipped int64
	var retry *retryJSON
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

	t := tableJSON{Name: table, Configured: configured, Partitions: []partitionAndLiveJSON{}, SkippedRuns: skipped}
	if configured {
		t.Topic, t.Fold = def.Topic, def.Fold
		if def.Schedule != "" {
			sch := def.Schedule
			t.Schedule = &sch
		}
	}
	published := false
	err := db.ReadTable(table, func(snap *store.Snapshot) error {
		published = true
		m := snap.Meta
		t.Topic, t.Fold, t.Params = m.Topic, m.Fold, m.Params
		gen, keys, took, recs, skip := m.Generation, m.Keys, m.Duration.Milliseconds(), m.Records, m.Skipped
		built := m.BuiltAt.UTC().Format(time.RFC3339Nano)
		t.Generation, t.Keys, t.TookMS, t.Records, t.Skipped, t.BuiltAt = &gen, &keys, &took, &recs, &skip, &built
		dur := int64(m.Duration)
		t.DurationNS, t.SkippedByReason, t.Empty, t.Extra = &dur, m.SkippedByReason, m.Empty, m.Extra
		cp, ok, err := checkpoint.Load(snap.Tx, table)
		if err != nil {
			return err
		}
		if ok {
			t.EndMark = cp.EndMark
			t.UpdatesSinceRebuild = cp.Updates
			if !cp.CapturedAt.IsZero() {
				at := cp.CapturedAt.UTC().Format(time.RFC3339Nano)
				t.CheckpointCapturedAt = &at
			}
			for _, p := range cp.Partitions {
				t.Partitions = append(t.Partitions, partitionAndLiveJSON{Partition: p})
			}
		}
		return describeHistory(&t, snap)
	})
	if err != nil && !errors.Is(err, store.ErrTableNotFound) {
		return t, false, err
	}
	if !published && !configured {
		return t, false, nil
	}
	if published && configured {
		if t.Definition, err = s.definitionInfo(db, table); err != nil {
			return t, false, err
		}
	}
	fv, followed := s.followInfo(table)
	followFailed := followed && !fv.running && fv.err != nil
	t.State = tableState(stateInputs{published: published, active: active, phase: phase, last: last,
		followed: followed, following: fv.running, followFailed: followFailed})
	t.Retry = retry
	if last != nil && last.Err != nil {
		t.LastError = &lastErrorJSON{Error: last.Err.Error(), ExitCode: last.ExitCode, Run: last.ID, At: last.Ended.UTC().Format(time.RFC3339)}
	}
	if followed {
		t.Follow = fv.json()
		t.Partitions = fv.withLive(t.Partitions)
		if followFailed && (last == nil || last.Err == nil || last.Ended.Before(fv.errAt)) {
			// The reason following stopped is the table's last error.
			t.LastError = &lastErrorJSON{Error: "following stopped: " + fv.err.Error(), ExitCode: s.cfg.ExitCode(fv.err), At: fv.errAt.UTC().Format(time.RFC3339)}
		}
	}
	if active != nil {
		t.Run = &runJSON{ID: active.id, Trigger: active.trigger, Phase: phase.String(), QueuedAt: active.queued.UTC().Format(time.RFC3339Nano)}
		if phase != phaseQueued {
			st := active.started.UTC().Format(time.RFC3339)
			t.Run.Started = &st
		}
	}
	if next := s.nextRun(table); next != nil {
		n := next.Format(time.RFC3339)
		t.NextRun = &n
	}
	return t, true, nil
}
