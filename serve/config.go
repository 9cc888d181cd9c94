package serve

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/internal/listen"
	"github.com/kmaterialize/kmaterialize/internal/schedule"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/store"
)

// Table is one table the daemon keeps fresh.
type Table struct {
	Name     string
	Topic    string // shown in the API; informational
	Fold     string // shown in the API; informational
	Schedule string // "" unscheduled; "@every 10m" or a 5-field cron expression
	// Build runs one full rebuild of the table into db and publishes it
	// (materialize.Rebuild with the table's options). ctx ends on shutdown;
	// a Build that returns after it ended must not have published. log
	// carries the run's fields (run, trigger) but not the table's name:
	// materialize adds that to each of its lines, and a logger that had it
	// already would write the key twice in one JSON line. The same holds
	// for the loggers Follow's functions and UpdateFunc are given.
	Build func(ctx context.Context, db *store.DB, log zerolog.Logger) (materialize.Report, error)
	// Follow, if set, keeps the published table current between rebuilds
	// (follow.go); its Rebuild then replaces Build.
	Follow *FollowSettings
	// Spec, if set, is the definition Build builds by. A published table
	// whose stored definition differs from it is rebuilt by it, at start
	// and on SetTables, and refuses updates until then (definition.go).
	// Nil: the daemon does not compare.
	Spec *materialize.Spec
}

