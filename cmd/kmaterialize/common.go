package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/kmaterialize/kmaterialize/config"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// Field keys shared by every log line.
const (
	keyTopic      = "topic"
	keyPartition  = "partition"
	keyTable      = "table"
	keyGeneration = "generation"
)

func dbFlag(required bool) cli.Flag {
	return &cli.StringFlag{Name: "db", Usage: "path of the bbolt database `FILE`", Required: required, EnvVars: []string{"KMATERIALIZE_DB"}}
}

func brokersFlag() cli.Flag {
	return &cli.StringFlag{Name: "brokers", Aliases: []string{"b"}, Usage: "bootstrap `BROKERS`, comma separated HOST:PORT", EnvVars: []string{"KMATERIALIZE_BROKERS"}}
}

func topicFlag() cli.Flag {
	return &cli.StringFlag{Name: "topic", Aliases: []string{"t"}, Usage: "Kafka `TOPIC`", Required: true}
}

func propsFlag() cli.Flag {
	return &cli.StringSliceFlag{Name: "X", Usage: "librdkafka property `KEY=VALUE` (repeatable), e.g. -X security.protocol=SASL_SSL"}
}

// readersFlag is --readers: how many consumers read the topic's partitions.
func readersFlag() cli.Flag {
	return &cli.IntFlag{Name: "readers", Value: materialize.DefaultReaders, Usage: "read the partitions with `N` consumers, each a share of them and of --memory's prefetch (1 to 64; two read faster than one even on two cores)", DefaultText: "2, or the config file's readers"}
}

// stallTimeout returns --stall-timeout, which must be positive: 0 would
// otherwise fall back to a default without a word.
func stallTimeout(c *cli.Context) (time.Duration, error) {
	d := c.Duration("stall-timeout")
	if d <= 0 {
		return 0, &usageError{msg: fmt.Sprintf("--stall-timeout %s: must be positive", d), hint: "--stall-timeout 30s"}
	}
	return d, nil
}

// checkProps asks librdkafka, before any work, whether it accepts the -X
// properties for the clients the command creates.
func checkProps(brokers string, props map[string]string, kinds ...replay.ClientKind) error {
	if len(props) == 0 {
		return nil
	}
	// librdkafka's verdict names the property with its value: never a
	// secret's.
	return config.Scrub(replay.CheckProps(brokers, props, kinds...), props)
}

func stallFlag() cli.Flag {
	return &cli.DurationFlag{Name: "stall-timeout", Value: 30 * time.Second, Usage: "fail when no partition makes progress for this `DURATION` (also bounds metadata requests)"}
}

// parseProps turns repeated -X key=value flags into a map, on top of the
// -F file's properties, on top of the config file's (see configProps): -X
// wins over -F, which wins over --config. Secret values are added to the
// run's Redactor.
func parseProps(c *cli.Context) (map[string]string, error) {
	props := configProps(c)
	if props == nil {
		props = map[string]string{}
	}
	fromFile, err := fileProps(c)
	if err != nil {
		return nil, err
	}
	for k, v := range fromFile {
		props[k] = v
	}
	defer redactorOf(c).AddProperties(props)
	for _, kv := range c.StringSlice("X") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, &usageError{msg: fmt.Sprintf("-X %q: want KEY=VALUE", kv), hint: "-X security.protocol=SASL_SSL -X sasl.mechanism=PLAIN"}
		}
		props[strings.TrimSpace(k)] = v
	}
	return props, nil
}

func brokers(c *cli.Context, props map[string]string) (string, error) {
	b := c.String("brokers")
	if b == "" && props["bootstrap.servers"] == "" {
		return "", &usageError{msg: "no brokers given", hint: "--brokers HOST:PORT, or export KMATERIALIZE_BROKERS=HOST:PORT"}
	}
	return b, nil
}

// newLogger sets up zerolog once: human console output on a terminal, JSON
// lines otherwise, always on stderr.
func newLogger(c *cli.Context) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(c.String("log-level"))
	if err != nil || c.String("log-level") == "" {
		return zerolog.Nop(), usageErrorf("--log-level %q: want debug, info, warn or error", c.String("log-level"))
	}
	w := stderrOf(c)
	tty := isTerminal(w)
	// Through the run's log sink (above the progress bars while they are
	// drawn) and its Redactor.
	out := logOutput(c)
	format := c.String("log-format")
	switch format {
	case "auto":
		if tty {
			format = "console"
		} else {
			format = "json"
		}
	case "console", "json":
	default:
		return zerolog.Nop(), usageErrorf("--log-format %q: want auto, console or json", format)
	}
	// Clients log from goroutines of their own (librdkafka's log and event
	// forwarders): one lock keeps their lines whole, whatever w is.
	var log zerolog.Logger
	if format == "console" {
		log = zerolog.New(zerolog.SyncWriter(zerolog.ConsoleWriter{Out: out, TimeFormat: "15:04:05"}))
	} else {
		log = zerolog.New(zerolog.SyncWriter(out))
	}
	return log.Level(lvl).With().Timestamp().Logger(), nil
}

