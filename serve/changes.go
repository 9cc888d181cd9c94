package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/exportdoc"
	"github.com/kmaterialize/kmaterialize/feed"
	"github.com/kmaterialize/kmaterialize/store"
)

// GET /v1/tables/{table}/changes?from=CURSOR: a table's change feed (package
// feed, started and fed by feed.go) as an open stream of JSON lines (api
// changes.go says which). Everything that can be refused is refused before
// the first byte (400, 404, 410, 503); once streaming, the stream ends with
// an error line when the daemon ends it. It never holds a read
// transaction: the commits come from the feed's memory, or a publish's
// from its spool file, read in chunks as the client takes them.

// changesQuery is the changes route's parsed query.
type changesQuery struct {
	from api.Cursor // when !now
	now  bool       // from=now
	b64  bool
}

// parseChanges reads from= (a cursor or "now", once) and encoding=. On a
// bad value it returns the error code and a message for the client.
func parseChanges(v url.Values) (changesQuery, string, error) {
	var q changesQuery
	froms := v[api.ParamFrom]
	switch {
	case len(froms) == 0 || froms[0] == "":
		return q, api.CodeBadCursor, fmt.Errorf("%s= is required: a Kmaterialize-Cursor (of a read answer, or a commit line's cursor), or %s", api.ParamFrom, api.FromNow)
	case len(froms) > 1:
		return q, api.CodeBadCursor, fmt.Errorf("%s= given %d times: give it once", api.ParamFrom, len(froms))
	case froms[0] == api.FromNow:
		q.now = true
	default:
		c, err := api.ParseCursor(froms[0])
		if err != nil {
			return q, api.CodeBadCursor, fmt.Errorf("%s=: %v; want the Kmaterialize-Cursor of a read answer, a commit line's cursor, or %s", api.ParamFrom, err, api.FromNow)
		}
		q.from = c
	}
	b64, err := parseEncoding(v.Get("encoding"))
	if err != nil {
		return q, api.CodeBadEncoding, err
	}
	q.b64 = b64
	return q, "", nil
}

// feedFlushBytes is how much of a commit's lines the stream gathers before
// it writes them: a publish's commit may hold many keys.
const feedFlushBytes = 64 << 10

// changes is the change feed route.
func (s *Server) changes(w http.ResponseWriter, r *http.Request) {
	table, ok := tableParam(w, r)
	if !ok {
		return
	}
	if !checkParams(w, r, api.ParamFrom, "encoding") {
		return
	}
	q, code, err := parseChanges(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, code, err.Error())
		return
	}
	if s.database(w) == nil {
		return
	}
	wt, start, err := s.startFeedWatch(table, q)
	if err != nil {
		s.watchError(w, table, err)
		return
	}
	defer wt.Close()

	rc := http.NewResponseController(w)
	// A stream outlives the server's read timeout (readTimeout): the read
	// deadline is cleared so that the connection's background read, which
	// notices a client that went away, never takes a timeout for a
	// hang-up (net/http does not today: TestChangesOutlivesReadTimeout).
	_ = rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-store")
	setCursorHeaders(h, start)
	dw := &deadlineWriter{w: w, rc: rc}
	dw.deadline()
	// A watcher that stops reading is cut off by its feed (Cut) once it is
	// too far behind: its blocked write gives up after FeedCutGrace, so
	// that it holds neither a place among max_watchers nor the commit it
	// was sent for minutes. One that reads again within the grace gets
	// watcher_too_slow as its last line.
	handlerDone := make(chan struct{})
	defer close(handlerDone)
	go func() {
		select {
		case <-wt.Cut():
			dw.cutOff(s.cfg.FeedCutGrace)
		case <-handlerDone:
		}
	}()
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	var buf bytes.Buffer
	send := func() bool {
		if buf.Len() == 0 {
			return true
		}
		_, err := dw.Write(buf.Bytes())
		buf.Reset()
		return err == nil
	}
	for {
		c, ok, head, err := wt.Next(r.Context(), s.cfg.FeedHeartbeat)
		switch {
		case err != nil && r.Context().Err() != nil:
			return // the client went away
		case err != nil:
			buf.Write(feedErrorLine(err))
			send()
			_ = rc.Flush()
			return
		case !ok:
			buf.Write(stateLine("heartbeat", head))
		default:
			err := eachChange(c, func(ch feed.Change) error {
				line, err := changeLine(ch, q.b64)
				if err != nil {
					return err
				}
				buf.Write(line)
				if buf.Len() >= feedFlushBytes && !send() {
					return errStreamGone
				}
				return nil
			})
			var se *spoolError
			switch {
			case errors.Is(err, errStreamGone):
				return
			case errors.As(err, &se):
				// The client is told what failed, not the file's path:
				// the log has it.
				s.cfg.Log.Error().Err(se.err).Str(keyTable, table).Str("path", se.path).Msg("change feed: reading a spooled commit failed")
				buf.Write(feedErrorLine(errors.New("the daemon could not read this commit's spooled changes (its log says why); list the table again")))
				send()
				_ = rc.Flush()
				return
			case err != nil:
				buf.Write(feedErrorLine(err))
				send()
				_ = rc.Flush()
				return
			}
			buf.Write(stateLine("commit", c.Cursor()))
		}
		if !send() || rc.Flush() != nil {
			return
		}
	}
}

