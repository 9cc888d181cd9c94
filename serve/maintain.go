package serve

import (
	"fmt"
	"net/http"
	"time"

	"github.com/kmaterialize/kmaterialize/api"
)

// A backup (GET /v1/backup) and a compaction (POST /v1/compact) of the
// database each run alone: a compaction's swap waits for every read
// transaction, so beside a backup's long one it would pause the writers
// for the whole copy and then the readers queued behind it. The second is
// refused at once with 409 and the code of the one running.

// What holds the database for maintenance.
const (
	maintBackup  = "backup"
	maintCompact = "compaction"
)

// maintain takes the maintenance slot for what, or answers 409 and returns
// false. The caller calls the release it returns.
func (s *Server) maintain(w http.ResponseWriter, what string) (release func(), ok bool) {
	if !s.maint.TryLock() {
		running := s.maintaining()
		code := api.CodeBackupRunning
		if running == maintCompact {
			code = api.CodeCompactRunning
		}
		writeError(w, http.StatusConflict, code, fmt.Sprintf("a %s of the database is running: try the %s again once it is over", running, what))
		return nil, false
	}
	s.maintWhat.Store(what)
	return func() {
		s.maintWhat.Store("")
		s.maint.Unlock()
	}, true
}

// maintaining is what holds the maintenance slot now, "" if nothing.
func (s *Server) maintaining() string {
	w, _ := s.maintWhat.Load().(string)
	return w
}

// compact is POST /v1/compact: the database rewritten without its free
// pages under the daemon (store.DB.CompactOnline). Runs, followers and
// updates wait while the compacted copy is built beside the file (tables
// show state compacting, and readiness ignores followers' lag meanwhile);
// reads go on and never wait (the old file serves them until the new one
// is in place). It answers once the compacted file is in place.
func (s *Server) compact(w http.ResponseWriter, r *http.Request) {
	if !checkParams(w, r) {
		return
	}
	db := s.database(w)
	if db == nil {
		return
	}
	release, ok := s.maintain(w, maintCompact)
	if !ok {
		return
	}
	defer release()
	start := time.Now()
	res, err := db.CompactOnline()
	if err != nil {
		s.cfg.Log.Error().Err(err).Msg("compaction failed; the file is as it was unless the error says it is in place")
		writeError(w, http.StatusInternalServerError, api.CodeInternal, err.Error())
		return
	}
	s.cfg.Log.Info().Int64("before", res.Before).Int64("after", res.After).Int64("paused_ms", res.Paused.Milliseconds()).
		Float64("swap_ms", float64(res.Swap.Microseconds())/1000).Int64("took_ms", time.Since(start).Milliseconds()).Msg("compacted")
	writeJSON(w, http.StatusOK, api.CompactResult{Before: res.Before, After: res.After,
		PausedMS: res.Paused.Milliseconds(), SwapMS: float64(res.Swap.Microseconds()) / 1000})
}
