package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/materialize"
)

// Triggers: why a run started (logged, and a label of the rebuild metrics).
const (
	triggerStart    = "start"    // the table had no published generation at start or on SetTables
	triggerSchedule = "schedule" // its schedule fired
	triggerRequest  = "request"  // POST .../rebuild
	triggerRetry    = "retry"    // a retry of a failed first build (retry.go)
	triggerReload   = "reload"   // SIGHUP: a first build that failed is tried again
)

// Errors returned when a run cannot start.
var (
	// errRunning is returned by startRun when the table has a run going.
	errRunning = errors.New("a run of this table is already running or queued")
	// errStopping is returned by startRun once the daemon is shutting down.
	errStopping = errors.New("the daemon is shutting down")
)

// run is one run of one table (a rebuild or an update), from the moment it
// is queued (queue.go). phase is guarded by Server.mu; result is set
// before done is closed and only read after.
type run struct {
	id      uint64
	table   string
	trigger string
	kind    runKind
	queued  time.Time
	started time.Time // when it left the queue; zero while queued
	phase   runPhase
	// ctx is the run's own context (a child of Server.runBase): cancelled
	// with errCancelled by POST .../cancel, with errShutdown at shutdown.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// rebuildIfNeeded and report are an update's (kindUpdate): its option,
	// and its report, set before done closes.
	rebuildIfNeeded bool
	report          *materialize.Report
	// def is the table's definition when the run left the queue
	// (dispatchLocked), configured whether it had one: a reload after
	// that changes the next run, not this one, whenever its goroutine
	// gets to read it.
	def        tableDef
	configured bool
	done       chan struct{}
	result     runResult
}

// runResult is how a run ended.
type runResult struct {
	ID         uint64
	Err        error
	ExitCode   int
	Generation uint64 // the generation published, 0 when it published nothing
	Records    int64
	Started    time.Time // when it left the queue (a run removed from the queue: when it was queued)
	Ended      time.Time
	Took       time.Duration
}

// runState is one table's run lock and history, guarded by Server.mu.
type runState struct {
	active  *run       // the run queued or going, nil when none: the run lock
	last    *runResult // the last run that ended, nil before the first
	skipped int64      // scheduled runs skipped because one was queued or going
	// recheck: the configured definition changed while a run was going;
	// when it ends, the definitions are compared again (definition.go).
	recheck bool
	// retry is the retry of a failed first build (retry.go); nil when none
	// is planned.
	retry *retryState
	// repartition is the newest run or follower failure of a shard whose
	// topic's partition count changed (shard.go); kept whatever fails or
	// succeeds after it: the count does not change back.
	repartition *materialize.RepartitionedError
}

// noteFailure keeps err when it says the table's topic was repartitioned.
// Call with s.mu held.
func (st *runState) noteFailure(err error) {
	var re *materialize.RepartitionedError
	if errors.As(err, &re) {
		st.repartition = re
	}
}

// state returns the table's run state, creating it. Call with s.mu held.
func (s *Server) state(table string) *runState {
	st := s.runs[table]
	if st == nil {
		st = &runState{}
		s.runs[table] = st
	}
	return st
}

// startRun queues a rebuild of a configured table (queue.go). It returns
// errRunning (and the run queued or going) when the table's run lock is
// taken, errStopping once Run is shutting down or not running.
func (s *Server) startRun(name, trigger string) (*run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tables[name]; !ok && s.db != nil && !s.stopping {
		return nil, fmt.Errorf("table %q is not configured", name)
	}
	// A rebuild that following's failure needs goes first: the table is
	// served as last applied meanwhile and falls behind.
	return s.newRunLocked(name, trigger, kindRebuild, trigger == triggerFollow, nil)
}