// errStreamGone is how a change feed's send says the client went away.
var errStreamGone = errors.New("the client went away")

// spoolError is an error reading a commit's spool file.
type spoolError struct {
	path string
	err  error
}

func (e *spoolError) Error() string { return e.err.Error() }
func (e *spoolError) Unwrap() error { return e.err }

// eachChange calls fn with each of c's changes in order, from memory or,
// for a spooled commit, from its file, a change at a time (the file is
// read in chunks, never whole): a watcher that does not read holds the
// open file, not memory. Its errors are fn's, or a *spoolError.
func eachChange(c feed.Commit, fn func(feed.Change) error) error {
	if c.Spool == nil {
		for _, ch := range c.Changes {
			if err := fn(ch); err != nil {
				return err
			}
		}
		return nil
	}
	r, err := c.Spool.Open()
	if err != nil {
		return &spoolError{path: c.Spool.Path(), err: err}
	}
	defer r.Close()
	for n := int64(0); ; n++ {
		ch, err := r.Next()
		if err == io.EOF {
			if n != c.Spool.Count() {
				return &spoolError{path: c.Spool.Path(), err: fmt.Errorf("the spooled commit has %d changes, want %d", n, c.Spool.Count())}
			}
			return nil
		}
		if err != nil {
			return &spoolError{path: c.Spool.Path(), err: err}
		}
		if err := fn(ch); err != nil {
			return err
		}
	}
}

// startFeedWatch starts a watcher of table from q's cursor, or from its
// current state; start is the state it watches after. A from=now whose
// head the feed dropped or restarted meanwhile asks again.
func (s *Server) startFeedWatch(table string, q changesQuery) (wt *feed.Watcher, start api.Cursor, err error) {
	start = q.from
	for attempt := 0; ; attempt++ {
		if q.now {
			if start, err = s.feeds.Head(table); err != nil {
				return nil, start, err
			}
		}
		wt, err = s.feeds.Watch(table, start)
		if q.now && errors.Is(err, feed.ErrCursorGone) && attempt < 3 {
			continue
		}
		return wt, start, err
	}
}