// Config configures a Server. Zero values are the documented defaults.
type Config struct {
	// DBPath is the database file; required. It is created if missing.
	DBPath string
	// Socket is the API's unix socket. Default DBPath + ".sock".
	Socket string
	// SocketMode is the socket's file mode. Default 0600; only permission
	// bits (at most 0777), and the owner must be able to read and write.
	SocketMode os.FileMode
	// SocketGroup is the socket's group (a name or a numeric gid). "" keeps
	// the process's group.
	SocketGroup string
	// Listen is an optional TCP address serving reads, /metrics, /healthz
	// and /readyz; who may do what there is in auth.go.
	Listen string
	// AllowRemote permits a Listen address that is not loopback, and
	// closes the listener, whatever its address: every route but /healthz
	// and /readyz needs a bearer token (ReadToken, MetricsToken or
	// AdminToken; at least one must be set), and TLS (TLSCert) unless
	// AllowPlaintextTokens.
	AllowRemote bool
	// AdminToken is the bearer token for every route on Listen, the
	// state-changing ones included. Empty: those are refused there (403).
	AdminToken string

	// The TCP listener's tokens and TLS (auth.go, tls.go). Tokens are
	// secrets: the daemon never logs them, and keeps only their digests.
	//
	// ReadToken is the bearer token for reads (GET, HEAD) on Listen with
	// AllowRemote. It must differ from AdminToken and MetricsToken.
	ReadToken string
	// MetricsToken is a bearer token for GET /metrics only, with
	// AllowRemote (a scraper needs no access to the rows).
	MetricsToken string
	// TLSCert and TLSKey are PEM files, the certificate chain (leaf first)
	// and its private key, for serving Listen over TLS 1.2 or later; both
	// or neither. New loads them (a pair that does not load is a
	// *ConfigError); SetTables reads them again.
	TLSCert, TLSKey string
	// AllowPlaintextTokens permits AllowRemote without TLS: the tokens then
	// cross the network in clear text, for a network that is itself
	// encrypted (a VPN, a service mesh's sidecar).
	AllowPlaintextTokens bool

	// LockTimeout is how long Run waits for another holder of the
	// database (store.Options.LockTimeout: 0 the default, negative: once).
	LockTimeout time.Duration
	// Tables are the tables the daemon keeps fresh.
	Tables []Table
	// ExitCode maps a run's error to the CLI's exit code (cmd/kmaterialize's
	// exitCode), shown in a table's last_error. Default: 1 for any error.
	ExitCode func(error) int
	Log      zerolog.Logger
	// Update runs an incremental update of a table the database holds
	// (POST /v1/tables/{table}/update). Nil: that route answers 404.
	Update UpdateFunc
	// PageCheck is passed to store.Open (see store.Options.PageCheck): the
	// CLI hands its child-process page walk.
	PageCheck store.PageCheck
	// Command is what the holder record says this process runs (no
	// secrets). Default "kmaterialize serve".
	Command string

	// Runs: the queue, retries and shutdown (queue.go, retry.go,
	// shutdown.go).
	//
	// MaxConcurrentRuns is how many runs (rebuilds and updates, of
	// different tables) go at once; the others wait in a FIFO queue.
	// 0 means DefaultMaxConcurrentRuns (1).
	MaxConcurrentRuns int
	// RetryBackoff is the first wait before a failed first build that may
	// pass (exit code 5) is tried again; it doubles up to RetryBackoffMax.
	// 0 means DefaultRetryBackoff (1s).
	RetryBackoff time.Duration
	// RetryBackoffMax bounds the wait between retries. 0 means
	// DefaultRetryBackoffMax (1m).
	RetryBackoffMax time.Duration
	// ShutdownTimeout bounds how long Run waits, once its context ends,
	// for runs past their replay to publish and for requests to finish.
	// 0 means DefaultShutdownTimeout (30s).
	ShutdownTimeout time.Duration
	// Stopping, if set, is called once when shutdown begins (the CLI tells
	// systemd STOPPING=1).
	Stopping func()
	// Large answers (spool.go, heavy.go; docs/daemon.md "Large answers:
	// paging, spooling and limits"). 0 means the default; negative is a
	// *ConfigError.
	//
	// SpoolMaxBytes bounds the bytes of all answers spooled at once in
	// DBPath + ".spool" (store.SpoolDir); an answer that would pass it is
	// 503 spool_full before its first byte. Default DefaultSpoolMaxBytes.
	SpoolMaxBytes int64
	// MaxHeavyRequests is how many exports, diffs and counts read at once;
	// one more is 503 busy with Retry-After. Default
	// DefaultMaxHeavyRequests.
	MaxHeavyRequests int
	// PageMaxBytes is a rows page's budget in bytes of keys and values; a
	// page ends before the row that would pass it (a larger row comes
	// alone) with Kmaterialize-More: true. Default DefaultPageMaxBytes.
	PageMaxBytes int
	// InitialMmapSize is passed to store.Open (store.Options.InitialMmapSize):
	// tests make it small so that commits must grow the mapping.
	InitialMmapSize int

	// The change feeds (feed.go, package feed; docs/daemon.md "The change
	// feed"). 0 means the default; negative is a *ConfigError.
	//
	// FeedRetainBytes and FeedRetainFor: each table's feed keeps at least
	// this many bytes and at least this long of commits, whichever holds
	// more (feed.DefaultRetainBytes, feed.DefaultRetainFor), and never
	// more than FeedMaxBytes (default 2 x FeedRetainBytes).
	FeedRetainBytes int64
	FeedRetainFor   time.Duration
	FeedMaxBytes    int64
	// FeedSlowBytes: a watcher that falls further behind is cut off
	// (watcher_too_slow). Default feed.DefaultSlowBytes.
	FeedSlowBytes int64
	// FeedSpoolMaxBytes bounds the spool files of the publishes' and
	// rollbacks' commits the feeds retain, in DBPath + ".feed"
	// (store.FeedDir); a publish with more changes restarts its feed.
	// Default feed.DefaultSpoolMaxBytes.
	FeedSpoolMaxBytes int64
	// MaxWatchers bounds the open change feeds of all tables. Default
	// feed.DefaultMaxWatchers.
	MaxWatchers int
	// FeedHeartbeat is how often a change feed without commits says so.
	// Default DefaultFeedHeartbeat.
	FeedHeartbeat time.Duration
	// FeedCutGrace: a watcher cut off while its stream's write is blocked
	// (it stopped reading) may take this long to read again, and get its
	// watcher_too_slow line, before its connection is closed. Default
	// DefaultFeedCutGrace.
	FeedCutGrace time.Duration
}

// DefaultFeedHeartbeat is Config.FeedHeartbeat's default.
const DefaultFeedHeartbeat = 5 * time.Second

// DefaultFeedCutGrace is Config.FeedCutGrace's default.
const DefaultFeedCutGrace = 10 * time.Second

// Defaults of the large-answer limits (Config).
const (
	DefaultSpoolMaxBytes    int64 = 1 << 30
	DefaultMaxHeavyRequests       = 2
	DefaultPageMaxBytes           = 4 << 20
)

// DefaultSocketMode is the socket's mode when Config.SocketMode is 0.
const DefaultSocketMode os.FileMode = 0o600

// ConfigError is a Config value New refuses: Field names it as the config
// file does (socket_mode, listen, tables[2].schedule, ...).
type ConfigError struct {
	Field  string
	Value  string
	Reason string
}

