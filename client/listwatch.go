package client

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sink is a copy of a table that ListThenWatch keeps current. Its methods
// are called from ListThenWatch's goroutine, one at a time.
type Sink interface {
	// Reset empties the copy: a list (again) follows.
	Reset() error
	// Put sets key's value; Delete removes key (it may be absent).
	Put(key, value []byte) error
	Delete(key []byte) error
	// Commit says the copy now equals the table at positions (nil for a
	// table without a checkpoint).
	Commit(positions Positions) error
}

// sinkError is an error of the Sink, returned as is.
type sinkError struct{ err error }

func (e sinkError) Error() string { return e.err.Error() }
func (e sinkError) Unwrap() error { return e.err }

// Bounds of ListThenWatch's retries.
const (
	watchRetryMin = 200 * time.Millisecond
	watchRetryMax = 10 * time.Second
)

// ListThenWatch keeps sink a copy of table until ctx ends (it returns
// ctx's error) or a Sink method fails (that error, as is): it lists the
// table (Rows, base64, the first page's cursor from OnPage), then Watches
// from that cursor, applying each change. Once a commit is at or past the
// positions of the list's last page (at once when every page was read at
// the same state), the copy equals the table at each commit, which it
// hands to sink.Commit. A 410 (ErrCursorGone), a rows scan whose
// generation was replaced (CodeGenerationGone) or a feed restarted lists
// again after sink.Reset; a watcher cut off (ErrWatcherTooSlow), a daemon
// shutting down or unreachable, too many watchers, or a broken stream
// resume from the last commit's cursor after a pause (200ms, doubling to
// 10s, reset by a commit). Any other refusal (an unknown table, a bad
// request) is returned.
func (c *Client) ListThenWatch(ctx context.Context, table string, sink Sink) error {
	pause := watchRetryMin
	wait := func() error {
		t := time.NewTimer(pause)
		defer t.Stop()
		pause = min(2*pause, watchRetryMax)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
	for {
		cursor, last, consistent, err := c.listInto(ctx, table, sink)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, new(sinkError)):
			return errors.Unwrap(err)
		case IsCode(err, CodeGenerationGone):
			continue
		case retriable(err):
			if err := wait(); err != nil {
				return err
			}
			continue
		case err != nil:
			return err
		}
		if consistent {
			if err := sink.Commit(last); err != nil {
				return err
			}
		}
		for {
			err = c.Watch(ctx, table, cursor, func(ev Event) error {
				var err error
				switch {
				case ev.Change != nil && ev.Change.Deleted:
					err = sink.Delete(ev.Change.Key)
				case ev.Change != nil:
					err = sink.Put(ev.Change.Key, ev.Change.Value)
				case ev.Commit != nil:
					cursor, pause = ev.Commit.Cursor, watchRetryMin
					if !consistent {
						consistent, _ = ev.Commit.Positions.Reached(last)
					}
					if consistent {
						err = sink.Commit(ev.Commit.Positions)
					}
				}
				if err != nil {
					return sinkError{err}
				}
				return nil
			})
			switch {
			case ctx.Err() != nil:
				return ctx.Err()
			case errors.As(err, new(sinkError)):
				return errors.Unwrap(err)
			case errors.Is(err, ErrCursorGone):
			case retriable(err):
				if err := wait(); err != nil {
					return err
				}
				continue
			default:
				return err
			}
			break // list again
		}
	}
}

// retriable reports whether a list or watch that failed with err may pass
// when asked again: an answer of the daemon that says so, an unreachable
// daemon, or a transport error (no *Error at all).
func retriable(err error) bool {
	var e *Error
	switch {
	case errors.Is(err, ErrWatcherTooSlow), errors.Is(err, ErrFeedShuttingDown), errors.Is(err, ErrUnreachable):
		return true
	case errors.As(err, &e):
		return e.Code == CodeTooManyWatchers || e.Code == CodeShuttingDown || e.Code == CodeTableNotReady
	case errors.As(err, new(*FeedError)):
		return false
	}
	return err != nil
}

// listInto resets sink and lists table into it: cursor is the first
// page's, last the positions of the last page, consistent whether every
// page was read at the same state (then the copy is the table at last).
func (c *Client) listInto(ctx context.Context, table string, sink Sink) (cursor string, last Positions, consistent bool, err error) {
	if err := sink.Reset(); err != nil {
		return "", nil, false, sinkError{err}
	}
	consistent = true
	first := true
	var lastCursor string
	_, err = c.Rows(ctx, table, RowsOptions{Base64: true, OnPage: func(ri ReadInfo) {
		if first {
			cursor, first = ri.Cursor, false
		}
		consistent = consistent && (lastCursor == "" || ri.Cursor == lastCursor)
		lastCursor, last = ri.Cursor, ri.Positions
	}}, func(r Row) error {
		if err := sink.Put(r.Key, r.Value); err != nil {
			return sinkError{err}
		}
		return nil
	})
	if err == nil && cursor == "" {
		err = fmt.Errorf("list table %q: its first page names no cursor (positions past 4 KiB, or a table without a checkpoint): it cannot be watched", table)
	}
	return cursor, last, consistent, err
}
