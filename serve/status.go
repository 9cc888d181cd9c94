package serve

import (
	"net/http"
	"sync"
	"time"
)

// reloadStatus is what the daemon knows of its config's loads: when the
// config in force was loaded, and how the last attempt (the start, or a
// SIGHUP) went. Safe for concurrent use.
type reloadStatus struct {
	mu sync.Mutex
	st configStatus
}

// configStatus is the "config" object of GET /v1/status.
type configStatus struct {
	// LoadedAt is when the config in force was loaded: the start, or the
	// last reload that succeeded.
	LoadedAt time.Time `json:"loaded_at"`
	// LastReloadAt is when the last load was attempted (the start, or the
	// last SIGHUP), and LastReloadOK whether it succeeded; when it did
	// not, LastReloadError says why and the tables loaded at LoadedAt are
	// still in force.
	LastReloadAt    time.Time `json:"last_reload_at"`
	LastReloadOK    bool      `json:"last_reload_ok"`
	LastReloadError string    `json:"last_reload_error,omitempty"`
}

func newReloadStatus(now time.Time) *reloadStatus {
	return &reloadStatus{st: configStatus{LoadedAt: now, LastReloadAt: now, LastReloadOK: true}}
}

func (r *reloadStatus) get() configStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}

// loaded records an attempt at now: err nil is a config now in force.
func (r *reloadStatus) loaded(now time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.st.LastReloadAt, r.st.LastReloadOK, r.st.LastReloadError = now, err == nil, ""
	if err != nil {
		r.st.LastReloadError = err.Error()
		return
	}
	r.st.LoadedAt = now
}

// ReloadFailed records a reload (SIGHUP) whose config did not load, so
// that GET /v1/status and /metrics show it until a reload succeeds; the
// running tables stay. A reload whose config loads goes to SetTables,
// which records its own outcome. err's text is shown as it is: it must
// carry no secret.
func (s *Server) ReloadFailed(err error) {
	if err != nil {
		s.metrics.reload.loaded(s.now(), err)
	}
}

// statusJSON is the body of GET /v1/status: the daemon's own state.
type statusJSON struct {
	Config configStatus `json:"config"`
}

// status is GET /v1/status.
func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	if !checkParams(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, statusJSON{Config: s.metrics.reload.get()})
}
