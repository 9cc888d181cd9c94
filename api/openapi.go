package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of the daemon's HTTP API, served at
// GET /v1/openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte
