package serve

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"
)

// The run queue: every run (a start build, a scheduled, requested,
// definition or rebuild_if_needed rebuild, a retry of a failed first build,
// POST update) is admitted here. At most Config.MaxConcurrentRuns runs go
// at once; the others wait in one FIFO queue, a table's run lock (its
// runState.active) held from the moment it is queued, so that a table has
// at most one run queued or going. A rebuild that rebuild_if_needed starts
// because following stopped goes to the front: the table is being served
// as last applied and falls behind meanwhile.
//
// A run's phase moves queued -> reading -> publishing. Reading is the
// replay (Kafka); publishing is what follows it (the merge of spilled
// runs, the publish transaction), which reads nothing and ends by itself.
// A cancel (POST .../cancel, or shutdown) removes a queued run, cancels a
// reading one (it fails cleanly, nothing published), and leaves a
// publishing one to finish.

// DefaultMaxConcurrentRuns is Config.MaxConcurrentRuns's default.
const DefaultMaxConcurrentRuns = 1

// runPhase is where a run is; guarded by Server.mu.
type runPhase int

const (
	phaseQueued     runPhase = iota // in the queue, not started
	phaseReading                    // started, replaying its topic
	phasePublishing                 // past its replay: merging, publishing
)

func (p runPhase) String() string {
	switch p {
	case phaseQueued:
		return "queued"
	case phaseReading:
		return "reading"
	}
	return "publishing"
}

// runKind says what a run executes.
type runKind int

const (
	kindRebuild runKind = iota // Table.Build, or FollowSettings.Rebuild
	kindUpdate                 // Config.Update
)

// errCancelled is the cause of a run's context when it is cancelled; a
// cancelled run's error wraps it and says "cancelled".
var errCancelled = errors.New("cancelled")

// CancelledError is a run's error when it was cancelled: removed from the
// queue, or cancelled while it read its topic. Nothing was published.
type CancelledError struct {
	Why string // "by request" or "at shutdown"
	Err error  // the run's own error once it stopped; nil for a queued run
}

func (e *CancelledError) Error() string {
	if e.Err == nil {
		return "cancelled " + e.Why + " before it started; nothing published"
	}
	return "cancelled " + e.Why + ": " + e.Err.Error()
}

// Is makes errors.Is(err, context.Canceled) hold: a cancel is an
// interruption (exit code and metrics say so).
func (e *CancelledError) Is(target error) bool {
	return target == context.Canceled || target == errCancelled
}

func (e *CancelledError) Unwrap() error { return e.Err }

// newRunLocked creates a run of table, holding its run lock, and queues it
// (front: before every queued run), init (if not nil) setting its fields
// before it can start. It returns errRunning with the run
// going or queued when the lock is taken, errStopping once the daemon is
// shutting down. Call with s.mu held.
func (s *Server) newRunLocked(table, trigger string, kind runKind, front bool, init func(*run)) (*run, error) {
	if s.db == nil || s.stopping {
		return nil, errStopping
	}
	st := s.state(table)
	if st.active != nil {
		return st.active, errRunning
	}
	s.runSeq++
	r := &run{id: s.runSeq, table: table, trigger: trigger, kind: kind, queued: s.now(), done: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancelCause(s.runBase)
	if init != nil {
		init(r)
	}
	st.active = r
	if front {
		s.queue = append([]*run{r}, s.queue...)
	} else {
		s.queue = append(s.queue, r)
	}
	s.dispatchLocked()
	return r, nil
}

// dispatchLocked starts queued runs, oldest first, while fewer than
// MaxConcurrentRuns go. Each goroutine is owned by Run (runWG). Call with
// s.mu held.
func (s *Server) dispatchLocked() {
	for len(s.queue) > 0 && s.running < s.cfg.MaxConcurrentRuns && !s.stopping {
		r := s.queue[0]
		s.queue = s.queue[1:]
		r.phase, r.started = phaseReading, s.now()
		r.def, r.configured = s.tables[r.table]
		s.running++
		s.runWG.Add(1)
		go func() {
			defer s.runWG.Done()
			s.execute(r)
		}()
	}
}

// endRunLocked records r's result, releases its table's run lock and
// starts what the queue allows. Call with s.mu held, r started.
func (s *Server) endRunLocked(r *run, res runResult) {
	st := s.state(r.table)
	st.active = nil
	st.last = &res
	st.noteFailure(res.Err)
	r.result = res
	s.running--
	s.dispatchLocked()
}

// removeQueuedLocked takes r out of the queue and ends it as cancelled
// (why), closing its done. It returns false when r is not queued. Call
// with s.mu held.
func (s *Server) removeQueuedLocked(r *run, why string) bool {
	for i, q := range s.queue {
		if q != r {
			continue
		}
		s.queue = append(s.queue[:i:i], s.queue[i+1:]...)
		now := s.now()
		res := runResult{ID: r.id, Err: &CancelledError{Why: why}, Started: r.queued, Ended: now}
		res.ExitCode = s.cfg.ExitCode(res.Err)
		st := s.state(r.table)
		st.active = nil
		st.last = &res
		r.result = res
		r.cancel(errCancelled)
		close(r.done)
		return true
	}
	return false
}

// replayed is the hook materialize calls once a run's replay has read
// everything (materialize.WithReplayed): from then on the run is
// publishing and a cancel leaves it to finish. A run whose context was
// cancelled first stays reading: it fails at its next check.
func (s *Server) replayed(r *run) func() {
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if r.ctx.Err() == nil && r.phase == phaseReading {
			r.phase = phasePublishing
		}
	}
}

// cancelled wraps a run's error when its context was cancelled (by
// request or at shutdown), so that its last_error says "cancelled".
func cancelled(r *run, err error) error {
	if err == nil || r.ctx.Err() == nil {
		return err
	}
	why := "by request"
	if c := context.Cause(r.ctx); c != nil && errors.Is(c, errShutdown) {
		why = "at shutdown"
	}
	return &CancelledError{Why: why, Err: err}
}

// errShutdown is the cause of the runs cancelled at shutdown.
var errShutdown = fmt.Errorf("%w: the daemon is shutting down", errCancelled)

// Cancel outcomes.
var (
	// errNoRun is returned by cancelRun when the table has no run queued
	// or going.
	errNoRun = errors.New("no run of this table is queued or going")
	// errPublishing is returned by cancelRun for a run past its replay:
	// it merges or publishes, reads nothing, and ends by itself.
	errPublishing = errors.New("the run is past its replay (merging or publishing) and ends by itself")
)

// cancelRun cancels table's run: a queued one is removed (its result:
// cancelled), a reading one is cancelled (it fails, nothing published),
// a publishing one is errPublishing. It returns the run and the phase it
// was in.
func (s *Server) cancelRun(table string) (*run, runPhase, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.runs[table]
	if st == nil || st.active == nil {
		return nil, 0, errNoRun
	}
	r := st.active
	switch p := r.phase; p {
	case phaseQueued:
		s.removeQueuedLocked(r, "by request")
		return r, p, nil
	case phaseReading:
		r.cancel(errCancelled)
		return r, p, nil
	}
	return r, r.phase, errPublishing
}

// everyOffset is the fixed offset of an "@every" schedule of table: a hash
// of its name within min(10% of the interval, 30s), so that tables on the
// same interval do not all start at the same instant (and queue).
func everyOffset(table string, every time.Duration) time.Duration {
	spread := min(every/10, 30*time.Second)
	ms := spread.Milliseconds()
	if ms <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(table))
	return time.Duration(h.Sum64()%uint64(ms)) * time.Millisecond
}
