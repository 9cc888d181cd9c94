package serve

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Error codes, the "code" of an error response.
const (
	codeBadRequest         = "bad_request"
	codeBadTableName       = "bad_table_name"
	codeBadKey             = "bad_key"
	codeBadLimit           = "bad_limit"
	codeBadGeneration      = "bad_generation"
	codeBadEncoding        = "bad_encoding"
	codeTableNotFound      = "table_not_found"
	codeTableNotReady      = "table_not_ready"
	codeTableNotConfigured = "table_not_configured"
	codeTableConfigured    = "table_configured"
	codeKeyNotFound        = "key_not_found"
	codeGenerationGone     = "generation_gone"
	codeNotUTF8            = "not_utf8"
	codeRunInProgress      = "run_in_progress"
	codeForbidden          = "forbidden"
	codeUnauthorized       = "unauthorized"
	codeShuttingDown       = "shutting_down"
	codeNotReady           = "not_ready"
	codeRouteNotFound      = "route_not_found"
	codeMethodNotAllowed   = "method_not_allowed"
	codeInternal           = "internal"
	codeGenerationNotFound = "generation_not_found"
	codeTableFollowed      = "table_followed"
	codeDefinitionChanged  = "definition_changed"

	// Runs (queue.go, retry.go).
	codeTableBuildFailed = "table_build_failed" // 503: the first build failed (reason, next_retry)
	codeRunPublishing    = "run_publishing"     // 409: a cancel of a run past its replay
	codeNoRun            = "no_run"             // 404: a cancel with nothing queued or going
	codeSpoolFull        = "spool_full"         // a spooled answer would pass spool_max_bytes (spool.go)
	codeBusy             = "busy"               // max_heavy_requests are running (heavy.go)
)

// retryAfter is the Retry-After (seconds) of a 503 for a table not yet
// published.
const retryAfter = 5

// apiError is the body of every error response.
type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	// Run is the run going, on a 409 run_in_progress.
	Run uint64 `json:"run,omitempty"`
	// Tables are the tables not ready, on /readyz's 503.
	Tables []readyTable `json:"tables,omitempty"`

	// A 503 table_build_failed: why the first build failed, its exit code,
	// and when it is tried again (null: not retried by itself: a request
	// or a reload retries it), after how many failed attempts.
	Reason    string  `json:"reason,omitempty"`
	ExitCode  int     `json:"exit_code,omitempty"`
	NextRetry *string `json:"next_retry,omitempty"`
	Attempts  int     `json:"attempts,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encode the response","code":"internal"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apiError{Error: msg, Code: code})
}

// muxErrorWriter turns the ServeMux's own plain-text 404 and 405 into JSON
// errors; redirects (path cleaning) pass through.
type muxErrorWriter struct {
	http.ResponseWriter
	swallow bool
}

func (m *muxErrorWriter) WriteHeader(code int) {
	var ae apiError
	switch code {
	case http.StatusNotFound:
		ae = apiError{Error: "no such route; see GET /v1/tables", Code: codeRouteNotFound}
	case http.StatusMethodNotAllowed:
		ae = apiError{Error: "method not allowed on this route (Allow: " + m.Header().Get("Allow") + ")", Code: codeMethodNotAllowed}
	default:
		m.ResponseWriter.WriteHeader(code)
		return
	}
	m.swallow = true
	m.Header().Del("X-Content-Type-Options")
	writeJSON(m.ResponseWriter, code, ae)
}

func (m *muxErrorWriter) Write(b []byte) (int, error) {
	if m.swallow {
		return len(b), nil
	}
	return m.ResponseWriter.Write(b)
}
