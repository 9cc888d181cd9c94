package serve

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/kmaterialize/kmaterialize/api"
)

// retryAfter is the Retry-After (seconds) of a 503 for a table not yet
// published.
const retryAfter = 5

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
	writeJSON(w, status, api.ErrorBody{Error: msg, Code: code})
}

// muxErrorWriter turns the ServeMux's own plain-text 404 and 405 into JSON
// errors; redirects (path cleaning) pass through.
type muxErrorWriter struct {
	http.ResponseWriter
	swallow bool
}

func (m *muxErrorWriter) WriteHeader(code int) {
	var ae api.ErrorBody
	switch code {
	case http.StatusNotFound:
		ae = api.ErrorBody{Error: "no such route; see GET /v1/tables", Code: api.CodeRouteNotFound}
	case http.StatusMethodNotAllowed:
		ae = api.ErrorBody{Error: "method not allowed on this route (Allow: " + m.Header().Get("Allow") + ")", Code: api.CodeMethodNotAllowed}
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
