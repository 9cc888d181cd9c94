package serve

import (
	"sort"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/rs/zerolog"
)

// schedule adds the schedules of defs (those that have one) to sched. A job
// only queues a run (scheduledRun) and returns: the run lock, not gocron's
// singleton mode, keeps one run per table, so that requested and scheduled
// runs exclude each other. An "@every" schedule first fires one interval
// plus the table's fixed offset (everyOffset) after it is added. Call it without s.mu held: gocron's tasks take it.
func (s *Server) schedule(sched gocron.Scheduler, defs []tableDef) {
	for _, def := range defs {
		var jd gocron.JobDefinition
		var opts []gocron.JobOption
		switch {
		case def.every > 0:
			jd = gocron.DurationJob(def.every)
			// A fixed offset from the table's name: tables on one
			// interval, added together, do not all fire at one instant.
			first := s.now().Add(def.every + everyOffset(def.Name, def.every))
			opts = append(opts, gocron.WithStartAt(gocron.WithStartDateTime(first)))
		case def.cron != "":
			jd = gocron.CronJob(def.cron, false)
		default:
			continue
		}
		name := def.Name
		job, err := sched.NewJob(jd, gocron.NewTask(func() { s.scheduledRun(name) }), append(opts, gocron.WithName(name))...)
		if err != nil {
			// validateTables checked the schedule; this is not expected.
			s.cfg.Log.Error().Err(err).Str(keyTable, name).Str("schedule", def.Schedule).Msg("schedule not added")
			continue
		}
		s.mu.Lock()
		s.jobs[name] = job
		s.mu.Unlock()
	}
}

// nextRun returns when table's schedule fires next, or nil.
func (s *Server) nextRun(table string) *time.Time {
	s.mu.Lock()
	job, ok := s.jobs[table]
	s.mu.Unlock()
	if !ok {
		return nil
	}
	t, err := job.NextRun()
	if err != nil || t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// gocronLogger hands gocron's log lines to zerolog at debug level (warnings
// and errors at theirs).
type gocronLogger struct{ log zerolog.Logger }

func (l gocronLogger) Debug(msg string, args ...any) {
	l.log.Debug().Fields(args).Msg("scheduler: " + msg)
}
func (l gocronLogger) Info(msg string, args ...any) {
	l.log.Debug().Fields(args).Msg("scheduler: " + msg)
}
func (l gocronLogger) Warn(msg string, args ...any) {
	l.log.Warn().Fields(args).Msg("scheduler: " + msg)
}
func (l gocronLogger) Error(msg string, args ...any) {
	l.log.Error().Fields(args).Msg("scheduler: " + msg)
}

func sortStrings(s []string) { sort.Strings(s) }