// runWork is a run kind's own part of a run (runKind): its work, its log
// lines and what follows its end. execute does the rest, the same for
// every kind.
type runWork struct {
	// what names the work in a panic's error: "rebuild", "update".
	what string
	// do does the work, logging its start; runLog has the run's fields
	// but not the table (materialize adds it), log has them all.
	do func(runLog, log zerolog.Logger) (materialize.Report, error)
	// logEnd logs the outcome: res.Err nil is a publish.
	logEnd func(log zerolog.Logger, res runResult, rep materialize.Report)
	// recordsRead is what a published run read, for the records metric.
	recordsRead func(rep materialize.Report) int64
	// firstBuild: a failed run may be a failed first build, whose retry
	// execute plans (retry.go). An update never builds a first
	// generation: it leaves a planned retry alone.
	firstBuild bool
	// endLocked (if not nil) runs with s.mu held, in the critical section
	// that releases the run lock; after (if not nil) runs once it is
	// released.
	endLocked func(rep materialize.Report)
	after     func(err error)
}

// execute runs r: its kind's work (rebuildWork, updateWork), a panic
// turned into an error (one bad table must not end the daemon that serves
// the others); then it logs and counts the outcome, releases the run lock
// and closes r.done.
func (s *Server) execute(r *run) {
	// The work's lines get the table from materialize (see Table.Build).
	runLog := s.cfg.Log.With().Uint64("run", r.id).Str("trigger", r.trigger).Logger()
	log := runLog.With().Str(keyTable, r.table).Logger()
	var w runWork
	switch r.kind {
	case kindUpdate:
		w = s.updateWork(r)
	default:
		w = s.rebuildWork(r)
	}
	rep, err := func() (rep materialize.Report, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("%s of table %q panicked: %v\n%s", w.what, r.table, p, debug.Stack())
			}
		}()
		return w.do(runLog, log)
	}()
	err = cancelled(r, err)
	res := runResult{ID: r.id, Err: err, ExitCode: s.cfg.ExitCode(err), Started: r.started, Ended: s.now(), Took: s.now().Sub(r.started)}
	if err == nil {
		res.Generation, res.Records = rep.Meta.Generation, rep.Meta.Records
	}
	w.logEnd(log, res, rep)
	s.metrics.runEnded(r.table, res, w.recordsRead(rep))
	published := w.firstBuild && (err == nil || s.published(r.table))
	s.mu.Lock()
	if w.firstBuild {
		s.planRetryLocked(r.table, res, published)
	}
	s.endRunLocked(r, res)
	if w.endLocked != nil {
		w.endLocked(rep)
	}
	s.mu.Unlock()
	if w.after != nil {
		w.after(err)
	}
	s.recheckDefinition(r.table)
	close(r.done)
}

// rebuildWork is a rebuild's part of r: the table's Build (or its
// follower's Rebuild) by its definition as configured when the run leaves
// the queue; a followed table follows again once it ends.
func (s *Server) rebuildWork(r *run) runWork {
	def, configured := r.def, r.configured
	paused := false
	return runWork{
		what: "rebuild",
		do: func(runLog, log zerolog.Logger) (materialize.Report, error) {
			if !configured {
				return materialize.Report{}, fmt.Errorf("table %q is no longer configured (removed by a reload while its rebuild was queued)", r.table)
			}
			log.Info().Msg("rebuild started")
			ctx := materialize.WithReplayed(r.ctx, s.replayed(r))
			if def.Follow != nil {
				return def.Follow.Rebuild(ctx, s.db, runLog, s.catchUpFunc(def.Name))
			}
			return def.Build(ctx, s.db, runLog)
		},
		logEnd: func(log zerolog.Logger, res runResult, rep materialize.Report) {
			if res.Err == nil {
				log.Info().Uint64(keyGeneration, res.Generation).Int64("keys", rep.Meta.Keys).Int64("took_ms", res.Took.Milliseconds()).Msg("rebuild published")
			} else {
				log.Error().Err(res.Err).Int("exit_code", res.ExitCode).Msg("rebuild failed; the previous generation stays served")
			}
		},
		recordsRead: func(rep materialize.Report) int64 { return rep.Meta.Records },
		firstBuild:  true,
		endLocked: func(materialize.Report) {
			// The run's catch-up paused the follower: the run's end, and
			// only it, resumes it.
			if fs := s.follows[r.table]; fs != nil {
				paused, fs.paused = fs.paused, false
			}
		},
		after: func(err error) {
			// A followed table follows its new generation, or, when the
			// rebuild failed after stopping the follower for its
			// catch-up, the old one.
			if configured && def.Follow != nil && (err == nil || paused) {
				s.startFollow(r.table)
			}
		},
	}
}

