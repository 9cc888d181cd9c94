package serve

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/store"
)

// DefaultMaxLag is FollowSettings.MaxLag's default: the most records a followed
// table may be behind its topic's high watermarks, on any partition, for
// /readyz to count it ready.
const DefaultMaxLag = 10000

// triggerFollow: a run started because following failed and the table is
// configured to rebuild when needed.
const triggerFollow = "follow"

// FollowSettings are how the daemon keeps a table current between rebuilds
// (follow: true in the config). serve never talks to Kafka: Run and
// Rebuild are the caller's (materialize.KeepCurrent, materialize.Rebuild).
//
// Following starts once the table is published (at start, or after its
// first build) and runs until the daemon stops. A rebuild of a followed
// table (scheduled, requested, or needed) builds a fresh generation while
// the follower keeps applying to the published one; after the rebuild's
// replay, catchUp stops the follower and returns the positions it applied,
// the rebuild reads on to them, publishes, and following resumes from the
// new generation's checkpoint. So readers never see the table go back in
// time.
type FollowSettings struct {
	// Run follows the published table from its checkpoint until ctx ends
	// (returning nil) or following fails, keeping status current.
	Run func(ctx context.Context, db *store.DB, log zerolog.Logger, status *materialize.FollowStatus) error
	// Rebuild is the table's full rebuild with its catch-up
	// (materialize.Options.CatchUp = catchUp). It replaces Table.Build for
	// a followed table.
	Rebuild func(ctx context.Context, db *store.DB, log zerolog.Logger, catchUp func(context.Context) (map[int32]int64, error)) (materialize.Report, error)
	// MaxLag is the most records any partition may be behind for /readyz.
	// 0 means DefaultMaxLag.
	MaxLag int64
	// RebuildIfNeeded starts a rebuild when following fails in a way only
	// a rebuild can mend (a stale checkpoint: the topic recreated,
	// records deleted below the checkpoint, a compacted topic past
	// delete.retention.ms; a conflict, a bad record): the old table stays
	// served meanwhile. If the rebuilt table's follower is refused at its
	// start again, the table stays failed (no rebuild loop).
	RebuildIfNeeded bool
	// Retriable reports whether Run's error may pass by itself (Kafka
	// unavailable): following is then retried with a backoff. Default:
	// nothing is retriable.
	Retriable func(error) bool
	// Live, if set, keeps status's live marks current without following
	// (materialize.WatchLive) until ctx ends. The daemon runs it while a
	// rebuild has paused the follower for its catch-up and publish, so
	// that the table stays ready while its lag is within MaxLag. Nil: a
	// paused follower's table is not ready ("not following yet").
	Live func(ctx context.Context, db *store.DB, log zerolog.Logger, status *materialize.FollowStatus) error
}

// followState is one followed table's follower, guarded by Server.mu.
type followState struct {
	status  *materialize.FollowStatus
	cancel  context.CancelFunc
	done    chan struct{} // closed when the follower's goroutine ends
	running bool
	// paused: a rebuild stopped the follower for its catch-up (catchUpFunc)
	// and read the positions it applied; nothing else may start it again
	// (a reload neither) until the run ends, or the follower would apply
	// past the positions the new generation is published with, and the
	// table would go back when it is.
	paused bool
	err    error // why following stopped or is being retried; nil while it works
	errAt  time.Time
	// watchCancel and watchDone are the live marks' watcher (FollowSettings.Live)
	// that runs while the follower is paused; nil otherwise. It is
	// started by the catch-up (startWatch) and ended by the next
	// startFollow that finds the follower no longer paused (the run's
	// end), or at shutdown (its context is the runs').
	watchCancel context.CancelFunc
	watchDone   chan struct{}
	// autoRun is the run rebuild_if_needed last started (0: none). If it
	// is still the table's last run and following then fails again at its
	// start (before its first refresh of the live marks: the new
	// checkpoint is refused too, e.g. a delete.retention.ms shorter than a
	// rebuild, or DescribeConfigs denied), the table stays failed instead
	// of rebuilding in a loop.
	autoRun uint64
}

// followOf returns table's follower state, creating it. Call with s.mu held.
func (s *Server) followOf(table string) *followState {
	if s.follows == nil {
		s.follows = map[string]*followState{}
	}
	fs := s.follows[table]
	if fs == nil {
		fs = &followState{}
		s.follows[table] = fs
	}
	return fs
}

