// Package apitest checks requests and answers of the daemon's HTTP API
// against its OpenAPI document (api.OpenAPI) in tests: Transport wraps a
// client's transport and fails the test on a mismatch, Operations lists the
// document's routes in the syntax of the daemon's mux. Only tests import it.
//
// # Routing
//
// A request is routed by an http.ServeMux built from the document's paths,
// so that it matches exactly as the daemon's mux does. The document writes
// a path parameter that takes the rest of the path ("{key...}" in the mux)
// as "{key}", the only form OpenAPI has; muxPatterns maps those paths.
//
// # JSON lines
//
// An application/x-ndjson body is described by an array schema whose items
// are the schema of one line. The decoder registered for it reads the body
// as lines, each a JSON value ended by a newline (no blank line, nothing
// after the last newline), and hands the validator the array of the lines'
// values, so that each line is validated against the items schema.
//
// # What a mismatch is
//
//   - a request the document has no route for must be answered with the
//     mux's 404 route_not_found or 405 method_not_allowed (or a redirect);
//   - a request the document rejects (an unknown parameter value, say)
//     must be answered with a 4xx: the daemon may refuse more than the
//     document says (a key too long), never accept what it forbids;
//   - every answer's status must be one the operation lists, and its
//     headers and body must match that response. A body is validated when
//     the client has read it to its end (EOF, or its Content-Length by
//     Close) and it is at most maxBody bytes; a body the client stops
//     reading early is checked up to its status and headers only.
package apitest
