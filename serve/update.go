package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/store"
)

// triggerUpdate is the trigger of a run that POST .../update started.
const triggerUpdate = "update"

// UpdateFunc runs one incremental update of table in db (materialize.Update
// with the daemon's brokers and the table's stored definition). ctx ends on
// shutdown; an update that returns after it ended must not have published.
type UpdateFunc func(ctx context.Context, db *store.DB, table string, rebuildIfNeeded bool, log zerolog.Logger) (materialize.Report, error)

// update runs an incremental update of a table the database holds, from its
// stored definition, and answers when it ends: the request carries only
// the table's name and rebuild_if_needed. It takes the table's run lock, so
// it never overlaps a rebuild of the same table.
func (s *Server) update(w http.ResponseWriter, r *http.Request) {
	table, ok := tableParam(w, r)
	if !ok {
		return
	}
	if !checkParams(w, r, "rebuild_if_needed") {
		return
	}
	rebuild, err := parseBool("rebuild_if_needed", r.URL.Query().Get("rebuild_if_needed"))
	if err != nil {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, err.Error())
		return
	}
	if r.ContentLength > 0 {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "an update request carries no body: the table's stored definition decides how it is updated")
		return
	}
	if s.cfg.Update == nil {
		writeError(w, http.StatusNotFound, api.CodeTableNotConfigured, "this daemon runs no updates (no Update function configured)")
		return
	}
	if db := s.database(w); db == nil || s.refuseChangedDefinition(w, db, table) {
		return
	}
	run, rep, err := s.startUpdate(table, rebuild)
	switch {
	case errors.Is(err, errFollowed):
		writeError(w, http.StatusConflict, api.CodeTableFollowed, fmt.Sprintf(
			"table %q is followed: the daemon's follower keeps it current, and an update would race it "+
				"(to update it on demand instead, set follow: false in the config and reload the daemon)", table))
		return
	case errors.Is(err, errRunning):
		writeJSON(w, http.StatusConflict, api.ErrorBody{Error: fmt.Sprintf("a run of table %q is already going (run %d)", table, run.id), Code: api.CodeRunInProgress, Run: run.id})
		return
	case errors.Is(err, errStopping):
		writeError(w, http.StatusServiceUnavailable, api.CodeShuttingDown, err.Error())
		return
	case err != nil:
		writeError(w, http.StatusInternalServerError, api.CodeInternal, err.Error())
		return
	}
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	res, done := waitRun(r.Context(), run)
	if !done {
		return // the client went away; the run goes on
	}
	out := api.UpdateResult{Run: res.ID, ExitCode: res.ExitCode}
	if res.Err != nil {
		out.Error = res.Err.Error()
		if db := s.database(w); db == nil {
			return
		} else if m, err := db.Table(table); err == nil {
			out.Generation = m.Generation
		}
	} else {
		out.Generation = res.Generation
		out.Mode, out.Keys, out.Records, out.Updates = rep.Mode, rep.Meta.Keys, rep.Replay.Records, rep.Checkpoint.Updates
	}
	if errors.Is(res.Err, store.ErrTableNotFound) {
		writeError(w, http.StatusNotFound, api.CodeTableNotFound, res.Err.Error())
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// errFollowed is returned by startUpdate for a followed table.
var errFollowed = errors.New("the table is followed")

// startUpdate queues an update of table (queue.go), taking its run lock.
// The report is set before the run's done closes. A followed table is
// errFollowed: its follower applies what the topic gains, and an update
// would race it (both would read from one checkpoint and only one commit;
// the follower is never paused for an update).
func (s *Server) startUpdate(name string, rebuildIfNeeded bool) (*run, *materialize.Report, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil || s.stopping {
		return nil, nil, errStopping
	}
	if def, ok := s.tables[name]; ok && def.Follow != nil {
		return nil, nil, errFollowed
	}
	rep := &materialize.Report{}
	r, err := s.newRunLocked(name, triggerUpdate, kindUpdate, false, func(r *run) {
		r.rebuildIfNeeded, r.report = rebuildIfNeeded, rep
	})
	if err != nil {
		return r, nil, err
	}
	return r, rep, nil
}

// updateWork is an update's part of r: Config.Update of the table from its
// stored definition, its report set for the waiting request.
func (s *Server) updateWork(r *run) runWork {
	rebuildIfNeeded := r.rebuildIfNeeded
	return runWork{
		what: "update",
		do: func(runLog, log zerolog.Logger) (materialize.Report, error) {
			log.Info().Bool("rebuild_if_needed", rebuildIfNeeded).Msg("update started")
			return s.cfg.Update(materialize.WithReplayed(r.ctx, s.replayed(r)), s.db, r.table, rebuildIfNeeded, runLog)
		},
		logEnd: func(log zerolog.Logger, res runResult, rep materialize.Report) {
			if res.Err == nil {
				log.Info().Uint64(keyGeneration, res.Generation).Str("mode", rep.Mode).Int64("keys", rep.Meta.Keys).Int64("took_ms", res.Took.Milliseconds()).Msg("update published")
			} else {
				log.Error().Err(res.Err).Int("exit_code", res.ExitCode).Msg("update failed; the table is unchanged")
			}
		},
		// An update's Meta.Records is the table's, cumulative since its
		// last full rebuild; what this run read is its replay's.
		recordsRead: func(rep materialize.Report) int64 { return rep.Replay.Records },
		endLocked:   func(rep materialize.Report) { *r.report = rep },
	}
}