// recheckDefinition rebuilds table when its definition changed while a
// run was going (runState.recheck) and still differs.
func (s *Server) recheckDefinition(table string) {
	s.mu.Lock()
	st := s.state(table)
	recheck := st.recheck
	st.recheck = false
	s.mu.Unlock()
	if recheck {
		s.rebuildChanged([]string{table})
	}
}

// scheduledRun is a schedule's task: it queues a run unless one is queued
// or going, in which case it is skipped, logged and counted.
func (s *Server) scheduledRun(name string) {
	r, err := s.startRun(name, triggerSchedule)
	switch {
	case errors.Is(err, errRunning):
		s.mu.Lock()
		s.state(name).skipped++
		s.mu.Unlock()
		s.metrics.skipped(name)
		s.cfg.Log.Warn().Str(keyTable, name).Uint64("running", r.id).Str("phase", s.phaseOf(r)).Msg("scheduled rebuild skipped: a run of this table is still queued or running")
	case err != nil:
		s.cfg.Log.Debug().Str(keyTable, name).Err(err).Msg("scheduled rebuild not started")
	}
}

// phaseOf returns r's phase as text.
func (s *Server) phaseOf(r *run) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return r.phase.String()
}

// waitRun waits for r to end or ctx to, whichever is first.
func waitRun(ctx context.Context, r *run) (runResult, bool) {
	select {
	case <-r.done:
		return r.result, true
	case <-ctx.Done():
		return runResult{}, false
	}
}

// rebuild starts a run of a configured table, as configured: the request
// carries no options.
func (s *Server) rebuild(w http.ResponseWriter, r *http.Request) {
	table, ok := tableParam(w, r)
	if !ok {
		return
	}
	if !checkParams(w, r, "wait") {
		return
	}
	wait, err := parseBool("wait", r.URL.Query().Get("wait"))
	if err != nil {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, err.Error())
		return
	}
	if r.ContentLength > 0 {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "a rebuild request carries no body: the daemon's config decides how the table is built")
		return
	}
	s.mu.Lock()
	_, configured := s.tables[table]
	s.mu.Unlock()
	if !configured {
		writeError(w, http.StatusNotFound, api.CodeTableNotConfigured,
			fmt.Sprintf("table %q is not in the daemon's config, so the daemon cannot rebuild it; add it to the config and reload (SIGHUP)", table))
		return
	}
	run, err := s.startRun(table, triggerRequest)
	switch {
	case errors.Is(err, errRunning):
		writeJSON(w, http.StatusConflict, api.ErrorBody{Error: fmt.Sprintf("a run of table %q is already running or queued (run %d; POST /v1/tables/%s/cancel cancels it)", table, run.id, table), Code: api.CodeRunInProgress, Run: run.id})
		return
	case errors.Is(err, errStopping):
		writeError(w, http.StatusServiceUnavailable, api.CodeShuttingDown, err.Error())
		return
	case err != nil:
		writeError(w, http.StatusNotFound, api.CodeTableNotConfigured, err.Error())
		return
	}
	if !wait {
		writeJSON(w, http.StatusAccepted, api.RebuildResult{Run: run.id})
		return
	}
	// A rebuild takes as long as it takes: no write deadline while waiting.
	// (The read deadline is no concern: net/http clears it for the
	// background read that watches for the client going away.)
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	res, done := waitRun(r.Context(), run)
	if !done {
		return // the client went away; the run goes on
	}
	out := api.RebuildResult{Run: res.ID, Done: true, ExitCode: res.ExitCode, Generation: res.Generation}
	if res.Err != nil {
		out.Error = res.Err.Error()
	}
	if res.Generation == 0 {
		// The run published nothing: the generation still served.
		db := s.database(w)
		if db == nil {
			return
		}
		if m, err := db.Table(table); err == nil {
			out.Generation = m.Generation
		}
	}
	writeJSON(w, http.StatusOK, out)
}