func (e *ConfigError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("serve config: %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("serve config: %s %q: %s", e.Field, e.Value, e.Reason)
}

// settings is a validated Config with its defaults applied.
type settings struct {
	Config
	gid     int // -1: keep the process's group
	tables  []tableDef
	command string
}

// tableDef is a validated Table with its parsed schedule.
type tableDef struct {
	Table
	every time.Duration // @every; 0 when cron or unscheduled
	cron  string        // a 5-field cron expression; "" otherwise
}

func validate(cfg Config) (settings, error) {
	s := settings{Config: cfg, gid: -1, command: cfg.Command}
	if s.command == "" {
		s.command = "kmaterialize serve"
	}
	if cfg.DBPath == "" {
		return s, &ConfigError{Field: "db", Reason: "required"}
	}
	if s.Socket == "" {
		s.Socket = cfg.DBPath + ".sock"
	}
	if s.SocketMode == 0 {
		s.SocketMode = DefaultSocketMode
	}
	if p := listen.CheckSocketMode(s.SocketMode); p != nil {
		return s, &ConfigError{Field: p.Field, Value: p.Value, Reason: p.Reason}
	}
	if g := cfg.SocketGroup; g != "" {
		gid, err := lookupGroup(g)
		if err != nil {
			return s, &ConfigError{Field: "socket_group", Value: g, Reason: err.Error()}
		}
		s.gid = gid
	}
	if err := checkListen(cfg); err != nil {
		return s, err
	}
	if err := s.largeAnswerDefaults(); err != nil {
		return s, err
	}
	tables, err := validateTables(cfg.Tables)
	if err != nil {
		return s, err
	}
	s.tables = tables
	if err := s.runDefaults(); err != nil {
		return s, err
	}
	if s.ExitCode == nil {
		s.ExitCode = func(err error) int {
			if err == nil {
				return 0
			}
			return 1
		}
	}
	return s, nil
}

// largeAnswerDefaults applies the defaults of the large-answer limits and
// refuses negative ones.
func (s *settings) largeAnswerDefaults() error {
	switch {
	case s.SpoolMaxBytes < 0:
		return &ConfigError{Field: "spool_max_bytes", Value: strconv.FormatInt(s.SpoolMaxBytes, 10), Reason: "want a number of bytes, 0 for the default (1 GiB)"}
	case s.MaxHeavyRequests < 0:
		return &ConfigError{Field: "max_heavy_requests", Value: strconv.Itoa(s.MaxHeavyRequests), Reason: "want 1 or more, 0 for the default (2)"}
	case s.PageMaxBytes < 0:
		return &ConfigError{Field: "page_max_bytes", Value: strconv.Itoa(s.PageMaxBytes), Reason: "want a number of bytes, 0 for the default (4 MiB)"}
	case s.FeedRetainBytes < 0:
		return &ConfigError{Field: "feed.retain_bytes", Value: strconv.FormatInt(s.FeedRetainBytes, 10), Reason: "want a number of bytes, 0 for the default (64 MiB)"}
	case s.FeedRetainFor < 0:
		return &ConfigError{Field: "feed.retain_for", Value: s.FeedRetainFor.String(), Reason: "want a duration, 0 for the default (5m)"}
	case s.FeedMaxBytes < 0:
		return &ConfigError{Field: "feed.max_bytes", Value: strconv.FormatInt(s.FeedMaxBytes, 10), Reason: "want a number of bytes, 0 for the default (2 x retain_bytes)"}
	case s.FeedSlowBytes < 0:
		return &ConfigError{Field: "feed.slow_watcher_bytes", Value: strconv.FormatInt(s.FeedSlowBytes, 10), Reason: "want a number of bytes, 0 for the default (16 MiB)"}
	case s.FeedSpoolMaxBytes < 0:
		return &ConfigError{Field: "feed.spool_max_bytes", Value: strconv.FormatInt(s.FeedSpoolMaxBytes, 10), Reason: "want a number of bytes, 0 for the default (4 GiB)"}
	case s.MaxWatchers < 0:
		return &ConfigError{Field: "feed.max_watchers", Value: strconv.Itoa(s.MaxWatchers), Reason: "want 1 or more, 0 for the default (64)"}
	case s.FeedHeartbeat < 0:
		return &ConfigError{Field: "feed.heartbeat", Value: s.FeedHeartbeat.String(), Reason: "want a duration, 0 for the default (5s)"}
	}
	if s.FeedCutGrace <= 0 {
		s.FeedCutGrace = DefaultFeedCutGrace
	}
	if s.FeedHeartbeat == 0 {
		s.FeedHeartbeat = DefaultFeedHeartbeat
	}
	if s.SpoolMaxBytes == 0 {
		s.SpoolMaxBytes = DefaultSpoolMaxBytes
	}
	if s.MaxHeavyRequests == 0 {
		s.MaxHeavyRequests = DefaultMaxHeavyRequests
	}
	if s.PageMaxBytes == 0 {
		s.PageMaxBytes = DefaultPageMaxBytes
	}
	return nil
}

func lookupGroup(g string) (int, error) {
	if gid, err := strconv.Atoi(g); err == nil && gid >= 0 {
		return gid, nil
	}
	grp, err := user.LookupGroup(g)
	if err != nil {
		return 0, fmt.Errorf("no such group: %w", err)
	}
	return strconv.Atoi(grp.Gid)
}

// checkListen checks Listen and what goes with it by listen.Check's rules
// (the config file is checked by the same). A token's value is never in
// the error.
func checkListen(cfg Config) error {
	p := listen.Check(listen.Settings{Listen: cfg.Listen, AllowRemote: cfg.AllowRemote,
		AdminToken: cfg.AdminToken, ReadToken: cfg.ReadToken, MetricsToken: cfg.MetricsToken,
		TLSCert: cfg.TLSCert, TLSKey: cfg.TLSKey, AllowPlaintextTokens: cfg.AllowPlaintextTokens})
	if p == nil {
		return nil
	}
	return &ConfigError{Field: p.Field, Value: p.Value, Reason: p.Reason}
}

func validateTables(tables []Table) ([]tableDef, error) {
	seen := map[string]bool{}
	out := make([]tableDef, 0, len(tables))
	for i, t := range tables {
		field := fmt.Sprintf("tables[%d]", i)
		if err := checkTableName(t.Name); err != nil {
			return nil, &ConfigError{Field: field + ".name", Value: t.Name, Reason: err.Error()}
		}
		if seen[t.Name] {
			return nil, &ConfigError{Field: field + ".name", Value: t.Name, Reason: "repeats a table name"}
		}
		seen[t.Name] = true
		if t.Build == nil {
			return nil, &ConfigError{Field: field, Value: t.Name, Reason: "no Build function"}
		}
		if f := t.Follow; f != nil {
			if f.Run == nil || f.Rebuild == nil {
				return nil, &ConfigError{Field: field + ".follow", Value: t.Name, Reason: "no Run or Rebuild function"}
			}
			if f.MaxLag < 0 {
				return nil, &ConfigError{Field: field + ".max_lag", Value: strconv.FormatInt(f.MaxLag, 10), Reason: "must not be negative"}
			}
		}
		d := tableDef{Table: t}
		if t.Schedule != "" {
			sp, err := schedule.Parse(t.Schedule)
			if err != nil {
				return nil, &ConfigError{Field: field + ".schedule", Value: t.Schedule, Reason: err.Error()}
			}
			d.every, d.cron = sp.Every, sp.Cron
		}
		out = append(out, d)
	}
	return out, nil
}

// maxNameLen bounds table names in requests: far above any real name (a
// Kafka topic name has at most 249 characters), far below bbolt's key limit.
const maxNameLen = 1024

// checkTableName says why name cannot be a table name, or nil.
func checkTableName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty table name")
	case len(name) > maxNameLen:
		return fmt.Errorf("table name longer than %d bytes", maxNameLen)
	}
	for _, r := range name {
		if r == 0xFFFD || r < 0x20 || r == 0x7f {
			return fmt.Errorf("table name must be printable UTF-8")
		}
	}
	return nil
}

