package client

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Error codes of the API, the Code of an *Error.
const (
	CodeBadRequest         = "bad_request"
	CodeBadTableName       = "bad_table_name"
	CodeBadKey             = "bad_key"
	CodeBadLimit           = "bad_limit"
	CodeBadGeneration      = "bad_generation"
	CodeBadEncoding        = "bad_encoding"
	CodeTableNotFound      = "table_not_found"
	CodeTableNotReady      = "table_not_ready"
	CodeTableNotConfigured = "table_not_configured"
	CodeTableConfigured    = "table_configured"
	CodeKeyNotFound        = "key_not_found"
	CodeGenerationGone     = "generation_gone"
	CodeNotUTF8            = "not_utf8"
	CodeRunInProgress      = "run_in_progress"
	CodeForbidden          = "forbidden"
	CodeUnauthorized       = "unauthorized" // 401: a listener with allow_remote, without a token it knows
	CodeShuttingDown       = "shutting_down"
	CodeNotReady           = "not_ready"
	CodeRouteNotFound      = "route_not_found"
	CodeMethodNotAllowed   = "method_not_allowed"
	CodeInternal           = "internal"
	CodeGenerationNotFound = "generation_not_found"
	// CodeTableFollowed: POST .../update of a followed table, which its
	// follower keeps current (409).
	CodeTableFollowed = "table_followed"
	// CodeDefinitionChanged: POST .../update of a table the config defines
	// otherwise than it was built (409); the daemon is rebuilding it.
	CodeDefinitionChanged = "definition_changed"
)

// ErrUnreachable is matched (errors.Is) by the error of a request that
// never reached the daemon: the socket file is missing, nobody listens on
// it, or the TCP address refuses the connection.
var ErrUnreachable = errors.New("daemon unreachable")

// Error is an error response of the API: {"error": ..., "code": ...} with
// its HTTP status.
type Error struct {
	// Method and Path are the request's ("GET /v1/tables/x/keys/k").
	Method, Path string
	// Status is the HTTP status code.
	Status int
	// Code is the API's error code (Code* constants); "" when the body
	// was not the API's JSON (a proxy in between, say).
	Code string
	// Message is the API's error text.
	Message string
	// Run is the run already going, on a 409 CodeRunInProgress.
	Run uint64
	// RetryAfter is the Retry-After of a 503 CodeTableNotReady, 0 without.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if e.Code != "" {
		return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Status, e.Code, msg)
	}
	return fmt.Sprintf("%s %s: %d: %s", e.Method, e.Path, e.Status, msg)
}

// IsCode reports whether err is (or wraps) an *Error with code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// retryAfter parses a Retry-After in seconds (the only form the daemon
// sends).
func retryAfter(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// unreachableError is a request that never reached the daemon.
type unreachableError struct {
	addr string
	err  error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("the daemon at %s does not answer: %v", e.addr, e.err)
}

func (e *unreachableError) Unwrap() []error { return []error{ErrUnreachable, e.err} }