// startFollow starts following table if it is configured to be followed,
// is published, is not followed already and no run has paused its
// follower. The goroutine is owned by Run (runWG).
//
// Unless the follower is paused, it ends the live marks' watcher of the
// pause before (startWatch), once the new follower counts as running, so
// that /readyz never sees the table neither followed nor watched. The new
// follower's status starts with the last one's live marks
// (materialize.NewFollowStatus).
func (s *Server) startFollow(table string) {
	var endWatch func()
	defer func() {
		if endWatch != nil {
			endWatch() // after the unlock below: it waits for the watcher
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	if fs := s.follows[table]; fs != nil && !fs.paused {
		endWatch = fs.takeWatch()
	}
	def, ok := s.tables[table]
	if !ok || def.Follow == nil || s.db == nil || s.stopping {
		return
	}
	if _, err := s.db.Table(table); err != nil {
		return // never published: its first build starts following
	}
	fs := s.followOf(table)
	if fs.running || fs.paused {
		return
	}
	ctx, cancel := context.WithCancel(s.runCtx)
	done := make(chan struct{})
	fs.running, fs.cancel, fs.done, fs.err = true, cancel, done, nil
	fs.status = materialize.NewFollowStatus(fs.status)
	s.runWG.Add(1)
	go func() {
		defer s.runWG.Done()
		defer close(done)
		s.followLoop(ctx, table, def, fs)
	}()
}

// takeWatch detaches the live marks' watcher and returns the function
// that ends it and waits for it (nil when none runs). Call with s.mu held,
// and the function without.
func (fs *followState) takeWatch() func() {
	if fs.watchDone == nil {
		return nil
	}
	cancel, done := fs.watchCancel, fs.watchDone
	fs.watchCancel, fs.watchDone = nil, nil
	return func() {
		cancel()
		<-done
	}
}

// startWatch starts the live marks' watcher of table's paused follower
// (FollowSettings.Live), unless it has none or one runs. It refreshes the paused
// follower's status, retrying with a backoff when its client cannot be
// created. The goroutine is owned by Run (runWG); see takeWatch for its
// end.
func (s *Server) startWatch(table string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	def, ok := s.tables[table]
	fs := s.follows[table]
	if !ok || def.Follow == nil || def.Follow.Live == nil || fs == nil || !fs.paused || fs.watchDone != nil || s.db == nil || s.stopping {
		return
	}
	if fs.status == nil {
		fs.status = &materialize.FollowStatus{}
	}
	ctx, cancel := context.WithCancel(s.runCtx)
	done := make(chan struct{})
	fs.watchCancel, fs.watchDone = cancel, done
	db, st, live := s.db, fs.status, def.Follow.Live
	log := s.cfg.Log.With().Str(keyTable, table).Logger()
	s.runWG.Add(1)
	go func() {
		defer s.runWG.Done()
		defer close(done)
		backoff := time.Second
		for {
			err := s.runLive(ctx, table, live, db, st)
			if ctx.Err() != nil {
				return
			}
			log.Warn().Err(err).Dur("retry_in", backoff).Msg("the paused follower's live marks are not refreshed")
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
		}
	}()
}

// runLive calls live, turning a panic into an error.
func (s *Server) runLive(ctx context.Context, table string, live func(context.Context, *store.DB, zerolog.Logger, *materialize.FollowStatus) error,
	db *store.DB, st *materialize.FollowStatus) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("watching the live marks of table %q panicked: %v\n%s", table, p, debug.Stack())
		}
	}()
	if err := live(ctx, db, s.cfg.Log, st); err != nil {
		return err
	}
	return errors.New("the live marks' watcher ended without an error")
}

// stopFollow stops table's follower, if it runs, and waits for it: its
// last transaction has committed or rolled back when it returns.
func (s *Server) stopFollow(table string) {
	s.mu.Lock()
	fs := s.follows[table]
	if fs == nil || fs.done == nil {
		s.mu.Unlock()
		return
	}
	cancel, done := fs.cancel, fs.done
	s.mu.Unlock()
	cancel()
	<-done
}

