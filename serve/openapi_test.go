package serve

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/kmaterialize/kmaterialize/api"
)

// TestOpenAPIHandler: the handler answers the embedded document byte for
// byte as application/json, and refuses a query parameter as every route
// that takes none does.
func TestOpenAPIHandler(t *testing.T) {
	s := &Server{}
	rec := httptest.NewRecorder()
	s.openapi(rec, httptest.NewRequest("GET", "/v1/openapi.json", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/openapi.json: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	if !bytes.Equal(rec.Body.Bytes(), api.OpenAPI) {
		t.Fatalf("the body (%d bytes) is not api/openapi.json (%d bytes)", rec.Body.Len(), len(api.OpenAPI))
	}
	var doc struct {
		OpenAPI string `json:"openapi"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || doc.OpenAPI == "" {
		t.Fatalf("the body is not an OpenAPI document: %v", err)
	}

	rec = httptest.NewRecorder()
	s.openapi(rec, httptest.NewRequest("GET", "/v1/openapi.json?x=1", nil))
	var e apiError
	if err := json.Unmarshal(rec.Body.Bytes(), &e); rec.Code != http.StatusBadRequest || err != nil || e.Code != api.CodeBadRequest {
		t.Fatalf("GET /v1/openapi.json?x=1: %d %s", rec.Code, rec.Body)
	}
}
