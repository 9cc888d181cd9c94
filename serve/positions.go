package serve

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/store"
)

// Read-your-writes (issue 23): every read answer of a table names the
// positions it was read at (api.HeaderPositions, api.HeaderCursor), read in
// the answer's own transaction, and a read with min_positions waits, never
// holding a transaction, until the table has applied them.

// Headers of the positions an answer was read at; api names them.
const (
	HeaderPositions = api.HeaderPositions
	HeaderCursor    = api.HeaderCursor
)

// MaxPositionWaiters bounds the reads that wait for min_positions at once;
// one more is refused with 503 too_many_waiters. A waiting read holds a
// goroutine and a connection, no transaction and no heavy slot.
const MaxPositionWaiters = 1024

// epochs are the daemon's epoch of each table (api.Cursor.Epoch): a random
// nonzero base chosen at the first use, plus one per rollback of the table
// since the daemon started. A cursor of another epoch names positions that
// may have gone back. The zero value is ready to use.
type epochs struct {
	once  sync.Once
	base  uint64
	mu    sync.Mutex
	bumps map[string]uint64
}

func (e *epochs) init() {
	e.once.Do(func() {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
		e.base = binary.BigEndian.Uint64(b[:]) >> 1
		if e.base == 0 {
			e.base = 1
		}
	})
}

// of returns table's epoch: never 0.
func (e *epochs) of(table string) uint64 {
	e.init()
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.base + e.bumps[table]
}

// bump starts a new epoch of table: call it after a commit that may take
// its positions back (a rollback). An answer read between that commit and
// the bump names the old epoch with the new positions: a feed refuses its
// cursor (410) and the client lists again, which is safe; never the
// reverse.
func (e *epochs) bump(table string) {
	e.init()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.bumps == nil {
		e.bumps = map[string]uint64{}
	}
	e.bumps[table]++
}

// Epoch returns the daemon's current epoch of table (api.Cursor.Epoch).
func (s *Server) Epoch(table string) uint64 { return s.epochs.of(table) }

// readState is what an answer was read at: set in its read transaction.
type readState struct {
	gen       uint64
	positions api.Positions // nil: the table has no checkpoint
}

// load reads the snapshot's generation and positions.
func (rs *readState) load(snap *store.Snapshot) error {
	rs.gen = snap.Meta.Generation
	pos, ok, err := snap.Positions()
	if err != nil {
		return fmt.Errorf("table %q: positions: %w", snap.Meta.Name, err)
	}
	rs.positions = nil
	if ok {
		rs.positions = api.Positions(pos)
	}
	return nil
}

// setHeaders names the state an answer was read at: its generation, its
// positions and its cursor, each left out when longer than
// api.MaxHeaderBytes.
func (s *Server) setReadHeaders(w http.ResponseWriter, table string, rs readState) {
	h := w.Header()
	if rs.gen != 0 {
		h.Set(HeaderGeneration, strconv.FormatUint(rs.gen, 10))
	}
	if rs.positions == nil {
		return
	}
	if p := rs.positions.String(); len(p) <= api.MaxHeaderBytes {
		h.Set(HeaderPositions, p)
	}
	c := api.Cursor{Generation: rs.gen, Epoch: s.epochs.of(table), Positions: rs.positions}.String()
	if len(c) <= api.MaxHeaderBytes {
		h.Set(HeaderCursor, c)
	}
}

// clearReadHeaders removes what setReadHeaders set, for an answer that
// fails after them.
func clearReadHeaders(w http.ResponseWriter) {
	for _, k := range []string{HeaderGeneration, HeaderPositions, HeaderCursor} {
		w.Header().Del(k)
	}
}

// waitQuery is a read's min_positions and wait.
type waitQuery struct {
	min  api.Positions // nil: no min_positions
	wait time.Duration
}