// followLoop runs the follower until ctx ends or it fails for good,
// retrying what may pass (Kafka unavailable) with a backoff and
// restarting at once after a rebuild published another generation or
// another writer moved the checkpoint (materialize.ErrCheckpointMoved).
func (s *Server) followLoop(ctx context.Context, table string, def tableDef, fs *followState) {
	log := s.cfg.Log.With().Str(keyTable, table).Logger()
	backoff := time.Second
	for {
		// The follower's lines get the table from materialize (see
		// Table.Build).
		err := s.runFollow(ctx, def, s.cfg.Log, fs.status)
		if ctx.Err() != nil {
			break
		}
		s.mu.Lock()
		fs.err, fs.errAt = err, s.now()
		s.state(table).noteFailure(err)
		s.mu.Unlock()
		if errors.Is(err, store.ErrGenerationChanged) || errors.Is(err, materialize.ErrCheckpointMoved) {
			// A rebuild published another generation, or another writer
			// committed first (this follower's batch was not applied):
			// follow again, at once, from the stored checkpoint.
			log.Info().Err(err).Msg("the table changed under the follower: following again from the stored checkpoint")
			backoff = time.Second
			continue
		}
		if err != nil && def.Follow.Retriable != nil && def.Follow.Retriable(err) {
			log.Warn().Err(err).Dur("retry_in", backoff).Msg("following interrupted; the table stays served as it is")
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		if err == nil {
			err = errors.New("following ended without an error")
			s.mu.Lock()
			fs.err = err
			s.mu.Unlock()
		}
		log.Error().Err(err).Int("exit_code", s.cfg.ExitCode(err)).
			Msg("following stopped; the table stays served as last applied")
		// The follower got past its start check once it read live marks
		// (its own: the ones its status started with are the last
		// follower's).
		started := fs.status.Snapshot().Refreshed
		s.mu.Lock()
		fs.running = false
		last := s.state(table).last
		again := !started && fs.autoRun != 0 && last != nil && last.ID == fs.autoRun
		s.mu.Unlock()
		if def.Follow.RebuildIfNeeded && again {
			log.Error().Uint64("run", fs.autoRun).
				Msg("rebuild_if_needed: following failed at its start again, right after the rebuild it ran; not rebuilding in a loop (fix the cause, then rebuild the table)")
			return
		}
		if def.Follow.RebuildIfNeeded {
			r, rerr := s.startRun(table, triggerFollow)
			if r != nil {
				s.mu.Lock()
				fs.autoRun = r.id
				s.mu.Unlock()
			}
			if rerr != nil && !errors.Is(rerr, errRunning) {
				log.Warn().Err(rerr).Msg("rebuild_if_needed: rebuild not started")
			} else {
				log.Info().Msg("rebuild_if_needed: rebuilding the table in the background; the old one stays served")
			}
		}
		return
	}
	s.mu.Lock()
	fs.running = false
	s.mu.Unlock()
}

// runFollow calls Run, turning a panic into an error.
func (s *Server) runFollow(ctx context.Context, def tableDef, log zerolog.Logger, st *materialize.FollowStatus) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("following table %q panicked: %v\n%s", def.Name, p, debug.Stack())
		}
	}()
	s.mu.Lock()
	db := s.db
	s.mu.Unlock()
	if db == nil {
		return context.Canceled
	}
	return def.Follow.Run(ctx, db, log, st)
}

// catchUpFunc is a followed table's rebuild's catch-up: it pauses the
// follower (stops it, its last transaction committed, and keeps it from
// being started again until the run ends: execute resumes it) and returns
// the positions of the published table's checkpoint, nil when it has none.
func (s *Server) catchUpFunc(table string) func(context.Context) (map[int32]int64, error) {
	return func(context.Context) (map[int32]int64, error) {
		// Paused before it is stopped: a reload's startFollow in between
		// would otherwise start a follower this stop does not see.
		s.mu.Lock()
		s.followOf(table).paused = true
		s.mu.Unlock()
		// While paused, the table's lag is kept current: it is ready
		// while that stays within max_lag. The watcher starts before
		// the follower stops, so that no moment has neither.
		s.startWatch(table)
		s.stopFollow(table)
		s.mu.Lock()
		db := s.db
		s.mu.Unlock()
		if db == nil {
			return nil, errStopping
		}
		var out map[int32]int64
		err := db.ReadTable(table, func(snap *store.Snapshot) error {
			cp, ok, err := checkpoint.Load(snap.Tx, table)
			if err != nil || !ok {
				return err
			}
			out = map[int32]int64{}
			for _, p := range cp.Partitions {
				out[p.Partition] = p.End
			}
			return nil
		})
		if errors.Is(err, store.ErrTableNotFound) {
			return nil, nil
		}
		return out, err
	}
}

// followView is a snapshot of one followed table's follower.
type followView struct {
	running bool
	// watched: the follower is paused, or resuming, and its live marks
	// are kept current by the watcher (startWatch).
	watched bool
	err     error
	errAt   time.Time
	maxLag  int64
	snap    materialize.FollowSnapshot
}

// followInfo returns table's follower as of now; ok is false when the
// table is not followed.
func (s *Server) followInfo(table string) (followView, bool) {
	s.mu.Lock()
	def, configured := s.tables[table]
	fs := s.follows[table]
	var v followView
	if fs != nil {
		v.running, v.err, v.errAt = fs.running, fs.err, fs.errAt
		v.watched = !fs.running && fs.watchDone != nil
	}
	var st *materialize.FollowStatus
	if fs != nil {
		st = fs.status
	}
	s.mu.Unlock()
	if !configured || def.Follow == nil {
		return v, false
	}
	v.maxLag = def.Follow.MaxLag
	if v.maxLag <= 0 {
		v.maxLag = DefaultMaxLag
	}
	if st != nil {
		v.snap = st.Snapshot()
	}
	// A retried follower that has applied, or read the live marks, since
	// its error is working again.
	if v.running && v.err != nil && (v.snap.LastApply.After(v.errAt) || (v.snap.LiveAt.After(v.errAt) && v.snap.LiveError == nil)) {
		v.err = nil
	}
	return v, true
}

