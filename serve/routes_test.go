package serve

import (
	"testing"

	"github.com/kmaterialize/kmaterialize/internal/apitest"
)

// TestRoutesMatchOpenAPI: the route table and the OpenAPI document
// (api/openapi.json) name the same operations, both ways, so that neither
// gains a route the other lacks. The document declares no security (no
// securitySchemes, no per-operation security), so a route's access is not
// compared with it.
func TestRoutesMatchOpenAPI(t *testing.T) {
	inDoc := map[apitest.Operation]bool{}
	for _, op := range apitest.Operations() {
		inDoc[op] = true
	}
	inRoutes := map[apitest.Operation]bool{}
	for _, rt := range routes {
		op := apitest.Operation{Method: rt.method, Path: rt.path}
		if inRoutes[op] {
			t.Errorf("routes declares %s %s twice", op.Method, op.Path)
		}
		inRoutes[op] = true
		if !inDoc[op] {
			t.Errorf("route %s %s is not an operation of api/openapi.json", op.Method, op.Path)
		}
	}
	for _, op := range apitest.Operations() {
		if !inRoutes[op] {
			t.Errorf("operation %s %s of api/openapi.json is not in routes (routes.go)", op.Method, op.Path)
		}
	}
}