// watchError answers a watch refused before its stream.
func (s *Server) watchError(w http.ResponseWriter, table string, err error) {
	switch {
	case errors.Is(err, feed.ErrNoFeed):
		s.readError(w, table, fmt.Errorf("table %q: %w (it has no change feed)", table, store.ErrTableNotFound))
	case errors.Is(err, feed.ErrCursorGone):
		body := api.ErrorBody{Code: api.CodeCursorGone,
			Error: err.Error() + "; list the table again (rows or export) and watch from its Kmaterialize-Cursor"}
		if head, herr := s.feeds.Head(table); herr == nil {
			body.Positions, body.Cursor = head.Positions, head.String()
		}
		writeJSON(w, http.StatusGone, body)
	case errors.Is(err, feed.ErrTooManyWatchers):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, api.CodeTooManyWatchers, err.Error()+": ask again later, or raise max_watchers")
	case errors.Is(err, feed.ErrClosed):
		writeError(w, http.StatusServiceUnavailable, api.CodeShuttingDown, "the daemon is shutting down")
	default:
		s.cfg.Log.Error().Err(err).Str(keyTable, table).Msg("watch failed")
		writeError(w, http.StatusInternalServerError, api.CodeInternal, err.Error())
	}
}

// setCursorHeaders names the state c as a read answer does
// (setReadHeaders), with c's own epoch.
func setCursorHeaders(h http.Header, c api.Cursor) {
	if c.Generation != 0 {
		h.Set(HeaderGeneration, strconv.FormatUint(c.Generation, 10))
	}
	if c.Positions == nil {
		return
	}
	if p := c.Positions.String(); len(p) <= api.MaxHeaderBytes {
		h.Set(HeaderPositions, p)
	}
	if t := c.String(); len(t) <= api.MaxHeaderBytes {
		h.Set(HeaderCursor, t)
	}
}

// changeLine is ch's line: {"key":K,"value":V} or {"key":K,"value":null},
// K and V as exportdoc.Text shows them.
func changeLine(ch feed.Change, b64 bool) ([]byte, error) {
	k, err := exportdoc.Text(ch.Key, ch.Key, "key", b64)
	if err != nil {
		return nil, err
	}
	fc := api.FeedChange{Key: k}
	if !ch.Deleted {
		v, err := exportdoc.Text(ch.Key, ch.Value, "value", b64)
		if err != nil {
			return nil, err
		}
		fc.Value = &v
	}
	line, err := json.Marshal(fc)
	if err != nil {
		return nil, err
	}
	return append(line, '\n'), nil
}

// stateLine is {"commit": STATE} or {"heartbeat": STATE} of c.
func stateLine(kind string, c api.Cursor) []byte {
	st := &api.FeedState{Positions: c.Positions, Generation: c.Generation, Cursor: c.String()}
	if st.Positions == nil {
		st.Positions = api.Positions{}
	}
	var l api.FeedLine
	if kind == "commit" {
		l.Commit = st
	} else {
		l.Heartbeat = st
	}
	line, _ := json.Marshal(l) // plain structs and maps: never fails
	return append(line, '\n')
}

// feedErrorLine is the line that ends a stream because of err.
func feedErrorLine(err error) []byte {
	fe := &api.FeedError{Code: api.CodeInternal, Message: err.Error()}
	switch {
	case errors.Is(err, feed.ErrTooSlow):
		fe.Code, fe.Message = api.CodeWatcherTooSlow, err.Error()+"; resume with from= the last commit's cursor"
	case errors.Is(err, feed.ErrClosed):
		fe.Code, fe.Message = api.CodeShuttingDown, "the daemon is shutting down; resume with from= the last commit's cursor once it serves again"
	case errors.Is(err, feed.ErrCursorGone):
		fe.Code, fe.Message = api.CodeCursorGone, err.Error()+"; list the table again and watch from its cursor"
	case errors.Is(err, exportdoc.ErrNotUTF8):
		fe.Code, fe.Message = api.CodeNotUTF8, err.Error()+"; watch with encoding=base64"
	case errors.Is(err, context.Canceled):
		fe.Code = api.CodeShuttingDown
	}
	line, _ := json.Marshal(api.FeedLine{Error: fe})
	return append(line, '\n')
}
