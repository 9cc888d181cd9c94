package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/config"
	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/internal/configured"
	"github.com/kmaterialize/kmaterialize/internal/cpushare"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/serve"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:      "serve",
		Usage:     "run the daemon: keep the config's tables published and answer other processes over a unix socket",
		UsageText: "kmaterialize serve --config FILE [-F PROPERTIES-FILE] [--lock-timeout DURATION]\n   kmaterialize serve --check-config FILE [-F PROPERTIES-FILE] [--check-kafka]",
		Description: `Holds the database named by the config file, builds every configured table
that has never been published, rebuilds tables on their schedules and on
request, and answers reads over HTTP on a unix socket (and on the optional
TCP listen address). Readers keep the previous generation of a table while
a rebuild runs. The HTTP API: docs/daemon.md.

The config file (YAML; an unknown field is an error naming its line):

  db: /var/lib/kmaterialize/tables.db
  socket: /run/kmaterialize/tables.sock    # default: the db path + .sock
  socket_mode: "0660"                      # default 0600
  socket_group: kmaterialize-readers       # default: the process's group
  listen: 127.0.0.1:9466                   # optional: reads, /metrics, /healthz, /readyz
  admin_token: ${KMATERIALIZE_ADMIN_TOKEN} # bearer token for every route on listen (POST, DELETE too)
  allow_remote: false                      # true: a non-loopback listen; every route but health needs a token
  read_token: ${KMATERIALIZE_READ_TOKEN}   # with allow_remote: bearer token for reads (GET)
  metrics_token: ${KMATERIALIZE_METRICS_TOKEN} # with allow_remote: bearer token for GET /metrics only
  tls_cert: /etc/kmaterialize/tls/server.pem   # TLS 1.2+ on listen (chain, leaf first); SIGHUP reloads
  tls_key: /etc/kmaterialize/tls/server.key
  allow_plaintext_tokens: false            # allow_remote without TLS: only on an encrypted network
  max_concurrent_runs: 1                   # runs (rebuilds, updates) going at once; the rest queue
  retry_backoff_max: 1m                    # the longest wait between retries of a failed first build
  shutdown_timeout: 30s                    # SIGTERM: how long runs past their replay may take to publish
  kafka:
    brokers: kafka-1:9092,kafka-2:9092
    properties:                            # librdkafka properties; ${NAME} from the environment
      security.protocol: SASL_SSL
      sasl.password: ${KAFKA_PASSWORD}
  memory: 1GiB                             # default: what it covers (followers + runs + 64MiB for reads + feed.max_bytes)
  schema_registry:                         # for value_format/key_format avro, protobuf, jsonschema
    url: http://registry:8081
    username: svc                          # basic auth; or bearer_token: ${SR_TOKEN}
    password: ${SR_PASSWORD}
  tables:
    - name: balances
      topic: account-balances
      fold: latest                         # latest | count
      schedule: "@every 10m"               # or 5 cron fields; optional
      end: high                            # high | stable
      stall_timeout: 30s
      on_bad_record: fail                  # fail | skip
      allow_empty: false
      value_format: raw                    # raw | json | avro | protobuf | jsonschema
      key_format: raw                      # the same choices
      follow: true                         # apply what the topic gains between rebuilds
      follow_interval: 200ms               # the longest records wait before they are applied
      max_lag: 10000                       # /readyz: at most this many records behind per partition
      rebuild_if_needed: true              # rebuild in the background when following cannot go on
      keep: 2                              # earlier generations kept for rollback and diff; default 0
      max_change: 20                       # refuse a publish changing more than 20% of the keys; default off
      memory: 256MiB                       # as rebuild --memory: bounds its rebuilds and its follower
    - name: votes
      topic: studio-votes
      fold: count
      identity_field: event_id
      group_field: booth
      ignore_fields: [sent_at]
      catalog: booths.json                 # relative to the config file
      allow_unknown_groups: false

The table options mean what the rebuild flags of the same name mean, and
kmaterialize rebuild --config FILE --table NAME builds the same table without
a daemon. Relative paths are relative to the config file's directory.
${NAME} is taken from the environment in db, socket, admin_token,
read_token, metrics_token, tls_cert, tls_key, kafka.brokers, the
kafka.properties values, schema_registry and catalog (e.g. db:
${STATE_DIRECTORY}/tables.db); a ${ in any other field is an error, and $${
is a literal ${.
Secrets (properties whose name says password, secret or token,
sasl.jaas.config, ssl.key.pem, and the admin, read and metrics tokens)
never appear in logs or errors.

The TCP listener (listen): on loopback without allow_remote, reads are open
to this host and anything else needs admin_token (403 without). With
allow_remote: true, every route but /healthz and /readyz needs
Authorization: Bearer TOKEN: read_token for reads, metrics_token for
/metrics only, admin_token for everything (401 without a token or with a
wrong one, 403 for a token on a route it does not open); allow_remote
without tls_cert and tls_key is exit 2 unless allow_plaintext_tokens: true.

-F FILE (a kcat-style librdkafka properties file, KEY=VALUE lines) adds
Kafka properties over the config's kafka.properties, for example to keep a
password in a file of its own; SIGHUP reads it again.

A table's definition (topic, fold, key_format, value_format, identity_field,
group_field, ignore_fields, catalog contents, allow_unknown_groups) is stored
with it. When the file defines a published table otherwise, at start or on
SIGHUP, the daemon rebuilds it by the new definition; until that publishes,
the old table is served (and followed) as it was, and updates of it are
refused. The other options take effect without a rebuild.

Signals: SIGHUP reloads the file: added tables are built, removed ones are no
longer rebuilt or scheduled but stay readable, and the TLS certificate and
key are read again; a file (or a certificate) that does not load is logged
and the running tables and certificate are kept (db, socket, listen, token,
TLS path and run-setting changes need a restart). SIGTERM or SIGINT stops
accepting requests and runs, drops queued runs, cancels runs still reading
their topic (nothing published), lets runs past their replay publish (at
most shutdown_timeout), ends open streams and exits 0; a second signal
exits at once. With systemd Type=notify, READY=1 is sent once the socket
serves (not once every table is built: GET /readyz says that), and
STOPPING=1 when shutdown begins.

--check-config FILE checks the file as serve would at start (and on
SIGHUP), prints what it found and exits, like nginx -t: 0 when it would
start, 2 naming the file and line otherwise. It opens neither the database
nor the socket. With --check-kafka it also asks the brokers, with the
config's connection and properties, for every configured table's topic:
5 when they do not answer or a topic does not exist.

Exit codes: 0 after a signal, 2 for a config that does not load or a value
the daemon refuses, 7 when another process holds the database.

Examples:
  $ kmaterialize serve --config /etc/kmaterialize/kmaterialize.yaml
  $ kmaterialize serve --check-config /etc/kmaterialize/kmaterialize.yaml --check-kafka
  $ curl --unix-socket /run/kmaterialize/tables.sock http://kmaterialize/v1/tables/balances/keys/acct-42
  $ kill -HUP $(pidof kmaterialize)     # reload the config`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", EnvVars: []string{configEnv},
				Usage: "YAML config `FILE` (required): the database, socket and listen address, the Kafka connection, the Schema Registry and the tables to serve (format below)"},
			&cli.StringFlag{Name: "check-config", Usage: "check the config `FILE` as serve would, print what it holds and exit (0, or 2 naming file and line)"},
			&cli.BoolFlag{Name: "check-kafka", Usage: "with --check-config: also check that the brokers answer and every table's topic exists (exit 5 otherwise)"},
			lockTimeoutFlag(), propsFileFlag(),
			&cli.StringFlag{Name: "cpuprofile", Hidden: true, Usage: "write a CPU profile of the daemon to `FILE` until it stops (for the benchmark)"},
		},
		Action: runServe,
	}
}

