package client

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/kmaterialize/kmaterialize/api"
)

// Error codes of the API, the Code of an *Error.
const (
	CodeBadRequest         = api.CodeBadRequest
	CodeBadTableName       = api.CodeBadTableName
	CodeBadKey             = api.CodeBadKey
	CodeBadLimit           = api.CodeBadLimit
	CodeBadGeneration      = api.CodeBadGeneration
	CodeBadEncoding        = api.CodeBadEncoding
	CodeTableNotFound      = api.CodeTableNotFound
	CodeTableNotReady      = api.CodeTableNotReady
	CodeTableNotConfigured = api.CodeTableNotConfigured
	CodeTableConfigured    = api.CodeTableConfigured
	CodeKeyNotFound        = api.CodeKeyNotFound
	CodeGenerationGone     = api.CodeGenerationGone
	CodeNotUTF8            = api.CodeNotUTF8
	CodeRunInProgress      = api.CodeRunInProgress
	CodeForbidden          = api.CodeForbidden
	CodeUnauthorized       = api.CodeUnauthorized // 401: a listener with allow_remote, without a token it knows
	CodeShuttingDown       = api.CodeShuttingDown
	CodeNotReady           = api.CodeNotReady
	CodeRouteNotFound      = api.CodeRouteNotFound
	CodeMethodNotAllowed   = api.CodeMethodNotAllowed
	CodeInternal           = api.CodeInternal
	CodeGenerationNotFound = api.CodeGenerationNotFound
	CodeTableFollowed      = api.CodeTableFollowed
	CodeDefinitionChanged  = api.CodeDefinitionChanged
	CodeTableBuildFailed   = api.CodeTableBuildFailed // 503: the first build failed
	CodeRunPublishing      = api.CodeRunPublishing    // 409: a cancel of a run past its replay
	CodeNoRun              = api.CodeNoRun            // 404: a cancel with nothing queued or going
	CodeSpoolFull          = api.CodeSpoolFull        // a spooled answer would pass spool_max_bytes
	CodeBusy               = api.CodeBusy             // max_heavy_requests are running
	CodeBackupRunning      = api.CodeBackupRunning    // 409: a backup is being taken already
	CodeCompactRunning     = api.CodeCompactRunning   // 409: the daemon compacts the database
	CodeNoSpace            = api.CodeNoSpace          // 507: a backup the database's file system cannot hold
	// Read-your-writes (GetOptions): a bad min_positions or wait (400),
	// positions not reached within the wait (409: a
	// *PositionsNotReachedError), too many reads waiting (503).
	CodeBadPositions        = api.CodeBadPositions
	CodeBadWait             = api.CodeBadWait
	CodePositionsNotReached = api.CodePositionsNotReached
	CodeTooManyWaiters      = api.CodeTooManyWaiters
	// Shards (docs/shards.md): a key whose partition the table does not
	// hold (421: Error.Partition and PartitionSet say which, ask a daemon
	// that holds it), a table whose topic's partition count changed
	// (409), a Partition of a table without a partitioner or of a key it
	// does not place (400).
	CodeKeyNotHere     = api.CodeKeyNotHere
	CodeRepartitioned  = api.CodeRepartitioned
	CodeNoPartitioner  = api.CodeNoPartitioner
	CodeKeyNoPartition = api.CodeKeyNoPartition
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
	// Read is what the answer was read at, when it says (a 404
	// key_not_found, a 409 positions_not_reached: then Read.Positions
	// are the table's current positions, from the body).
	Read ReadInfo
	// Partition is the key's partition on a 421 CodeKeyNotHere (0
	// otherwise: read it with the code). PartitionSet are the partitions
	// the table holds, on a 421 and on a partial 404.
	Partition    int32
	PartitionSet []int32
	// Partial is true on a 404 CodeKeyNotFound of a table over a subset
	// of its topic's partitions without a partitioner (api.HeaderPartial):
	// the key may be in another daemon's partitions.
	Partial bool
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

// NotHere returns the key's partition and the partitions the table holds
// when err is (or wraps) a 421 CodeKeyNotHere: ask a daemon that holds
// that partition.
func NotHere(err error) (partition int32, set []int32, ok bool) {
	var e *Error
	if errors.As(err, &e) && e.Code == CodeKeyNotHere {
		return e.Partition, e.PartitionSet, true
	}
	return 0, nil, false
}

// IsPartial reports whether err is (or wraps) a 404 CodeKeyNotFound of a
// shard that cannot tell where the key is (Error.Partial): absent there,
// the key may be held by another daemon.
func IsPartial(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodeKeyNotFound && e.Partial
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
