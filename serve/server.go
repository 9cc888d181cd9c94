package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jonboulle/clockwork"

	"github.com/kmaterialize/kmaterialize/feed"
	"github.com/kmaterialize/kmaterialize/store"
)

// Log field keys.
const (
	keyTable      = "table"
	keyGeneration = "generation"
)

// Bounds on requests and on shutdown.
const (
	// ShutdownGrace bounds how long Run lets requests in flight finish
	// once its context ends.
	ShutdownGrace = 5 * time.Second
	// readHeaderTimeout and readTimeout bound reading a request (none has a
	// body worth waiting for); writeTimeout bounds a response, and is
	// renewed per chunk on the streaming routes (rows, export).
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 16 << 10
)

// Server is the daemon. New validates its Config; Run does the work.
// Its methods are safe for concurrent use.
type Server struct {
	cfg     settings
	metrics *metrics
	clock   clockwork.Clock // tests hand a fake one before Run

	reloadMu sync.Mutex // serializes SetTables with Run's start and stop of the scheduler
	mu       sync.Mutex
	tables   map[string]tableDef // the configured tables, by name
	runs     map[string]*runState
	runSeq   uint64
	db       *store.DB // set while Run serves
	stopping bool
	started  bool
	sched    gocron.Scheduler
	jobs     map[string]gocron.Job
	follows  map[string]*followState // followed tables' followers (follow.go)
	spool    *spooler                // spooled answers (spool.go)
	heavy    chan struct{}           // a slot per heavy request running (heavy.go)
	// maint is held by the backup or the compaction running (maintain.go);
	// maintWhat says which.
	maint     sync.Mutex
	maintWhat atomic.Value // string
	epochs    epochs       // each table's epoch of its positions (positions.go)
	feeds     *feed.Feeds  // the tables' change feeds (feed.go)
	waiters   atomic.Int64 // reads waiting for min_positions (positions.go)

	// The run queue (queue.go), guarded by mu: runs waiting, oldest
	// first, and how many go.
	queue   []*run
	running int
	// runBase is the parent of every run's context: shutdown cancels it
	// once ShutdownTimeout has passed. runCtx (followers, the retry loop)
	// ends when shutdown begins.
	runBase   context.Context
	retryWake chan struct{} // wakes retryLoop when a retry is planned

	runCtx  context.Context
	runWG   sync.WaitGroup
	tcpAddr net.Addr    // the TCP listener's address while Run serves
	certs   *certHolder // the TCP listener's certificate; nil without TLS (tls.go)
}

// TCPAddr returns the address the TCP listener (Config.Listen) is bound to
// while Run serves, nil otherwise: with port 0, the port the kernel chose.
func (s *Server) TCPAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tcpAddr
}

// New validates cfg (a bad value is a *ConfigError) and returns a Server.
// It opens nothing: Run does.
func New(cfg Config) (*Server, error) {
	set, err := validate(cfg)
	if err != nil {
		return nil, err
	}
	if abs, err := filepath.Abs(set.Socket); err == nil {
		set.Socket = abs // the holder record must name it from anywhere
	}
	s := &Server{cfg: set, clock: clockwork.NewRealClock(), runs: map[string]*runState{}, tables: map[string]tableDef{},
		retryWake: make(chan struct{}, 1),
		spool:     newSpooler(store.SpoolDir(set.DBPath), set.SpoolMaxBytes), heavy: make(chan struct{}, set.MaxHeavyRequests)}
	for _, t := range set.tables {
		s.tables[t.Name] = t
	}
	if set.TLSCert != "" {
		if s.certs, err = newCertHolder(set.TLSCert, set.TLSKey); err != nil {
			return nil, err
		}
	}
	s.feeds = feed.New(s.feedConfig())
	s.metrics = newMetrics(s)
	return s, nil
}

func (s *Server) now() time.Time { return s.clock.Now() }