// runDefaults applies and checks the defaults of the run settings.
func (s *settings) runDefaults() error {
	switch {
	case s.MaxConcurrentRuns < 0:
		return &ConfigError{Field: "max_concurrent_runs", Value: strconv.Itoa(s.MaxConcurrentRuns), Reason: "must be at least 1 (0: the default, 1)"}
	case s.RetryBackoff < 0 || s.RetryBackoffMax < 0:
		return &ConfigError{Field: "retry_backoff_max", Value: s.RetryBackoffMax.String(), Reason: "must be positive"}
	case s.ShutdownTimeout < 0:
		return &ConfigError{Field: "shutdown_timeout", Value: s.ShutdownTimeout.String(), Reason: "must be positive"}
	}
	if s.MaxConcurrentRuns == 0 {
		s.MaxConcurrentRuns = DefaultMaxConcurrentRuns
	}
	if s.RetryBackoff == 0 {
		s.RetryBackoff = DefaultRetryBackoff
	}
	if s.RetryBackoffMax == 0 {
		s.RetryBackoffMax = DefaultRetryBackoffMax
	}
	s.RetryBackoffMax = max(s.RetryBackoffMax, s.RetryBackoff)
	if s.ShutdownTimeout == 0 {
		s.ShutdownTimeout = DefaultShutdownTimeout
	}
	return nil
}