// runServe loads the config, runs the daemon until the context ends, and
// reloads the tables on SIGHUP.
func runServe(c *cli.Context) error {
	if c.NArg() > 0 {
		return usageErrorf("unexpected argument %q", c.Args().First())
	}
	if check := c.String("check-config"); check != "" {
		return checkServeConfig(c, check)
	}
	if c.Bool("check-kafka") {
		return &usageError{msg: "--check-kafka goes with --check-config FILE", hint: "kmaterialize serve --check-config " + orExample(c.String("config")) + " --check-kafka"}
	}
	path := c.String("config")
	if path == "" {
		return &usageError{msg: "serve needs a config file", hint: "kmaterialize serve --config /etc/kmaterialize/kmaterialize.yaml (or export " + configEnv + ")"}
	}
	// From here on a SIGHUP (a reload sent early) must not kill the
	// process, which is SIGHUP's default.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	propsFile := c.String("F")
	cfg, err := loadServeConfig(path, propsFile)
	if err != nil {
		return err
	}
	// The file's secrets, before anything can print them.
	red := redactorOf(c)
	red.Add(cfg.Secrets()...)
	// The daemon's memory covers its followers, runs and reads (config's
	// MemoryParts); the collector works to keep the Go part within it, as
	// a rebuild's --memory does. A reload does not change it.
	defer limitGoMemory(cfg.Memory)()
	if p := c.String("cpuprofile"); p != "" {
		stop, err := startCPUProfile(p)
		if err != nil {
			return err
		}
		defer stop()
	}
	// Reads first: the rebuilds and followers leave one core's P to the
	// reads, and the daemon has spare Ps for the goroutines whose Ms are
	// in cgo calls (internal/cpushare); one share for the daemon's life,
	// reloads too.
	cores := cpushare.SetDaemonProcs()
	cpu := cpushare.ForDaemon(cores)
	srv, err := serve.New(serveConfig(c, cfg, path, log, cpu))
	if err != nil {
		return err
	}
	log.Info().Str("config", path).Str("db", cfg.DB).Strs("tables", cfg.Names()).
		Object("kafka_properties", cfg.Kafka.Properties).
		Int("cores", cores).Int("gomaxprocs", runtime.GOMAXPROCS(0)).Int("rebuild_work_slots", cpu.Slots()).
		Msg("config loaded")

	// SIGHUP reloads; the goroutine ends when Run has returned.
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	reloaded := make(chan struct{})
	go func() {
		defer close(reloaded)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				reload(path, propsFile, cfg, srv, log, red, cpu)
			}
		}
	}()
	err = srv.Run(ctx, func() {
		if nerr := notifyReady(); nerr != nil {
			log.Warn().Err(nerr).Msg("could not tell systemd that the daemon is ready (NOTIFY_SOCKET)")
		}
	})
	cancel()
	<-reloaded
	return err
}