// Run opens the database read-write (a *store.LockedError naming the other
// holder, and its socket if it is a daemon, when it is held), creates the
// socket, calls ready (if not nil) once the socket serves, builds every
// configured table that has no published generation, rebuilds those whose
// stored definition differs from the configured one, runs the schedules and
// serves until ctx ends. Then it shuts down (shutdown.go: queued runs
// dropped, runs still reading cancelled, runs past their replay published
// within Config.ShutdownTimeout), closes the database, removes the socket
// and returns nil.
// Run may be called once.
func (s *Server) Run(ctx context.Context, ready func()) (err error) {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("serve: Run called twice")
	}
	s.started = true
	s.mu.Unlock()

	db, err := store.Open(s.cfg.DBPath, &store.Options{
		LockTimeout: s.cfg.LockTimeout, Command: s.cfg.command, PageCheck: s.cfg.PageCheck, Socket: s.cfg.Socket,
		InitialMmapSize: s.cfg.InitialMmapSize,
	})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()

	if err := s.startFeeds(db); err != nil {
		return fmt.Errorf("start the change feeds: %w", err)
	}
	unixLn, err := listenUnix(s.cfg.Socket, s.cfg.SocketMode, s.cfg.gid)
	if err != nil {
		return err
	}
	listeners := []net.Listener{unixLn}
	servers := []*http.Server{s.httpServer(false)}
	if s.cfg.Listen != "" {
		tcpLn, err := net.Listen("tcp", s.cfg.Listen)
		if err != nil {
			unixLn.Close()
			return fmt.Errorf("listen on %s: %w", s.cfg.Listen, err)
		}
		if s.certs != nil {
			// net/http does the handshake in the connection's goroutine,
			// within ReadHeaderTimeout.
			tcpLn = tls.NewListener(tcpLn, s.certs.config())
			s.logCert("TLS certificate loaded", s.certs.leaf())
		}
		listeners = append(listeners, tcpLn)
		servers = append(servers, s.httpServer(true))
	}

	// Followers and the retry loop end when shutdown begins; runs get
	// their own contexts (queue.go), cancelled as shutdown.go says.
	runCtx, stopFollowers := context.WithCancel(ctx)
	defer stopFollowers()
	runBase, cancelRunBase := context.WithCancelCause(context.Background())
	cancelAllRuns := func() { cancelRunBase(errShutdown) }
	defer cancelAllRuns()
	sched, err := gocron.NewScheduler(gocron.WithClock(s.clock), gocron.WithLogger(gocronLogger{s.cfg.Log}))
	if err != nil {
		for _, ln := range listeners {
			ln.Close()
		}
		return fmt.Errorf("start the scheduler: %w", err)
	}

	s.mu.Lock()
	s.db, s.runCtx, s.runBase, s.sched, s.jobs = db, runCtx, runBase, sched, map[string]gocron.Job{}
	if len(listeners) > 1 {
		s.tcpAddr = listeners[1].Addr()
	}
	s.mu.Unlock()

	var serveWG sync.WaitGroup
	for i, srv := range servers {
		serveWG.Add(1)
		go func() {
			defer serveWG.Done()
			if err := srv.Serve(listeners[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.cfg.Log.Error().Err(err).Str("addr", listeners[i].Addr().String()).Msg("serving stopped")
			}
		}()
	}
	s.cfg.Log.Info().Str("socket", s.cfg.Socket).Str("listen", s.cfg.Listen).Bool("tls", s.certs != nil).
		Bool("allow_remote", s.cfg.AllowRemote).Str("db", s.cfg.DBPath).Msg("serving")
	if ready != nil {
		ready()
	}

	s.runWG.Add(1)
	go func() {
		defer s.runWG.Done()
		s.retryLoop(runCtx)
	}()

	s.reloadMu.Lock()
	s.mu.Lock()
	names := s.configuredLocked()
	var defs []tableDef
	for _, n := range names {
		defs = append(defs, s.tables[n])
	}
	s.mu.Unlock()
	s.buildUnpublished(names, triggerStart)
	for _, n := range names {
		s.startFollow(n)
	}
	// After the followers start: a rebuild's catch-up stops the follower
	// it finds running, and one started later would run on beside it.
	s.rebuildChanged(names)
	s.schedule(sched, defs)
	sched.Start()
	s.reloadMu.Unlock()

	<-ctx.Done()
	s.shutdown(sched, servers, stopFollowers, cancelAllRuns)
	serveWG.Wait()
	s.mu.Lock()
	s.db, s.tcpAddr = nil, nil
	s.mu.Unlock()
	// The unix listener removed its socket file when it closed.
	return nil
}

// configured returns the configured table names, sorted.
func (s *Server) configured() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.configuredLocked()
}

// configuredLocked returns the configured table names, sorted. Call with
// s.mu held.
func (s *Server) configuredLocked() []string {
	names := make([]string, 0, len(s.tables))
	for n := range s.tables {
		names = append(names, n)
	}
	sortStrings(names)
	return names
}