func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// lockTimeoutFlag is --lock-timeout, on every command that opens the
// database.
func lockTimeoutFlag() cli.Flag {
	return &cli.DurationFlag{Name: "lock-timeout", Value: store.DefaultLockTimeout,
		Usage: "wait up to this `DURATION` for another process holding the database, then exit 7 (0: do not wait)"}
}

// lockTimeout is --lock-timeout as store.Options wants it: 0 there means the
// default, a negative value "do not wait".
func lockTimeout(c *cli.Context) time.Duration {
	return storeLockTimeout(c.Duration("lock-timeout"))
}

// storeLockTimeout is a --lock-timeout of d as store.Options wants it.
func storeLockTimeout(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return -1
}

// openRead opens the database read-only for a query.
func openRead(c *cli.Context) (*store.DB, error) {
	path := c.String("db")
	if path == "" {
		return nil, &usageError{msg: "--db is required", hint: "--db balances.db"}
	}
	if err := notDir(path); err != nil {
		return nil, err
	}
	return store.Open(path, &store.Options{ReadOnly: true, LockTimeout: lockTimeout(c)})
}

// openWrite opens the database read-write for command (what the holder
// record shows: the subcommand and its non-secret arguments), with bbolt's
// page walk checked in a child process first (see pageCheck). A file that
// this open creates is remembered: if the command then fails with no table
// in it, run removes it (removeCreatedDB), so a typo in --db or a broker
// that is down leaves nothing behind.
func openWrite(c *cli.Context, path, command string) (*store.DB, error) {
	if err := notDir(path); err != nil {
		return nil, err
	}
	_, statErr := os.Stat(path)
	db, err := store.Open(path, &store.Options{LockTimeout: lockTimeout(c), Command: command, PageCheck: pageCheck})
	if err == nil && errors.Is(statErr, fs.ErrNotExist) {
		c.App.Metadata[metaCreatedDB] = path
	}
	return db, err
}

// metaCreatedDB is the App.Metadata key of the database file this run
// created (see openWrite).
const metaCreatedDB = "created-db"

// notDir refuses a directory given as the database: bbolt would call it an
// unsupported format.
func notDir(path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return &usageError{msg: fmt.Sprintf("--db %s is a directory; the database is a file", path),
			hint: "--db " + filepath.Join(path, "tables.db")}
	}
	return nil
}

// removeCreatedDB removes the database file a failed run created, when it
// holds no table (a run that published and then failed, say writing to
// stdout, keeps it). The command's deferred Close has run by now; a file
// another process opened meanwhile is kept (the open fails or finds its
// table).
func removeCreatedDB(app *cli.App) {
	path, ok := app.Metadata[metaCreatedDB].(string)
	if !ok {
		return
	}
	db, err := store.Open(path, &store.Options{ReadOnly: true, LockTimeout: -1})
	if err != nil {
		return
	}
	tables, err := db.Tables()
	db.Close()
	if err == nil && len(tables) == 0 {
		os.Remove(path)
	}
}

// kafkaOptions are what every command that talks to Kafka needs.
type kafkaOptions struct {
	brokers string
	props   map[string]string
	log     zerolog.Logger
}

// parseKafka reads --brokers (or KMATERIALIZE_BROKERS), -X and the logging
// flags.
func parseKafka(c *cli.Context) (kafkaOptions, error) {
	var k kafkaOptions
	var err error
	if k.props, err = parseProps(c); err != nil {
		return k, err
	}
	if k.brokers, err = brokers(c, k.props); err != nil {
		return k, err
	}
	k.log, err = newLogger(c)
	return k, err
}

// formatFlag is --format for commands that print text or JSON.
func formatFlag() cli.Flag {
	return &cli.StringFlag{Name: "format", Value: "text", Usage: "text or json"}
}

// textOrJSON returns --format, checked.
func textOrJSON(c *cli.Context) (string, error) {
	format := c.String("format")
	if format != "text" && format != "json" {
		return "", usageErrorf("--format %q: want text or json", format)
	}
	return format, nil
}