// parseWait reads wait=: a Go duration from 0 to api.MaxWait.
func parseWait(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > api.MaxWait {
		return 0, fmt.Errorf("%s %q: want a duration from 0 to %s (e.g. 2s, 500ms)", api.ParamWait, clipText(v), api.MaxWait)
	}
	return d, nil
}

// clipText shortens a text echoed in an error message.
func clipText(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// parseWaitQuery reads min_positions= and wait= of r, and for a POST its
// api.MinPositionsBody (at most api.MaxMinPositionsBody bytes; then
// min_positions= must be absent). It answers 400 and returns false on a
// bad value. wait= without min_positions is refused: it would wait for
// nothing.
func parseWaitQuery(w http.ResponseWriter, r *http.Request) (waitQuery, bool) {
	var q waitQuery
	v := r.URL.Query()
	text, given := v.Get(api.ParamMinPositions), v.Has(api.ParamMinPositions)
	if r.Method == http.MethodPost {
		if given {
			writeError(w, http.StatusBadRequest, api.CodeBadPositions, "min_positions is in the body of a POST, not in its query")
			return q, false
		}
		min, err := readMinBody(r.Body)
		if err != nil {
			writeError(w, http.StatusBadRequest, api.CodeBadPositions, err.Error())
			return q, false
		}
		q.min = min
	} else if given {
		min, err := api.ParsePositions(text)
		if err == nil && len(min) == 0 {
			err = errors.New("empty")
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, api.CodeBadPositions, fmt.Sprintf("%s %q: %v; want PARTITION:POSITION,... with POSITION the offset of a record plus one (e.g. 1:1300,4:77)", api.ParamMinPositions, clipText(text), err))
			return q, false
		}
		q.min = min
	}
	d, err := parseWait(v.Get(api.ParamWait))
	if err != nil {
		writeError(w, http.StatusBadRequest, api.CodeBadWait, err.Error())
		return q, false
	}
	if v.Has(api.ParamWait) && q.min == nil {
		writeError(w, http.StatusBadRequest, api.CodeBadWait, fmt.Sprintf("%s without %s: a read waits only for positions", api.ParamWait, api.ParamMinPositions))
		return q, false
	}
	q.wait = d
	return q, true
}

// readMinBody decodes a POST's api.MinPositionsBody.
func readMinBody(body io.Reader) (api.Positions, error) {
	if body == nil {
		return nil, errors.New("a POST of a read takes a JSON body {\"min_positions\": {\"PARTITION\": POSITION, ...}}")
	}
	b, err := io.ReadAll(io.LimitReader(body, api.MaxMinPositionsBody+1))
	if err != nil {
		return nil, fmt.Errorf("read the body: %w", err)
	}
	if len(b) > api.MaxMinPositionsBody {
		return nil, fmt.Errorf("the body has more than %d bytes", api.MaxMinPositionsBody)
	}
	var mb api.MinPositionsBody
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&mb); err != nil || dec.More() {
		return nil, fmt.Errorf("the body is not {\"min_positions\": {\"PARTITION\": POSITION, ...}}: %v", err)
	}
	if len(mb.MinPositions) == 0 {
		return nil, errors.New("the body's min_positions is empty")
	}
	for p, n := range mb.MinPositions {
		if p < 0 || n < 0 {
			return nil, fmt.Errorf("min_positions %d:%d: partitions and positions are not negative", p, n)
		}
	}
	return mb.MinPositions, nil
}

// notReachedError is a read whose table had not reached min_positions.
type notReachedError struct {
	table string
	min   api.Positions
	rs    readState
}

func (e *notReachedError) Error() string {
	return fmt.Sprintf("table %q has not reached positions %s (it is at %s)", e.table, e.min, e.rs.positions)
}

// missingPartitionsError is a min_positions naming partitions the table
// does not have.
type missingPartitionsError struct {
	table   string
	missing []int32
	rs      readState
}

func (e *missingPartitionsError) Error() string {
	return fmt.Sprintf("min_positions names partitions %v that table %q does not have (it has %s)", e.missing, e.table, e.rs.positions)
}

