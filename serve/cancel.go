package serve

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/kmaterialize/kmaterialize/api"
)

// cancelJSON is the body of POST /v1/tables/{table}/cancel.
type cancelJSON struct {
	Run uint64 `json:"run"`
	// Phase is where the run was: "queued" (removed from the queue, its
	// result cancelled) or "reading" (cancelled: it stops, publishes
	// nothing, and its last_error says cancelled).
	Phase string `json:"phase"`
}

// cancel cancels table's run (queue.go's cancelRun): 200 with the run and
// its phase; 404 no_run when nothing is queued or going; 409
// run_publishing for a run past its replay, which ends by itself. It does
// not wait for a reading run to stop: the table's last_error says when it
// did.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	table, ok := tableParam(w, r)
	if !ok {
		return
	}
	if !checkParams(w, r) {
		return
	}
	if s.database(w) == nil {
		return
	}
	run, phase, err := s.cancelRun(table)
	switch {
	case errors.Is(err, errNoRun):
		writeError(w, http.StatusNotFound, api.CodeNoRun, fmt.Sprintf("no run of table %q is queued or going", table))
		return
	case errors.Is(err, errPublishing):
		writeJSON(w, http.StatusConflict, api.ErrorBody{Error: fmt.Sprintf("run %d of table %q is %s", run.id, table, err), Code: api.CodeRunPublishing, Run: run.id})
		return
	case err != nil:
		writeError(w, http.StatusInternalServerError, api.CodeInternal, err.Error())
		return
	}
	s.cfg.Log.Info().Str(keyTable, table).Uint64("run", run.id).Str("phase", phase.String()).Msg("run cancelled by request")
	writeJSON(w, http.StatusOK, cancelJSON{Run: run.id, Phase: phase.String()})
}
