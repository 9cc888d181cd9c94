package serve

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/store"
)

// triggerDrop is the trigger of the run lock a drop holds while it goes.
const triggerDrop = "drop"

// drop removes a table from the file (DELETE /v1/tables/{table}): its
// entry, its generation and its checkpoint in one transaction
// (materialize.Drop), as `kmaterialize drop` does on the file. A table in
// the daemon's config is refused (409 table_configured): the daemon would
// build it again, and a drop would race its runs. A table with a run queued
// or going (an update) is 409 run_in_progress: the drop takes the table's
// run lock, and does not wait for it.
func (s *Server) drop(w http.ResponseWriter, r *http.Request) {
	table, ok := tableParam(w, r)
	if !ok {
		return
	}
	if !checkParams(w, r) {
		return
	}
	db := s.database(w)
	if db == nil {
		return
	}
	s.mu.Lock()
	_, configured := s.tables[table]
	st := s.state(table)
	busy := st.active
	if !configured && busy == nil {
		// The drop holds the table's run lock: no update starts while it
		// goes (one would fail on a table gone under it).
		s.runSeq++
		st.active = &run{id: s.runSeq, table: table, trigger: triggerDrop, phase: phasePublishing, queued: s.now(), started: s.now()}
	}
	s.mu.Unlock()
	if configured {
		writeError(w, http.StatusConflict, api.CodeTableConfigured,
			fmt.Sprintf("table %q is in the daemon's config, which would build it again: remove it from the config and reload (SIGHUP), then drop it", table))
		return
	}
	if busy != nil {
		writeJSON(w, http.StatusConflict, api.ErrorBody{Code: api.CodeRunInProgress, Run: busy.id, Error: fmt.Sprintf(
			"run %d of table %q is queued or going: the drop waits for no run; cancel it (POST /v1/tables/%s/cancel) or let it end, then drop", busy.id, table, table)})
		return
	}
	m, err := materialize.Drop(db, table)
	s.mu.Lock()
	st.active = nil
	s.mu.Unlock()
	switch {
	case errors.Is(err, store.ErrTableNotFound):
		writeError(w, http.StatusNotFound, api.CodeTableNotFound, err.Error())
		return
	case err != nil:
		s.cfg.Log.Error().Err(err).Str(keyTable, table).Msg("drop failed")
		writeError(w, http.StatusInternalServerError, api.CodeInternal, err.Error())
		return
	}
	s.metrics.tableDropped(table)
	s.cfg.Log.Info().Str(keyTable, table).Uint64(keyGeneration, m.Generation).Int64("keys", m.Keys).Msg("table dropped")
	writeJSON(w, http.StatusOK, api.Dropped{Table: table, Generation: m.Generation, Keys: m.Keys})
}