// serveConfig is the daemon's configuration from the config file cfg
// loaded from path.
func serveConfig(c *cli.Context, cfg *config.Config, path string, log zerolog.Logger, cpu *cpushare.Share) serve.Config {
	return serve.Config{
		DBPath: cfg.DB, Socket: cfg.Socket, SocketMode: cfg.SocketMode, SocketGroup: cfg.SocketGroup,
		Listen: cfg.Listen, AllowRemote: cfg.AllowRemote, AdminToken: cfg.AdminToken.Reveal(),
		ReadToken: cfg.ReadToken.Reveal(), MetricsToken: cfg.MetricsToken.Reveal(),
		TLSCert: cfg.TLSCert, TLSKey: cfg.TLSKey, AllowPlaintextTokens: cfg.AllowPlaintextTokens,
		LockTimeout: lockTimeout(c), Tables: configured.Tables(cfg, cpu), ExitCode: exitCode, Log: log,
		PageCheck: pageCheck, Command: "kmaterialize serve --config " + path,
		Update: configured.Update(cfg, cpu),

		MaxConcurrentRuns: cfg.MaxConcurrentRuns, RetryBackoffMax: cfg.RetryBackoffMax, ShutdownTimeout: cfg.ShutdownTimeout,
		Stopping: func() {
			if err := sdNotify("STOPPING=1"); err != nil {
				log.Warn().Err(err).Msg("could not tell systemd that the daemon is stopping (NOTIFY_SOCKET)")
			}
		},
		SpoolMaxBytes: cfg.SpoolMaxBytes, MaxHeavyRequests: cfg.MaxHeavyRequests, PageMaxBytes: cfg.PageMaxBytes,
		FeedRetainBytes: cfg.Feed.RetainBytes, FeedRetainFor: cfg.Feed.RetainFor, FeedMaxBytes: cfg.Feed.MaxBytes,
		FeedSlowBytes: cfg.Feed.SlowWatcherBytes, MaxWatchers: cfg.Feed.MaxWatchers, FeedHeartbeat: cfg.Feed.Heartbeat,
		FeedSpoolMaxBytes: cfg.Feed.SpoolMaxBytes,
	}
}