// json renders the follower for the API.
func (v followView) json() *api.Follow {
	out := &api.Follow{Running: v.running, MaxLag: v.maxLag, RecordsApplied: v.snap.Records, Applies: v.snap.Applies,
		ApplyRate: v.snap.Rate, LastApply: v.snap.LastApply}
	if v.err != nil {
		out.Error, out.ErrorAt = v.err.Error(), v.errAt
	}
	if lag := v.snap.MaxLag(); lag >= 0 {
		out.Lag = &lag
	}
	return out
}

// notReady says why a followed table is not ready, "" when it is: its
// follower must run, have read the live marks, and be within MaxLag. While
// a rebuild has paused it (the catch-up, the publish, until the follower
// of the new generation runs), the watcher's live marks are compared with
// the positions the paused follower applied, with the same MaxLag.
func (v followView) notReady() string {
	lag := v.snap.MaxLag()
	if v.watched {
		switch {
		case lag < 0:
			return "rebuilding: the partitions' high watermarks not read yet"
		case lag > v.maxLag:
			return fmt.Sprintf("rebuilding: %d records behind, over max_lag %d", lag, v.maxLag)
		}
		return ""
	}
	switch {
	case !v.running && v.err != nil:
		return "following stopped: " + v.err.Error()
	case !v.running:
		return "not following yet"
	case v.err != nil:
		return "following interrupted: " + v.err.Error()
	case lag < 0:
		return "following: the partitions' high watermarks not read yet"
	case lag > v.maxLag:
		return fmt.Sprintf("following: %d records behind, over max_lag %d", lag, v.maxLag)
	}
	return ""
}

// withLive adds the live marks to the checkpoint's partitions.
func (v followView) withLive(parts []api.Partition) []api.Partition {
	live := map[int32]materialize.PartitionStatus{}
	for _, p := range v.snap.Partitions {
		live[p.Partition] = p
	}
	for i := range parts {
		p, ok := live[parts[i].Partition]
		if !ok || p.LiveHigh < 0 {
			continue
		}
		high := max(p.LiveHigh, parts[i].End)
		lag := high - parts[i].End
		parts[i].LiveHigh, parts[i].Lag = &high, &lag
	}
	return parts
}

// followCollector exports every followed table's follower at scrape time.
type followCollector struct{ s *Server }

var (
	descFollowLag = prometheus.NewDesc("kmaterialize_follow_lag_records",
		"Records between a followed table's checkpoint and its partition's high watermark.", []string{"table", "partition"}, nil)
	descFollowApplied = prometheus.NewDesc("kmaterialize_follow_records_applied_total",
		"Records a followed table's follower applied since it (re)started.", []string{"table"}, nil)
	descFollowRate = prometheus.NewDesc("kmaterialize_follow_apply_rate",
		"Records per second a followed table's follower applied over the last ~10s.", []string{"table"}, nil)
	descFollowing = prometheus.NewDesc("kmaterialize_follow_running",
		"1 while a followed table's follower runs without error, else 0.", []string{"table"}, nil)
	descFollowUnstableCuts = prometheus.NewDesc("kmaterialize_follow_unstable_cuts_total",
		"Applies of a followed table that ended where no last stable offset was seen, the apply's byte budget reached first: each may have shown part of a transaction.", []string{"table"}, nil)
)

func (c followCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descFollowLag
	ch <- descFollowApplied
	ch <- descFollowRate
	ch <- descFollowing
	ch <- descFollowUnstableCuts
}

func (c followCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	names := c.s.configuredLocked()
	c.s.mu.Unlock()
	for _, n := range names {
		v, ok := c.s.followInfo(n)
		if !ok {
			continue
		}
		for _, p := range v.snap.Partitions {
			if p.LiveHigh >= 0 {
				ch <- prometheus.MustNewConstMetric(descFollowLag, prometheus.GaugeValue, float64(p.Lag), n, strconv.Itoa(int(p.Partition)))
			}
		}
		ch <- prometheus.MustNewConstMetric(descFollowApplied, prometheus.CounterValue, float64(v.snap.Records), n)
		ch <- prometheus.MustNewConstMetric(descFollowRate, prometheus.GaugeValue, v.snap.Rate, n)
		running := 0.0
		if v.running && v.err == nil {
			running = 1
		}
		ch <- prometheus.MustNewConstMetric(descFollowing, prometheus.GaugeValue, running, n)
		ch <- prometheus.MustNewConstMetric(descFollowUnstableCuts, prometheus.CounterValue, float64(v.snap.UnstableCuts), n)
	}
}
