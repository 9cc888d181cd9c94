package serve

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/materialize"
)

// Triggers: why a run started (logged, and a label of the rebuild metrics).
const (
	triggerStart    = "start"    // the table had no published generation at start or on SetTables
	triggerSchedule = "schedule" // its schedule fired
	triggerRequest  = "request"  // POST .../rebuild
)

// Errors returned when a run cannot start.
var (
	// errRunning is returned by startRun when the table has a run going.
	errRunning = errors.New("a rebuild of this table is already running")
	// errStopping is returned by startRun once the daemon is shutting down.
	errStopping = errors.New("the daemon is shutting down")
)

// run is one rebuild of one table. Its fields are set before done is
// closed and only read after.
type run struct {
	id      uint64
	table   string
	trigger string
	started time.Time
	done    chan struct{}
	result  runResult
}

// runResult is how a run ended.
type runResult struct {
	ID         uint64
	Err        error
	ExitCode   int
	Generation uint64 // the generation published, 0 when it published nothing
	Records    int64
	Ended      time.Time
	Took       time.Duration
}

// runState is one table's run lock and history, guarded by Server.mu.
type runState struct {
	active  *run       // nil when no run is going: the run lock
	last    *runResult // the last run that ended, nil before the first
	skipped int64      // scheduled runs skipped because one was going
	// recheck: the configured definition changed while a run was going;
	// when it ends, the definitions are compared again (definition.go).
	recheck bool
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

// startRun takes the table's run lock and starts its Build in a goroutine
// owned by Run (runWG). It returns errRunning (and the going run) when the
// lock is taken, errStopping once Run is shutting down or not running.
func (s *Server) startRun(name, trigger string) (*run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil || s.stopping {
		return nil, errStopping
	}
	def, ok := s.tables[name]
	if !ok {
		return nil, fmt.Errorf("table %q is not configured", name)
	}
	st := s.state(name)
	if st.active != nil {
		return st.active, errRunning
	}
	s.runSeq++
	r := &run{id: s.runSeq, table: name, trigger: trigger, started: s.now(), done: make(chan struct{})}
	st.active = r
	s.runWG.Add(1)
	go func() {
		defer s.runWG.Done()
		s.execute(r, def)
	}()
	return r, nil
}

// execute runs def.Build for r, records its outcome and releases the run
// lock.
func (s *Server) execute(r *run, def tableDef) {
	// The build's lines get the table from materialize (see Table.Build).
	runLog := s.cfg.Log.With().Uint64("run", r.id).Str("trigger", r.trigger).Logger()
	log := runLog.With().Str(keyTable, r.table).Logger()
	log.Info().Msg("rebuild started")
	rep, err := s.build(def, runLog)
	res := runResult{ID: r.id, Err: err, ExitCode: s.cfg.ExitCode(err), Ended: s.now(), Took: s.now().Sub(r.started)}
	if err == nil {
		res.Generation = rep.Meta.Generation
		res.Records = rep.Meta.Records
		log.Info().Uint64(keyGeneration, res.Generation).Int64("keys", rep.Meta.Keys).Int64("took_ms", res.Took.Milliseconds()).Msg("rebuild published")
	} else {
		log.Error().Err(err).Int("exit_code", res.ExitCode).Msg("rebuild failed; the previous generation stays served")
	}
	s.metrics.runEnded(r.table, res, rep)
	s.mu.Lock()
	st := s.state(r.table)
	st.active = nil
	st.last = &res
	r.result = res
	// The run's catch-up paused the follower: the run's end, and only it,
	// resumes it.
	paused := false
	if fs := s.follows[r.table]; fs != nil {
		paused, fs.paused = fs.paused, false
	}
	s.mu.Unlock()
	// A followed table follows its new generation, or, when the rebuild
	// failed after stopping the follower for its catch-up, the old one.
	if def.Follow != nil && (err == nil || paused) {
		s.startFollow(r.table)
	}
	s.recheckDefinition(r.table)
	close(r.done)
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

// build calls def.Build, turning a panic into an error: one bad table must
// not end the daemon that serves the others.
func (s *Server) build(def tableDef, log zerolog.Logger) (rep materialize.Report, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("rebuild of table %q panicked: %v\n%s", def.Name, p, debug.Stack())
		}
	}()
	if def.Follow != nil {
		return def.Follow.Rebuild(s.runCtx, s.db, log, s.catchUpFunc(def.Name))
	}
	return def.Build(s.runCtx, s.db, log)
}

// scheduledRun is a schedule's task: it starts a run unless one is going,
// in which case it is skipped, logged and counted.
func (s *Server) scheduledRun(name string) {
	r, err := s.startRun(name, triggerSchedule)
	switch {
	case errors.Is(err, errRunning):
		s.mu.Lock()
		s.state(name).skipped++
		s.mu.Unlock()
		s.metrics.skipped(name)
		s.cfg.Log.Warn().Str(keyTable, name).Uint64("running", r.id).Msg("scheduled rebuild skipped: a rebuild of this table is still running")
	case err != nil:
		s.cfg.Log.Debug().Str(keyTable, name).Err(err).Msg("scheduled rebuild not started")
	}
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
