package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/store"
)

// Retries of a failed first build. A configured table never published
// whose build failed for a cause that may pass by itself (exit code 5:
// Kafka or the Schema Registry unavailable, the topic not there yet) is
// built again through the queue after RetryBackoff, doubling to
// RetryBackoffMax. Any other failure (exit 2, 3, 4: a definition, a record
// or an interruption to look at) leaves the table failed until a request
// (POST .../rebuild) or a reload (SIGHUP, which tries every failed first
// build again). A published table is never retried: its old generation is
// served, and its schedule rebuilds it.

// Defaults of Config.RetryBackoff, RetryBackoffMax and ShutdownTimeout.
const (
	DefaultRetryBackoff    = time.Second
	DefaultRetryBackoffMax = time.Minute
	DefaultShutdownTimeout = 30 * time.Second
)

// retriableExit is the exit code of a failure that may pass by itself.
const retriableExit = 5

// retryState is a planned retry of a table's first build, guarded by
// Server.mu.
type retryState struct {
	attempts int           // failed first builds so far, in a row
	backoff  time.Duration // the wait before next
	next     time.Time     // when the retry is queued; zero once it is
}

// json is the retry beside a table's state in GET /v1/tables/{table}.
func (r *retryState) json() *api.Retry {
	return &api.Retry{Next: r.next, Attempts: r.attempts, Backoff: r.backoff}
}

// published reports whether table has a published generation (an error
// other than "not found" counts as published: never retried blindly).
func (s *Server) published(table string) bool {
	s.mu.Lock()
	db := s.db
	s.mu.Unlock()
	if db == nil {
		return false
	}
	_, err := db.Table(table)
	return err == nil || !errors.Is(err, store.ErrTableNotFound)
}

// planRetryLocked plans (or forgets) the retry of table's first build
// after the run that ended with res, and wakes the retry loop. Call with
// s.mu held, in the same critical section that ends the run, so that the
// retry loop never finds the run lock still taken by the run it retries.
func (s *Server) planRetryLocked(table string, res runResult, published bool) {
	_, configured := s.tables[table]
	st := s.state(table)
	if res.Err == nil || published || !configured || res.ExitCode != retriableExit || errors.Is(res.Err, errCancelled) {
		st.retry = nil
		return
	}
	rs := st.retry
	if rs == nil {
		rs = &retryState{}
		st.retry = rs
	}
	rs.attempts++
	rs.backoff = s.cfg.RetryBackoff
	for i := 1; i < rs.attempts && rs.backoff < s.cfg.RetryBackoffMax; i++ {
		rs.backoff *= 2
	}
	rs.backoff = min(rs.backoff, s.cfg.RetryBackoffMax)
	rs.next = s.now().Add(rs.backoff)
	s.cfg.Log.Warn().Str(keyTable, table).Int("attempts", rs.attempts).Dur("retry_in", rs.backoff).
		Msg("the first build failed for a cause that may pass (exit code 5): retrying")
	select {
	case s.retryWake <- struct{}{}:
	default:
	}
}

// retryLoop queues the retries that are due until ctx ends. Run owns it
// (runWG).
func (s *Server) retryLoop(ctx context.Context) {
	for {
		now := s.now()
		var due []string
		var next time.Time
		s.mu.Lock()
		for name, st := range s.runs {
			rs := st.retry
			switch {
			case rs == nil || rs.next.IsZero():
			case !rs.next.After(now):
				rs.next = time.Time{}
				due = append(due, name)
			case next.IsZero() || rs.next.Before(next):
				next = rs.next
			}
		}
		s.mu.Unlock()
		sortStrings(due)
		for _, name := range due {
			if _, err := s.startRun(name, triggerRetry); err != nil && !errors.Is(err, errRunning) {
				s.cfg.Log.Debug().Str(keyTable, name).Err(err).Msg("retry of the first build not queued")
			}
		}
		var timer <-chan time.Time
		var t interface{ Stop() bool }
		if !next.IsZero() {
			ct := s.clock.NewTimer(next.Sub(now))
			t, timer = ct, ct.Chan()
		}
		select {
		case <-ctx.Done():
		case <-s.retryWake:
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// buildFailed answers 503 table_build_failed, and returns true, when
// table's first build failed and no run of it is queued or going: the
// reason, the exit code and the next retry (none: a request or a reload
// retries it).
func (s *Server) buildFailed(w http.ResponseWriter, table string) bool {
	s.mu.Lock()
	st := s.runs[table]
	if st == nil || st.active != nil || st.last == nil || st.last.Err == nil {
		s.mu.Unlock()
		return false
	}
	last := *st.last
	var rj *api.Retry
	if st.retry != nil {
		rj = st.retry.json()
	}
	s.mu.Unlock()
	ae := api.ErrorBody{Code: api.CodeTableBuildFailed, Reason: last.Err.Error(), ExitCode: last.ExitCode}
	if rj != nil && !rj.Next.IsZero() {
		next := rj.Next.UTC().Format(time.RFC3339Nano)
		ae.NextRetry, ae.Attempts = next, rj.Attempts
		if d := s.nextRetryTime(table).Sub(s.now()); d > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(d.Seconds())+1))
		}
		ae.Error = fmt.Sprintf("table %q has not been published: its first build failed (exit code %d) and is tried again at %s (attempt %d)", table, last.ExitCode, next, rj.Attempts+1)
	} else {
		ae.Error = fmt.Sprintf("table %q has not been published: its first build failed (exit code %d); it is not retried by itself: POST /v1/tables/%s/rebuild or a reload (SIGHUP) tries again", table, last.ExitCode, table)
	}
	writeJSON(w, http.StatusServiceUnavailable, ae)
	return true
}

// nextRetryTime is when table's retry is due, zero when none is planned.
func (s *Server) nextRetryTime(table string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.runs[table]; st != nil && st.retry != nil {
		return st.retry.next
	}
	return time.Time{}
}
