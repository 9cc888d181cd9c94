package client

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/kmaterialize/kmaterialize/api"
)

// FromNow, as Watch's from, starts at the table's current state.
const FromNow = api.FromNow

// Codes of the change feed: a from that is not a cursor (400), a cursor
// the daemon no longer keeps (410), too many feeds open (503), and the
// error lines that end a stream.
const (
	CodeBadCursor       = api.CodeBadCursor
	CodeCursorGone      = api.CodeCursorGone
	CodeTooManyWatchers = api.CodeTooManyWatchers
	CodeWatcherTooSlow  = api.CodeWatcherTooSlow
)

// Errors of Watch, matched with errors.Is.
var (
	// ErrCursorGone: the cursor is older than what the daemon keeps, of an
	// earlier epoch (a rollback, a daemon restart), or the table's feed
	// restarted: list the table again and watch from the list's cursor.
	// A 410 answer is also an *Error (its Read has the table's positions
	// and cursor).
	ErrCursorGone = errors.New("cursor gone")
	// ErrWatcherTooSlow: the daemon cut the watcher off for falling too
	// far behind: watch again from the last Commit's cursor.
	ErrWatcherTooSlow = errors.New("watcher too slow")
	// ErrFeedShuttingDown: the daemon ended the stream as it shuts down:
	// watch again from the last Commit's cursor once it serves.
	ErrFeedShuttingDown = errors.New("the daemon is shutting down")
)

// Event is one line of a change feed: exactly one of its fields is set.
type Event struct {
	Change    *Change
	Commit    *Commit
	Heartbeat *Heartbeat
}

// Change is one key's state after a commit: its new value, or deleted.
type Change struct {
	Key, Value []byte // Value nil when Deleted
	Deleted    bool
}

// Commit follows the Changes of one atomic commit of the table: a copy
// that applied every Change so far holds the table at Positions. Cursor
// resumes after it (Watch's from).
type Commit struct {
	Positions  Positions
	Generation uint64
	Cursor     string
}

// Heartbeat says nothing changed: the table is still at Positions.
type Heartbeat struct {
	Positions Positions
	Cursor    string
}

// FeedError is a stream the daemon ended with an error line: it matches
// ErrWatcherTooSlow, ErrFeedShuttingDown or ErrCursorGone by its code.
type FeedError struct {
	Table   string
	Code    string
	Message string
}

func (e *FeedError) Error() string {
	return fmt.Sprintf("change feed of table %q: %s: %s", e.Table, e.Code, e.Message)
}

// Is matches the sentinel of e's code.
func (e *FeedError) Is(target error) bool {
	switch e.Code {
	case CodeWatcherTooSlow:
		return target == ErrWatcherTooSlow
	case CodeShuttingDown:
		return target == ErrFeedShuttingDown
	case CodeCursorGone:
		return target == ErrCursorGone
	}
	return false
}

// goneError is a 410 answer: an *Error that matches ErrCursorGone.
type goneError struct{ err *Error }

func (e goneError) Error() string   { return e.err.Error() }
func (e goneError) Unwrap() []error { return []error{e.err, ErrCursorGone} }

// maxFeedLine bounds one line of a feed (a key and a value of at most the
// daemon's bounds, base64-encoded): 256 MiB.
const maxFeedLine = 256 << 20

// Watch reads table's change feed (GET /v1/tables/{table}/changes) from
// from (a ReadInfo.Cursor of a list, a Commit's Cursor, or FromNow) and
// calls fn with each line until ctx ends (then it returns ctx's error),
// fn returns an error (returned as is), or the stream ends: with a
// *FeedError the daemon sent, or a transport error. Keys and values are
// sent base64-encoded, so any bytes come through. A refused watch is an
// *Error: a 410 also matches ErrCursorGone.
func (c *Client) Watch(ctx context.Context, table, from string, fn func(Event) error) error {
	path := tablePath(table, "/changes")
	q := url.Values{api.ParamFrom: {from}, "encoding": {"base64"}}
	resp, err := c.send(ctx, http.MethodGet, path, q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		e := responseError(http.MethodGet, path, resp)
		if resp.StatusCode == http.StatusGone {
			return goneError{e}
		}
		return e
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for n := 1; ; n++ {
		line, err := readLine(br)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // the daemon ends a stream with an error line
			}
			return fmt.Errorf("GET %s: line %d: %w", path, n, err)
		}
		ev, ferr, err := parseFeedLine(line)
		if err != nil {
			return fmt.Errorf("GET %s: line %d: %w", path, n, err)
		}
		if ferr != nil {
			ferr.Table = table
			return ferr
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
}

// readLine reads one line up to maxFeedLine bytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, err := br.ReadSlice('\n')
		line = append(line, part...)
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			if len(line) > maxFeedLine {
				return nil, fmt.Errorf("a line of more than %d bytes", maxFeedLine)
			}
		default:
			return nil, err
		}
	}
}

// parseFeedLine decodes one line (base64 keys and values): an event, or
// the error line that ends the stream.
func parseFeedLine(line []byte) (Event, *FeedError, error) {
	var l api.FeedLine
	if err := json.Unmarshal(line, &l); err != nil {
		return Event{}, nil, err
	}
	switch {
	case l.Key != nil:
		k, err := base64.StdEncoding.DecodeString(*l.Key)
		if err != nil {
			return Event{}, nil, fmt.Errorf("key: %w", err)
		}
		ch := &Change{Key: k, Deleted: l.Value == nil}
		if l.Value != nil {
			if ch.Value, err = base64.StdEncoding.DecodeString(*l.Value); err != nil {
				return Event{}, nil, fmt.Errorf("value of key %q: %w", k, err)
			}
		}
		return Event{Change: ch}, nil, nil
	case l.Commit != nil:
		return Event{Commit: &Commit{Positions: l.Commit.Positions, Generation: l.Commit.Generation, Cursor: l.Commit.Cursor}}, nil, nil
	case l.Heartbeat != nil:
		return Event{Heartbeat: &Heartbeat{Positions: l.Heartbeat.Positions, Cursor: l.Heartbeat.Cursor}}, nil, nil
	case l.Error != nil:
		return Event{}, &FeedError{Code: l.Error.Code, Message: l.Error.Message}, nil
	}
	return Event{}, nil, fmt.Errorf("a line of no known kind: %.100q", line)
}
