package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/config"
	"github.com/kmaterialize/kmaterialize/internal/tableview"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

func updateCommand() *cli.Command {
	return &cli.Command{
		Name:      "update",
		Usage:     "apply what a table's topic gained since its checkpoint, and publish it atomically",
		UsageText: "kmaterialize update --db FILE --table NAME [--brokers HOST:PORT] [options]",
		Description: `Reads each partition of the table's topic from the table's checkpoint up to
the end offsets captured once at the start (the same end rules as rebuild:
--end high waits for open transactions up to --stall-timeout, --end stable
stops at the last stable offset), folds the new records onto the table and
publishes the result atomically: readers see the old table or the updated
one, never a part. The table's definition (topic, fold and its options, end
mark) is the one stored with it by its last rebuild, so update needs only
the table's name and the brokers (--brokers, KMATERIALIZE_BROKERS or
--config). --end, --stall-timeout and --memory override the stored ones for
this run.

Both folds: the count fold dedupes against, and detects conflicts with,
every record the table already counted (its identity index is kept with the
table); a conflict exits 3 and leaves the table unchanged.

Memory is bounded by --memory whatever the backlog: a backlog that fits is
applied to the published table in one write transaction; a larger one is
merged with the table's rows into a new generation, published like a
rebuild.

An update that cannot be correct is refused with exit 4, naming why, and
the table is unchanged: a checkpoint below a partition's retained low
(records were deleted before they were read), a partition gone or shorter
than the checkpoint (the topic was recreated), or, on a compacted topic, a
checkpoint older than the topic's delete.retention.ms (tombstones may have
been removed), of unknown age (an imported table), or a topic whose
configuration cannot be read (the principal needs the DescribeConfigs ACL on
the topic). --rebuild-if-needed runs a full rebuild instead. A partition
added since the checkpoint is read from its earliest retained offset.

Exit codes are rebuild's: 3 conflict or bad record, 4 incomplete or refused,
5 Kafka unavailable, 6 table not found, 7 database busy.

Examples:
  $ kmaterialize update --db balances.db --table account-balances --brokers localhost:9092
  $ KMATERIALIZE_BROKERS=localhost:9092 kmaterialize update --db votes.db --table studio-votes --rebuild-if-needed
  $ kmaterialize update --config /etc/kmaterialize.yaml --table balances`,
		Flags: []cli.Flag{
			configFlag(), brokersFlag(), dbFlag(true), lockTimeoutFlag(), socketFlag(), propsFlag(),
			&cli.StringFlag{Name: "table", Usage: "table `NAME`", Required: true},
			&cli.StringFlag{Name: "end", Usage: "end `MARK`: high or stable", DefaultText: "the table's stored one"},
			&cli.DurationFlag{Name: "stall-timeout", Usage: "fail when no partition makes progress for this `DURATION`", DefaultText: "the table's stored one, else 30s"},
			&cli.StringFlag{Name: "memory", Usage: "bound `SIZE` (e.g. 64MiB) on the memory for records and rows (default: the table's stored one, else 256MiB)"},
			&cli.BoolFlag{Name: "rebuild-if-needed", Usage: "run a full rebuild when the checkpoint cannot be continued, instead of exiting 4"},
			&cli.DurationFlag{Name: "progress-interval", Value: 5 * time.Second, Usage: "how often to log progress when stderr is not a terminal"},
			schemaRegistryFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("unexpected argument %q", c.Args().First())
			}
			table := c.String("table")
			if routed, err := viaDaemon(c, func(d *daemon) error { return updateVia(c, d, table) }); routed {
				return err
			}
			o, err := newUpdateOptions(c)
			if err != nil {
				return err
			}
			return o.run(c)
		},
	}
}

type updateOptions struct {
	dbPath string
	opts   materialize.UpdateOptions
}

