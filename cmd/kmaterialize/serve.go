package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/config"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/serve"
	"github.com/kmaterialize/kmaterialize/store"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:      "serve",
		Usage:     "run the daemon: keep the config's tables published and answer other processes over a unix socket",
		UsageText: "kmaterialize serve --config FILE [--lock-timeout DURATION]",
		Description: `Holds the database named by the config file, builds every configured table
that has never been published, rebuilds tables on their schedules and on
request, and answers reads over HTTP on a unix socket (and on the optional
TCP listen address). Readers keep the previous generation of a table while
a rebuild runs. See the README for the HTTP API.

The config file (YAML; an unknown field is an error naming its line):

  db: /var/lib/kmaterialize/tables.db
  socket: /run/kmaterialize/tables.sock    # default: the db path + .sock
  socket_mode: "0660"                      # default 0600
  socket_group: kmaterialize-readers       # default: the process's group
  listen: 127.0.0.1:9466                   # optional: reads, /metrics, /healthz, /readyz
  allow_remote: false                      # a non-loopback listen needs this and admin_token
  admin_token: ${KMATERIALIZE_ADMIN_TOKEN} # bearer token for POST on listen
  kafka:
    brokers: kafka-1:9092,kafka-2:9092
    properties:                            # librdkafka properties; ${NAME} from the environment
      security.protocol: SASL_SSL
      sasl.password: ${KAFKA_PASSWORD}
  tables:
    - name: balances
      topic: account-balances
      fold: latest                         # latest | count
      schedule: "@every 10m"               # or 5 cron fields; optional
      end: high                            # high | stable
      stall_timeout: 30s
      on_bad_record: fail                  # fail | skip
      allow_empty: false
      keep: 2                              # earlier generations kept for rollback and diff; default 0
      max_change: 20                       # refuse a publish changing more than 20% of the keys; default off
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
Secrets (properties whose name says password, secret or token,
sasl.jaas.config, ssl.key.pem, and the admin token) never appear in logs or
errors.

Signals: SIGHUP reloads the file: added tables are built, removed ones are no
longer rebuilt or scheduled but stay readable; a file that does not load is
logged and the running tables are kept (db, socket and listen changes need a
restart). SIGTERM or SIGINT stops accepting requests, lets those in flight
finish, abandons unpublished rebuilds and exits 0; a second signal exits at
once. With systemd Type=notify, READY=1 is sent once the socket serves (not
once every table is built: GET /readyz says that).

Exit codes: 0 after a signal, 2 for a config that does not load or a value
the daemon refuses, 7 when another process holds the database.

Examples:
  $ kmaterialize serve --config /etc/kmaterialize/kmaterialize.yaml
  $ curl --unix-socket /run/kmaterialize/tables.sock http://kmaterialize/v1/tables/balances/keys/acct-42
  $ kill -HUP $(pidof kmaterialize)     # reload the config`,
		Flags:  []cli.Flag{configFlag(), lockTimeoutFlag()},
		Action: runServe,
	}
}

// runServe loads the config, runs the daemon until the context ends, and
// reloads the tables on SIGHUP.
func runServe(c *cli.Context) error {
	if c.NArg() > 0 {
		return usageErrorf("unexpected argument %q", c.Args().First())
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
	cfg, err := loadServeConfig(path)
	if err != nil {
		return err
	}
	srv, err := serve.New(serve.Config{
		DBPath: cfg.DB, Socket: cfg.Socket, SocketMode: cfg.SocketMode, SocketGroup: cfg.SocketGroup,
		Listen: cfg.Listen, AllowRemote: cfg.AllowRemote, AdminToken: cfg.AdminToken.Reveal(),
		LockTimeout: lockTimeout(c), Tables: serveTables(cfg), ExitCode: exitCode, Log: log,
		PageCheck: pageCheck, Command: "kmaterialize serve --config " + path,
	})
	if err != nil {
		return err
	}
	log.Info().Str("config", path).Str("db", cfg.DB).Strs("tables", cfg.Names()).
		Object("kafka_properties", cfg.Kafka.Properties).Msg("config loaded")

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
				reload(path, cfg, srv, log)
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

// loadServeConfig loads the file and checks what serve needs beyond what
// the file format requires: a database, and Kafka properties librdkafka
// accepts (named without their values when secret).
func loadServeConfig(path string) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
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
	return cfg, nil
}

// reload is SIGHUP: the tables of the file as it is now replace the
// running ones; a file that does not load changes nothing.
func reload(path string, old *config.Config, srv *serve.Server, log zerolog.Logger) {
	cfg, err := loadServeConfig(path)
	if err != nil {
		log.Error().Err(err).Str("config", path).Msg("reload failed: keeping the running tables")
		return
	}
	if cfg.DB != old.DB || cfg.Socket != old.Socket || cfg.SocketMode != old.SocketMode || cfg.SocketGroup != old.SocketGroup ||
		cfg.Listen != old.Listen || cfg.AllowRemote != old.AllowRemote || cfg.AdminToken != old.AdminToken {
		log.Warn().Str("config", path).Msg("db, socket, listen and admin_token changes take effect at the next start only")
	}
	if err := srv.SetTables(serveTables(cfg)); err != nil {
		log.Error().Err(err).Str("config", path).Msg("reload refused: keeping the running tables")
		return
	}
	log.Info().Str("config", path).Strs("tables", cfg.Names()).Msg("config reloaded")
}

// serveTables turns each table of cfg into a serve.Table whose Build is
// the same rebuild as kmaterialize rebuild --config FILE --table NAME.
func serveTables(cfg *config.Config) []serve.Table {
	brokers, props := cfg.Kafka.Brokers, map[string]string(cfg.Kafka.Properties)
	out := make([]serve.Table, 0, len(cfg.Tables))
	for _, t := range cfg.Tables {
		spec := t.Spec
		out = append(out, serve.Table{
			Name: spec.Name, Topic: spec.Topic, Fold: spec.Fold, Schedule: t.Schedule,
			Build: func(ctx context.Context, db *store.DB, log zerolog.Logger) (materialize.Report, error) {
				opts, err := spec.Options(db, brokers, props, log)
				if err != nil {
					return materialize.Report{}, err
				}
				rep, err := materialize.Rebuild(ctx, opts)
				if err != nil {
					err = fmt.Errorf("rebuild of table %q from topic %q failed, nothing published: %w", spec.Name, spec.Topic, err)
				}
				return rep, config.Scrub(err, props)
			},
		})
	}
	return out
}

// notifyReady sends READY=1 to systemd's notify socket, when there is one
// (Type=notify); sd_notify's protocol is one datagram.
func notifyReady() error {
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
	_, err = conn.Write([]byte("READY=1"))
	return err
}