// errTooManyWaiters: MaxPositionWaiters reads wait already.
var errTooManyWaiters = errors.New("too many reads wait for positions")

// check is called in a read's transaction once rs is loaded: nil when the
// table is at q.min (or q has none), else the error that ends the read
// (a *notReachedError to wait for, a *missingPartitionsError to refuse).
func (q waitQuery) check(table string, rs readState) error {
	if q.min == nil {
		return nil
	}
	reached, missing := rs.positions.Reached(q.min)
	switch {
	case len(missing) > 0:
		return &missingPartitionsError{table: table, missing: missing, rs: rs}
	case !reached:
		return &notReachedError{table: table, min: q.min, rs: rs}
	}
	return nil
}

// readWhenReached runs read (one read transaction, which calls q.check)
// until it does not fail with a *notReachedError, or q.wait has passed
// (then that error is returned), or r's context ends, or the daemon shuts
// down. Between attempts it holds no transaction: it waits on
// db.Changed(table), taken before each attempt so that no commit is
// missed. A read that must wait takes one of MaxPositionWaiters slots
// (errTooManyWaiters when none is free). It renews the connection's write
// deadline once it has waited: the answer's deadline starts when it
// starts.
func (s *Server) readWhenReached(w http.ResponseWriter, r *http.Request, db *store.DB, table string, q waitQuery, read func() error) error {
	var timer *time.Timer
	waited := false
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		if waited {
			s.waiters.Add(-1)
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(writeTimeout))
		}
	}()
	for {
		changed := db.Changed(table)
		err := read()
		var nr *notReachedError
		if !errors.As(err, &nr) || q.wait <= 0 {
			return err
		}
		if !waited {
			if s.waiters.Add(1) > MaxPositionWaiters {
				s.waiters.Add(-1)
				return errTooManyWaiters
			}
			waited = true
			timer = time.NewTimer(q.wait)
		}
		select {
		case <-changed:
		case <-timer.C:
			return err
		case <-r.Context().Done():
			return r.Context().Err()
		case <-s.shutdownStarted():
			return errShuttingDown
		}
	}
}

// errShuttingDown ends a waiting read when shutdown begins.
var errShuttingDown = errors.New("the daemon is shutting down")

// shutdownStarted is closed when shutdown begins (runCtx ends).
func (s *Server) shutdownStarted() <-chan struct{} {
	s.mu.Lock()
	ctx := s.runCtx
	s.mu.Unlock()
	if ctx == nil {
		return context.Background().Done()
	}
	return ctx.Done()
}

// waitError answers the errors of readWhenReached and q.check, and
// returns false for any other error (the caller answers it).
func (s *Server) waitError(w http.ResponseWriter, table string, err error) bool {
	var nr *notReachedError
	var mp *missingPartitionsError
	switch {
	case errors.As(err, &nr):
		s.setReadHeaders(w, table, nr.rs)
		writeJSON(w, http.StatusConflict, api.ErrorBody{Code: api.CodePositionsNotReached, Positions: nr.rs.positions,
			Error: nr.Error() + "; ask again, or with a longer wait= (at most " + api.MaxWait.String() + ")"})
	case errors.As(err, &mp):
		s.setReadHeaders(w, table, mp.rs)
		writeJSON(w, http.StatusBadRequest, api.ErrorBody{Code: api.CodeBadPositions, Positions: mp.rs.positions, Error: mp.Error()})
	case errors.Is(err, errTooManyWaiters):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, api.CodeTooManyWaiters,
			fmt.Sprintf("%d reads wait for positions already (the most the daemon lets wait): ask again, or without wait=", MaxPositionWaiters))
	case errors.Is(err, errShuttingDown):
		writeError(w, http.StatusServiceUnavailable, api.CodeShuttingDown, "the daemon is shutting down")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client went away while it waited: nobody reads an answer.
	default:
		return false
	}
	return true
}