// checkServeConfig is serve --check-config: every check serve makes at
// start short of opening the database and the socket (the file, -F,
// librdkafka's verdict on the properties, the Schema Registry settings,
// the daemon's own validation), and with --check-kafka the brokers and
// every table's topic. It prints what the file holds on stdout.
func checkServeConfig(c *cli.Context, path string) error {
	if c.NArg() > 0 {
		return usageErrorf("unexpected argument %q", c.Args().First())
	}
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	cfg, err := loadServeConfig(path, c.String("F"))
	if err != nil {
		return err
	}
	redactorOf(c).Add(cfg.Secrets()...)
	if st, err := os.Stat(cfg.DB); err == nil && st.IsDir() {
		return &config.Error{Path: path, Field: "db", Msg: fmt.Sprintf("%s is a directory; the database is a file", cfg.DB)}
	}
	if _, err := serve.New(serveConfig(c, cfg, path, log, nil)); err != nil {
		// serve's own checks (socket mode and group, listen, table names)
		// name the field; the file is this one.
		return fmt.Errorf("config %s: %w", path, err)
	}
	out := stdoutOf(c)
	fmt.Fprintf(out, "config %s: ok: db %s, socket %s, %d table(s)\n", path, cfg.DB, cfg.Socket, len(cfg.Tables))
	fmt.Fprintf(out, "  memory %s: %s\n", config.FormatSize(cfg.Memory), cfg.MemoryParts())
	for _, t := range cfg.Tables {
		line := fmt.Sprintf("  table %s: topic %s, fold %s", t.Spec.Name, t.Spec.Topic, t.Spec.Fold)
		if t.Schedule != "" {
			line += ", schedule " + t.Schedule
		}
		if t.Follow {
			line += ", follow"
		}
		fmt.Fprintln(out, line)
	}
	if !c.Bool("check-kafka") {
		return nil
	}
	for _, t := range cfg.Tables {
		stall := t.Spec.StallTimeout
		if stall <= 0 {
			stall = 30 * time.Second
		}
		plan, err := replay.Inspect(c.Context, replay.Config{Brokers: cfg.Kafka.Brokers, Props: cfg.Kafka.Properties,
			Topic: t.Spec.Topic, StallTimeout: stall, Log: log})
		if err != nil {
			return fmt.Errorf("config %s:%d: table %q: topic %q: %w", path, t.Line, t.Spec.Name, t.Spec.Topic, config.Scrub(err, cfg.Kafka.Properties))
		}
		fmt.Fprintf(out, "  topic %s: %d partition(s)\n", t.Spec.Topic, len(plan.Partitions))
	}
	fmt.Fprintf(out, "kafka %s: ok: every table's topic exists\n", cfg.Kafka.Brokers)
	return nil
}

// orExample is path, or an example path when it is empty.
func orExample(path string) string {
	if path == "" {
		return "/etc/kmaterialize/kmaterialize.yaml"
	}
	return path
}

