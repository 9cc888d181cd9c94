package serve

import (
	"net/http"
	"strconv"

	"github.com/kmaterialize/kmaterialize/api"
)

// openapi answers GET /v1/openapi.json: the API's OpenAPI document
// (api/openapi.json), as it was built into the binary.
func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	if !checkParams(w, r) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(api.OpenAPI)))
	w.WriteHeader(http.StatusOK)
	w.Write(api.OpenAPI)
}