// buildUnpublished queues a run for each of names that has no published
// generation and no run queued or going.
func (s *Server) buildUnpublished(names []string, trigger string) {
	s.mu.Lock()
	db := s.db
	s.mu.Unlock()
	if db == nil {
		return
	}
	metas, err := db.Tables()
	if err != nil {
		s.cfg.Log.Error().Err(err).Msg("list published tables")
		return
	}
	published := map[string]bool{}
	for _, m := range metas {
		published[m.Name] = true
	}
	for _, n := range names {
		if published[n] {
			continue
		}
		if _, err := s.startRun(n, trigger); err != nil && !errors.Is(err, errRunning) {
			s.cfg.Log.Debug().Str(keyTable, n).Err(err).Msg("first build not started")
		}
	}
}

// SetTables replaces the tables the daemon keeps fresh (SIGHUP reload),
// and reads the TCP listener's certificate and key again (Config.TLSCert;
// a pair that does not load is a *ConfigError, and then nothing changes:
// the tables and the certificate stay as they were):
// added tables without a published generation are built, removed ones are
// no longer built or scheduled but stay readable, changed schedules take
// effect, and published tables whose definition changed (Table.Spec) are
// rebuilt by the new one (definition.go). An invalid list is a *ConfigError and changes nothing.
// Either way the outcome is the last reload's in GET /v1/status and /metrics
// (status.go).
// Before Run it only replaces Config.Tables.
func (s *Server) SetTables(tables []Table) error {
	defs, err := validateTables(tables)
	s.metrics.reload.loaded(s.now(), err)
	if err != nil {
		return err
	}
	if err := s.reloadCert(); err != nil {
		return err
	}
	// One reload at a time; gocron is called without s.mu held, since its
	// tasks take s.mu.
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	s.mu.Lock()
	old := s.tables
	s.tables = map[string]tableDef{}
	for _, d := range defs {
		s.tables[d.Name] = d
	}
	var added []string
	for _, d := range defs {
		if _, ok := old[d.Name]; !ok {
			added = append(added, d.Name)
		}
	}
	// Schedules of removed tables, and changed schedules, go; an unchanged
	// schedule keeps its job (and its phase).
	var drop []gocron.Job
	var add []tableDef
	if s.sched != nil && !s.stopping {
		for name, job := range s.jobs {
			if d, ok := s.tables[name]; !ok || d.Schedule != old[name].Schedule {
				drop = append(drop, job)
				delete(s.jobs, name)
			}
		}
		for _, name := range s.configuredLocked() {
			if _, ok := s.jobs[name]; !ok {
				add = append(add, s.tables[name])
			}
		}
	}
	sched, running := s.sched, s.db != nil
	s.mu.Unlock()
	for _, job := range drop {
		if err := sched.RemoveJob(job.ID()); err != nil {
			s.cfg.Log.Warn().Err(err).Str(keyTable, job.Name()).Msg("remove schedule")
		}
	}
	s.schedule(sched, add)
	s.cfg.Log.Info().Strs("added", added).Int("tables", len(defs)).Msg("tables reloaded")
	if running {
		s.buildUnpublished(added, triggerStart)
		// A reload tries every failed first build again, whatever its
		// exit code (retry.go).
		s.buildUnpublished(s.configured(), triggerReload)
		// Followers restart with their table's definition as it is now;
		// those of tables no longer followed stop (the table stays
		// served). A follower a rebuild has paused for its catch-up
		// stays paused: the run's end resumes it (startFollow).
		for name := range old {
			s.stopFollow(name)
		}
		names := make([]string, 0, len(defs))
		for _, d := range defs {
			s.stopFollow(d.Name)
			s.startFollow(d.Name)
			s.mu.Lock()
			paused := d.Follow != nil && s.follows[d.Name] != nil && s.follows[d.Name].paused
			s.mu.Unlock()
			if paused {
				s.cfg.Log.Info().Str(keyTable, d.Name).Msg("reload: the follower stays paused while the table's rebuild catches up; the run's end resumes it")
			}
			names = append(names, d.Name)
		}
		// Tables the file now defines otherwise are rebuilt by the new
		// definition; their followers go on by the stored one until then.
		s.rebuildChanged(names)
	}
	return nil
}