func newUpdateOptions(c *cli.Context) (*updateOptions, error) {
	props, err := parseProps(c)
	if err != nil {
		return nil, err
	}
	b, err := brokers(c, props)
	if err != nil {
		return nil, err
	}
	o := &updateOptions{dbPath: c.String("db")}
	o.opts = materialize.UpdateOptions{Table: c.String("table"), Brokers: b, Props: props, RebuildIfNeeded: c.Bool("rebuild-if-needed")}
	// A table stored with a Schema Registry format decodes with the
	// registry of --schema-registry, the environment or the config file.
	if o.opts.Registry, err = registrySettings(c); err != nil {
		return nil, err
	}
	if c.IsSet("end") {
		switch e := replay.EndMark(c.String("end")); e {
		case replay.EndHigh, replay.EndStable:
			o.opts.End = e
		default:
			return nil, &usageError{msg: fmt.Sprintf("--end %q: want high or stable", c.String("end")), hint: "--end high"}
		}
	}
	if c.IsSet("stall-timeout") {
		if o.opts.StallTimeout, err = stallTimeout(c); err != nil {
			return nil, err
		}
	}
	if c.IsSet("memory") {
		if o.opts.Memory, err = parseMemory(c.String("memory")); err != nil {
			return nil, err
		}
	}
	if err := checkProps(b, props, replay.ConsumerClient); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *updateOptions) run(c *cli.Context) error {
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	table := o.opts.Table
	// An update of a file that is not there must not create it.
	if _, err := os.Stat(o.dbPath); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("update of table %q: %w", table, &store.NoDatabaseError{Path: o.dbPath})
	}
	db, err := openWrite(c, o.dbPath, fmt.Sprintf("kmaterialize update --db %s --table %s", o.dbPath, table))
	if err != nil {
		return err
	}
	defer db.Close()
	if n := db.Cleaned(); n > 0 {
		log.Warn().Int("generations", n).Str("db", o.dbPath).Msg("removed unpublished generations left by an interrupted rebuild or update")
	}
	o.opts.DB, o.opts.Log = db, log
	prog, err := newProgress(c, log)
	if err != nil {
		return err
	}
	defer prog.Finish()
	o.opts.Progress, o.opts.ProgressInterval = prog.Update, prog.Tick()
	if processOf(c).limitGoMemory {
		defer limitGoMemory(o.opts.Memory)()
	}
	log.Info().Str(keyTable, table).Str("db", o.dbPath).Msg("update started")
	rep, err := materialize.Update(c.Context, o.opts)
	endProgress(prog, err)
	if err != nil {
		return fmt.Errorf("update of table %q failed, nothing published: %w", table, config.Scrub(err, o.opts.Props))
	}
	return printUpdated(stdoutOf(c), rep)
}

// printUpdated prints the line of an update that published rep.
func printUpdated(w io.Writer, rep materialize.Report) error {
	if rep.Mode == materialize.ModeRebuilt {
		return printPublished(w, tableview.FromMeta(rep.Meta))
	}
	return printUpdateLine(w, rep.Meta.Name, rep.Mode, rep.Meta.Generation, rep.Meta.Keys, rep.Replay.Records, rep.Checkpoint.Updates)
}

func printUpdateLine(w io.Writer, table, mode string, gen uint64, keys, records, updates int64) error {
	_, err := fmt.Fprintf(w, "updated table %s (%s): generation %d, %d keys, %d new records read, %d updates since the last rebuild\n",
		table, mode, gen, keys, records, updates)
	return err
}

// updateViaDaemonFlags are the update flags a routed update accepts.
var updateViaDaemonFlags = map[string]bool{
	"config": true, "db": true, "table": true, "socket": true, "lock-timeout": true, "progress-interval": true,
	"rebuild-if-needed": true,
}

// updateVia asks the daemon to update table from its stored definition
// with the daemon's brokers, and waits for the run.
func updateVia(c *cli.Context, d *daemon, table string) error {
	cfg, _ := c.App.Metadata[metaConfig].(*config.Config)
	refused := refusedFlags(c, updateViaDaemonFlags, func(name string) bool {
		return name == "brokers" && cfg != nil && c.String(name) == cfg.Kafka.Brokers
	}, false)
	if len(refused) > 0 {
		return &usageError{
			msg: fmt.Sprintf("a daemon holds the database, so it runs the update of table %q with its own brokers and the table's stored definition; %s would change how it runs",
				table, strings.Join(refused, ", ")),
			hint: fmt.Sprintf("kmaterialize update %s --table %s [--rebuild-if-needed], or stop the daemon", where(c), table),
		}
	}
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	log.Info().Str(keyTable, table).Str("socket", d.cl.Addr()).Msg("the daemon holds the database: it runs the update")
	res, err := d.cl.Update(c.Context, table, c.Bool("rebuild-if-needed"))
	if errors.Is(err, c.Context.Err()) && err != nil {
		return fmt.Errorf("stopped waiting for the daemon's update of table %q, which goes on: %w", table, err)
	}
	if err != nil {
		return d.fail(err, table)
	}
	if res.ExitCode != exitOK {
		return d.runFailed(" (update)", res.Run, table, res.ExitCode, res.Error)
	}
	if res.Mode != materialize.ModeRebuilt {
		return printUpdateLine(stdoutOf(c), table, res.Mode, res.Generation, res.Keys, res.Records, res.Updates)
	}
	return printPublishedVia(c, d, table, res.Generation)
}