// loadServeConfig loads the file and checks what serve needs beyond what
// the file format requires: a database, and Kafka properties librdkafka
// accepts (named without their values when secret). A -F properties file
// (at most one) is read with it, its properties over the config's.
func loadServeConfig(path string, propsFile ...string) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	for _, f := range propsFile {
		if f == "" {
			continue
		}
		props, err := config.LoadProperties(f)
		if err != nil {
			return nil, fmt.Errorf("-F: %w", err)
		}
		for k, v := range props {
			cfg.Kafka.Properties[k] = v
		}
	}
	if cfg.DB == "" {
		return nil, &config.Error{Path: path, Field: "db", Msg: "required by serve"}
	}
	props := cfg.Kafka.Properties
	if len(cfg.Tables) > 0 && cfg.Kafka.Brokers == "" && props["bootstrap.servers"] == "" {
		return nil, &config.Error{Path: path, Field: "kafka.brokers", Msg: "required to build tables"}
	}
	if err := checkProps(cfg.Kafka.Brokers, props, replay.ConsumerClient); err != nil {
		return nil, fmt.Errorf("config %s: kafka.properties: %w", path, err)
	}
	// A table with a Schema Registry format needs the registry now, not
	// at its first build.
	reg := cfg.SchemaRegistry.Registry().WithEnv(os.LookupEnv)
	for i, t := range cfg.Tables {
		dc := decode.Config{Key: t.Spec.KeyFormat, Value: t.Spec.ValueFormat, Registry: reg}
		if err := dc.Check(); err != nil {
			return nil, &config.Error{Path: path, Line: t.Line, Field: fmt.Sprintf("tables[%d]", i), Msg: err.Error(), Err: err}
		}
	}
	return cfg, nil
}

// reload is SIGHUP: the tables of the file as it is now replace the
// running ones; a file that does not load changes nothing.
func reload(path, propsFile string, old *config.Config, srv *serve.Server, log zerolog.Logger, red *config.Redactor, cpu *cpushare.Share) {
	cfg, err := loadServeConfig(path, propsFile)
	if err == nil {
		red.Add(cfg.Secrets()...)
	}
	if err != nil {
		log.Error().Err(err).Str("config", path).Msg("reload failed: keeping the running tables")
		srv.ReloadFailed(red.Error(err))
		return
	}
	if cfg.DB != old.DB || cfg.Socket != old.Socket || cfg.SocketMode != old.SocketMode || cfg.SocketGroup != old.SocketGroup ||
		cfg.Listen != old.Listen || cfg.AllowRemote != old.AllowRemote || cfg.AdminToken != old.AdminToken ||
		cfg.ReadToken != old.ReadToken || cfg.MetricsToken != old.MetricsToken || cfg.TLSCert != old.TLSCert ||
		cfg.TLSKey != old.TLSKey || cfg.AllowPlaintextTokens != old.AllowPlaintextTokens ||
		cfg.MaxConcurrentRuns != old.MaxConcurrentRuns || cfg.RetryBackoffMax != old.RetryBackoffMax || cfg.ShutdownTimeout != old.ShutdownTimeout {
		log.Warn().Str("config", path).Msg("db, socket, listen, token, TLS path, max_concurrent_runs, retry_backoff_max and shutdown_timeout changes take effect at the next start only (SIGHUP reads the certificate files named at start again)")
	}
	// SetTables also reads the TLS certificate and key again; when they do
	// not load, nothing changes.
	if err := srv.SetTables(configured.Tables(cfg, cpu)); err != nil {
		log.Error().Err(err).Str("config", path).Msg("reload refused: keeping the running tables and TLS certificate")
		return
	}
	log.Info().Str("config", path).Strs("tables", cfg.Names()).Msg("config reloaded")
}

// notifyReady sends READY=1 to systemd's notify socket (sdNotify).
func notifyReady() error { return sdNotify("READY=1") }

// sdNotify sends state (READY=1, STOPPING=1) to systemd's notify socket,
// when there is one (Type=notify); sd_notify's protocol is one datagram.
func sdNotify(state string) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:] // abstract namespace
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return err
}
