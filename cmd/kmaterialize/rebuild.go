package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/config"
	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/internal/tableview"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

func rebuildCommand() *cli.Command {
	return &cli.Command{
		Name:      "rebuild",
		Usage:     "replay a topic up to its current end and publish a fresh table",
		UsageText: "kmaterialize rebuild --brokers HOST:PORT --topic TOPIC --db FILE [options]\n   kmaterialize rebuild --config FILE --table NAME [options]",
		Description: `Replays every partition of TOPIC from its earliest retained offset (or from
--from-offsets / --from-timestamp) up to the end offsets captured once at the
start, folds the records into a new generation of the table and publishes it
atomically. A failed or interrupted rebuild publishes nothing: readers keep
the previous table. The replay never joins or commits to any consumer group.

Records are read with isolation.level=read_committed. With --end high (the
default) the end is the high watermark; if an open transaction holds the last
stable offset below it, the rebuild waits for it, up to --stall-timeout, then
exits 4. --end stable stops at the last stable offset captured at start and
never waits, but leaves out records committed after the oldest open
transaction.

A rebuild in which no record contributes a row (for example --from-timestamp
after the last record) does not replace a table that has rows: it exits 3
and keeps the published table, unless --allow-empty. A record the fold
cannot store (a key over bbolt's 32 KiB limit; with --fold count, a value
without a usable identity or group) exits 3 naming its partition and offset,
unless --on-bad-record skip, which leaves it out and counts it by reason
(see kmaterialize tables).

Transient broker errors (a leader election, a broker restarting) are retried
for up to --stall-timeout. Brokers that stay unreachable, or the topic deleted
during the read, exit 5. Partitions added during the read are not read (a
warning names them); ` + "`kmaterialize tables`" + ` shows the partitions a table covers.

Memory is bounded by --memory (default 256MiB), whatever the number of
records or keys: it covers the client's prefetch queue, the records being
folded and the rows the fold holds. Rows beyond it are written, sorted, to
temporary run files in FILE.runs/ beside the database (disk space: up to
about the size of the table's rows), and merged into the table at the end;
the run files are removed when the rebuild ends, and by the next open after
a crash.
` + decodeHelp + `
` + shardHelp + `

--until-timestamp T ends each partition at its first record whose timestamp
is >= T (ListOffsets by timestamp, asked once at the start), so the table is
the topic as of T; --to-offsets ends chosen partitions at given offsets (an
offset above the high mark exits 2). Either combines with --from-offsets or
--from-timestamp and with --end; an end inside an open transaction waits for
it exactly as the high mark does. kmaterialize tables and export record the
bound.

--keep N keeps the N previous generations in the file, each with its
checkpoint and provenance (kmaterialize tables lists them): kmaterialize
rollback makes one the published table again, kmaterialize diff lists the keys
two generations differ in. Every publish records how many keys it added,
removed and changed. --max-change PERCENT refuses (exit 3, the published table
kept) a rebuild that would add, remove or change more than PERCENT of the
published table's keys; a first rebuild, or one over an empty table, is never
refused.

A corrupt database (see kmaterialize check) stops the rebuild with exit 1;
--replace-corrupt moves it aside to FILE.corrupt-<UTC time> instead, says
where in the log, and builds a fresh database with this table only.

Examples:
  $ kmaterialize rebuild --brokers localhost:9092 --topic account-balances --db balances.db
  $ kmaterialize rebuild --brokers localhost:9092 --topic account-balances --db balances.db --replace-corrupt
  $ kmaterialize rebuild --brokers localhost:9092 --topic account-balances --db balances.db --from-offsets 0=120,2=7
  $ kmaterialize rebuild --brokers localhost:9092 --topic account-balances --db balances.db --from-timestamp 2026-11-29T10:00:00Z
  $ kmaterialize rebuild --brokers localhost:9092 --topic studio-votes --db votes.db \
      --fold count --identity-field event_id --group-field booth --catalog booths.json
  $ kmaterialize rebuild --brokers localhost:9092 --topic account-balances --db asof.db --until-timestamp 2026-11-29T00:00:00Z
  $ kmaterialize rebuild --brokers localhost:9092 --topic account-balances --db balances.db --keep 3 --max-change 10
  $ kmaterialize rebuild --config /etc/kmaterialize.yaml --table balances
  $ kmaterialize rebuild --brokers localhost:9092 --topic account-balances --db shard-a.db \
      --partitions 0-5 --partitioner murmur2
  $ KMATERIALIZE_SCHEMA_REGISTRY_USER=svc KMATERIALIZE_SCHEMA_REGISTRY_PASSWORD=... kmaterialize rebuild \
      --brokers localhost:9092 --topic orders --db orders.db --value-format avro --schema-registry http://localhost:8081
  $ kmaterialize rebuild --brokers localhost:9092 --topic account-balances --db balances.db --progress lines --progress-interval 30s
  $ kmaterialize rebuild --config /etc/kmaterialize.yaml --table balances --end stable --db /tmp/try.db
  $ KMATERIALIZE_BROKERS=kafka:9093 kmaterialize rebuild --topic account-balances --db balances.db \
      -F client.properties    # security.protocol=SASL_SSL, sasl.password=..., one KEY=VALUE a line`,
		Flags: append([]cli.Flag{
			configFlag(), brokersFlag(), topicFlag(), dbFlag(true), lockTimeoutFlag(), socketFlag(),
			&cli.BoolFlag{Name: "replace-corrupt", Usage: "if the database is corrupt, move it aside to FILE.corrupt-<UTC time> and build a fresh one"},
			&cli.StringFlag{Name: "table", Usage: "table `NAME` (default: the topic name)"},
			&cli.StringFlag{Name: "from-offsets", Usage: "start offsets `P=OFFSET[,P=OFFSET]`; partitions not named start at their earliest retained offset"},
			&cli.StringFlag{Name: "from-timestamp", Usage: "start each partition at the first record with timestamp >= `TIME` (RFC 3339 or epoch milliseconds)"},
			&cli.StringFlag{Name: "until-timestamp", Usage: "end each partition before its first record with timestamp >= `TIME` (RFC 3339 or epoch milliseconds): the table as of TIME"},
			&cli.StringFlag{Name: "to-offsets", Usage: "end offsets `P=OFFSET[,P=OFFSET]` (exclusive); partitions not named end at the end mark"},
			&cli.IntFlag{Name: "keep", Usage: "keep the `N` previous generations in the file (with their checkpoints) for rollback and diff", DefaultText: "0, or the config file's keep"},
			&cli.StringFlag{Name: "max-change", Usage: "refuse to publish (exit 3) a rebuild that adds, removes or changes more than `PERCENT` of the table's keys", DefaultText: "off, or the config file's max_change"},
			&cli.StringFlag{Name: "end", Value: "high", Usage: "end `MARK`: high (high watermark; waits for open transactions) or stable (last stable offset; never waits)"},
			stallFlag(), propsFlag(),
			&cli.BoolFlag{Name: "allow-empty", Usage: "publish even if no record contributes a row, replacing a table that has rows"},
			progressIntervalFlag(),
			&cli.StringFlag{Name: "cpuprofile", Hidden: true, Usage: "write a CPU profile of the rebuild to `FILE` (for the benchmark)"},
			&cli.StringFlag{Name: "memory", Value: "256MiB", Usage: "bound `SIZE` (e.g. 64MiB, 1GiB; at least 1MiB) on the memory for records and rows; beyond it rows are sorted into run files beside the database"},
			readersFlag(),
		}, append(foldFlags(), shardFlags()...)...),
		Action: func(c *cli.Context) error {
			o, err := newRebuildOptions(c)
			if err != nil {
				return err
			}
			return o.run(c)
		},
	}
}

type rebuildOptions struct {
	// spec is the table's definition, from the flags and the config file.
	spec           materialize.Spec
	dbPath         string
	replaceCorrupt bool
	brokers        string
	props          map[string]string
	start          replay.Start
	// registry is the Schema Registry for the spec's formats.
	registry decode.Registry
}

func newRebuildOptions(c *cli.Context) (*rebuildOptions, error) {
	if c.NArg() > 0 {
		return nil, usageErrorf("unexpected argument %q", c.Args().First())
	}
	props, err := parseProps(c)
	if err != nil {
		return nil, err
	}
	b, err := brokers(c, props)
	if err != nil {
		return nil, err
	}
	o := &rebuildOptions{dbPath: c.String("db"),
		replaceCorrupt: c.Bool("replace-corrupt"), brokers: b, props: props}
	if o.spec, err = tableSpec(c); err != nil {
		return nil, err
	}
	// A config file's table memory stands unless --memory is given.
	if _, fromFile := configTable(c); !fromFile || o.spec.Memory == 0 || c.IsSet("memory") {
		if o.spec.Memory, err = parseMemory(c.String("memory")); err != nil {
			return nil, err
		}
	}
	if c.IsSet("from-offsets") && c.IsSet("from-timestamp") {
		return nil, usageErrorf("--from-offsets and --from-timestamp are exclusive")
	}
	if s := c.String("from-offsets"); c.IsSet("from-offsets") {
		offs, err := parseOffsets(s)
		if err != nil {
			return nil, err
		}
		o.start.Offsets = offs
	}
	if s := c.String("from-timestamp"); c.IsSet("from-timestamp") {
		ts, err := parseTimestamp(s)
		if err != nil {
			return nil, err
		}
		o.start.Timestamp = ts
	}
	if err := o.historyFlags(c); err != nil {
		return nil, err
	}
	if err := checkProps(b, props, replay.ConsumerClient); err != nil {
		return nil, err
	}
	if o.registry, err = registrySettings(c); err != nil {
		return nil, err
	}
	dc := decode.Config{Key: o.spec.KeyFormat, Value: o.spec.ValueFormat, Registry: o.registry}
	if err := dc.Check(); err != nil {
		return nil, &usageError{msg: err.Error(), hint: "--value-format avro --schema-registry http://localhost:8081 (credentials: " + decode.EnvUser + ", " + decode.EnvPassword + ")"}
	}
	return o, nil
}

// historyFlags reads the end bound (--until-timestamp, --to-offsets), --keep
// and --max-change into the table's definition: the flags, when given,
// replace the config file's keep and max_change.
func (o *rebuildOptions) historyFlags(c *cli.Context) error {
	if c.IsSet("until-timestamp") && c.IsSet("to-offsets") {
		return usageErrorf("--until-timestamp and --to-offsets are exclusive")
	}
	if c.IsSet("to-offsets") {
		offs, err := parseOffsetsFlag("--to-offsets", c.String("to-offsets"))
		if err != nil {
			return err
		}
		for p, end := range offs {
			if start, ok := o.start.Offsets[p]; ok && end < start {
				return &usageError{msg: fmt.Sprintf("--to-offsets %d=%d is below --from-offsets %d=%d", p, end, p, start),
					hint: "an end offset at or above the start offset of the same partition"}
			}
		}
		o.spec.ToOffsets = offs
	}
	if c.IsSet("until-timestamp") {
		ts, err := parseTimestampFlag("--until-timestamp", c.String("until-timestamp"))
		if err != nil {
			return err
		}
		if !o.start.Timestamp.IsZero() && ts.Before(o.start.Timestamp) {
			return &usageError{msg: fmt.Sprintf("--until-timestamp %s is before --from-timestamp %s",
				ts.UTC().Format(time.RFC3339Nano), o.start.Timestamp.UTC().Format(time.RFC3339Nano)), hint: "an end time after the start time"}
		}
		o.spec.UntilTimestamp = ts
	}
	if c.IsSet("keep") {
		if c.Int("keep") < 0 {
			return &usageError{msg: fmt.Sprintf("--keep %d: must not be negative", c.Int("keep")), hint: "--keep 3"}
		}
		o.spec.Keep = c.Int("keep")
	}
	if c.IsSet("max-change") {
		v, err := parsePercent(c.String("max-change"))
		if err != nil {
			return err
		}
		o.spec.MaxChange = &v
	}
	return specUsage(o.spec.Validate())
}

// parsePercent parses --max-change: a percentage, "10" or "10%" or "2.5".
func parsePercent(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, &usageError{msg: fmt.Sprintf("--max-change %q: not a percentage", s), hint: "--max-change 10 (refuse a rebuild that adds, removes or changes more than 10% of the keys)"}
	}
	return v, nil
}

// limitGoMemory sets the Go runtime's soft memory limit to the part of
// --memory that is Go memory (all but the client's prefetch queue, which is
// C memory: materialize's memorySplit), so that the collector runs before
// the heap's garbage takes the process past --memory, instead of letting
// the heap grow to twice its live data. A limit already set (GOMEMLIMIT)
// wins. Only the kmaterialize process does this (processOptions), not tests
// that call run in their own process. The returned function restores the
// limit.
func limitGoMemory(memory int64) func() {
	if memory <= 0 {
		memory = materialize.DefaultMemory
	}
	prev := debug.SetMemoryLimit(-1)
	if prev != math.MaxInt64 {
		return func() {}
	}
	debug.SetMemoryLimit(memory - memory/8)
	return func() { debug.SetMemoryLimit(prev) }
}

// startCPUProfile writes a CPU profile to path until the returned function
// is called (the hidden --cpuprofile, for bench/RESULTS.md).
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }, nil
}

// minMemory is the smallest --memory: below it the run files would be
// tiny and many.
const minMemory = config.MinMemory

// parseMemory parses --memory with config.ParseSize (the config's memory
// has the same syntax), refusing as a usage error named after the flag.
func parseMemory(s string) (int64, error) {
	v, err := config.ParseSize(s)
	var se *config.SizeError
	if errors.As(err, &se) {
		return 0, &usageError{msg: fmt.Sprintf("--memory %q: %s", s, se.Why), hint: "--memory 256MiB (a size: bytes, or a number with KiB, MiB or GiB; at least 1MiB)"}
	}
	return v, err
}

// parseOffsets parses --from-offsets "0=120,2=7".
func parseOffsets(s string) (map[int32]int64, error) { return parseOffsetsFlag("--from-offsets", s) }

// parseOffsetsFlag parses "0=120,2=7" given to flag.
func parseOffsetsFlag(flag, s string) (map[int32]int64, error) {
	bad := func(part, why string) error {
		return &usageError{msg: fmt.Sprintf("%s %q: %q %s", flag, s, part, why), hint: flag + " 0=120,2=7 (PARTITION=OFFSET pairs, comma separated)"}
	}
	out := map[int32]int64{}
	if strings.TrimSpace(s) == "" {
		return nil, bad(s, "is empty")
	}
	for _, part := range strings.Split(s, ",") {
		ps, os, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, bad(part, "is not PARTITION=OFFSET")
		}
		p, err := strconv.ParseInt(strings.TrimSpace(ps), 10, 32)
		if err != nil || p < 0 {
			return nil, bad(part, "has no valid partition number")
		}
		off, err := strconv.ParseInt(strings.TrimSpace(os), 10, 64)
		if err != nil || off < 0 {
			return nil, bad(part, "has no valid offset (a non-negative integer)")
		}
		if _, dup := out[int32(p)]; dup {
			return nil, bad(part, "names a partition twice")
		}
		out[int32(p)] = off
	}
	return out, nil
}

// minMillisDigits is the fewest digits --from-timestamp accepts as epoch
// milliseconds: 12 digits begin in 1973; fewer, from a present-day clock,
// are seconds (10 digits until 2286), which read as milliseconds would
// start in January 1970 and replay everything.
const minMillisDigits = 12

// parseTimestamp accepts --from-timestamp as RFC 3339 or epoch
// milliseconds.
func parseTimestamp(s string) (time.Time, error) { return parseTimestampFlag("--from-timestamp", s) }

// parseTimestampFlag accepts RFC 3339 or epoch milliseconds given to flag.
func parseTimestampFlag(flag, s string) (time.Time, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms < 0 {
			return time.Time{}, usageErrorf("%s %q: negative epoch milliseconds", flag, s)
		}
		if len(strings.TrimLeft(s, "+0")) < minMillisDigits {
			return time.Time{}, &usageError{
				msg:  fmt.Sprintf("%s %s looks like seconds; %s takes milliseconds since the epoch or RFC 3339", flag, s, flag),
				hint: fmt.Sprintf("%s %d000 or %s %s", flag, ms, flag, time.Unix(ms, 0).UTC().Format(time.RFC3339)),
			}
		}
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, &usageError{msg: fmt.Sprintf("%s %q: not RFC 3339 or epoch milliseconds", flag, s), hint: flag + " 2026-11-29T10:00:00Z or " + flag + " 1795993200000"}
	}
	return t, nil
}

func (o *rebuildOptions) run(c *cli.Context) error {
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	table := o.spec.TableName()
	// The holder record says what holds the file; no secrets (-X) in it.
	holder := fmt.Sprintf("kmaterialize rebuild --db %s --table %s", o.dbPath, table)
	db, err := openWrite(c, o.dbPath, holder)
	if errors.Is(err, store.ErrCorrupt) && o.replaceCorrupt {
		aside, merr := store.MoveAside(o.dbPath, lockTimeout(c), time.Now())
		if merr != nil {
			return fmt.Errorf("%w; and moving it aside failed: %w", err, merr)
		}
		log.Warn().Str("db", o.dbPath).Str("moved_to", aside).Str("reason", err.Error()).
			Msg("the database is corrupt: moved it aside, building a fresh one")
		db, err = openWrite(c, o.dbPath, holder)
	}
	if err != nil {
		return err
	}
	defer db.Close()
	if v := db.Migrated(); v > 0 {
		log.Info().Str("db", o.dbPath).Uint64("from", v).Uint64("to", store.FormatVersion).Msg("migrated the database to this build's format")
	}
	if n := db.Cleaned(); n > 0 {
		log.Warn().Int("generations", n).Str("db", o.dbPath).Msg("removed unpublished generations left by an interrupted rebuild")
	}
	if n := db.CleanedFiles(); n > 0 {
		log.Warn().Int("files", n).Str("db", o.dbPath).Msg("removed run files left by an interrupted rebuild or compaction")
	}
	opts, err := o.spec.Options(db, o.brokers, o.props, log)
	if err != nil {
		return specUsage(err)
	}
	opts.Replay.Start = o.start
	opts.Decode.Registry = o.registry
	prog, err := newProgress(c, log)
	if err != nil {
		return err
	}
	defer prog.Finish()
	opts.Replay.Progress = prog.Update
	opts.Replay.ProgressInterval = prog.Tick()
	log.Info().Str(keyTopic, opts.Replay.Topic).Str(keyTable, table).Str("db", o.dbPath).Str("end", string(opts.Replay.End)).Msg("rebuild started")
	if processOf(c).limitGoMemory {
		defer limitGoMemory(o.spec.Memory)()
	}
	if p := c.String("cpuprofile"); p != "" {
		stopProfile, err := startCPUProfile(p)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	rep, err := materialize.Rebuild(c.Context, opts)
	endProgress(prog, err)
	if err != nil {
		return fmt.Errorf("rebuild of table %q from topic %q failed, nothing published: %w", table, opts.Replay.Topic, err)
	}
	return printPublished(stdoutOf(c), tableview.FromMeta(rep.Meta))
}

// printPublished prints the line of a rebuild that published m, read from
// the file or through the daemon.
func printPublished(w io.Writer, m api.Table) error {
	_, err := fmt.Fprintf(w, "published table %s: generation %d, %d keys, %d records read, %d skipped%s, in %s\n",
		m.Name, m.Generation, m.Keys, m.Records, m.Skipped, byReason(m.SkippedByReason), m.Duration.Round(time.Millisecond))
	return err
}

// rebuildDaemonHelp follows daemonHelp in rebuild's help.
const rebuildDaemonHelp = `

A routed rebuild sends only the table's name (--table, or the topic's) and
waits for the run: the daemon builds the table as its config says, so
--config, --db, --table, --socket, --lock-timeout, --progress and
--progress-interval are all it takes; any other flag is exit 2. A rebuild of the table already
running in the daemon is exit 7.`

// routeRebuild sends rebuild through the daemon when one holds the
// database. A routed rebuild needs neither --topic nor --brokers, so it is
// decided before the required-flag check (and after --config, which may
// name the database).
func routeRebuild(cmd *cli.Command) {
	cmd.Description += rebuildDaemonHelp
	action := cmd.Action
	cmd.Action = func(c *cli.Context) error {
		// The table's name, as the direct path takes it: --table, or the
		// topic's name (and then --topic is refused below, with a message
		// that says why, rather than a busy database).
		table := c.String("table")
		if table == "" {
			table = c.String("topic")
		}
		if table == "" || c.NArg() > 0 {
			return action(c)
		}
		if routed, err := viaDaemon(c, func(d *daemon) error { return rebuildVia(c, d, table) }); routed {
			return err
		}
		return action(c)
	}
}

// rebuildViaDaemonFlags are the rebuild flags a routed rebuild accepts:
// they say which table and which daemon, or how to show it, never how it is
// built (the daemon's config decides that).
var rebuildViaDaemonFlags = map[string]bool{
	"config": true, "db": true, "table": true, "socket": true, "lock-timeout": true, "progress-interval": true,
	"progress": true,
}

// rebuildVia asks the daemon to rebuild table as its config defines it and
// waits for the run: its exit code is the command's.
func rebuildVia(c *cli.Context, d *daemon, table string) error {
	if err := onlyTableFlags(c, table); err != nil {
		return err
	}
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	log.Info().Str(keyTable, table).Str("socket", d.cl.Addr()).Msg("the daemon holds the database: it runs the rebuild, as its config defines the table")
	res, err := d.cl.Rebuild(c.Context, table, true)
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("stopped waiting for the daemon's rebuild of table %q, which goes on: %w", table, err)
	}
	if err != nil {
		return d.fail(err, table)
	}
	if res.ExitCode != exitOK {
		return d.runFailed("", res.Run, table, res.ExitCode, res.Error)
	}
	return printPublishedVia(c, d, table, res.Generation)
}

// printPublishedVia prints the line of a routed run that published gen,
// from the table as the daemon shows it; when another run published since,
// what this one did.
func printPublishedVia(c *cli.Context, d *daemon, table string, gen uint64) error {
	t, err := d.cl.Table(c.Context, table)
	if err != nil || t.Generation != gen {
		_, err = fmt.Fprintf(stdoutOf(c), "published table %s: generation %d\n", table, gen)
		return err
	}
	return printPublished(stdoutOf(c), t)
}

// onlyTableFlags refuses, for a routed rebuild, every flag that would
// change what is built: the daemon builds the table as its config says.
// A --topic or --brokers that --config supplied (the same value as the
// file's) is not the user's.
func onlyTableFlags(c *cli.Context, table string) error {
	cfg, _ := c.App.Metadata[metaConfig].(*config.Config)
	spec, fromFile := configTable(c)
	refused := refusedFlags(c, rebuildViaDaemonFlags, func(name string) bool {
		return name == "brokers" && cfg != nil && c.String(name) == cfg.Kafka.Brokers ||
			name == "topic" && fromFile && c.String(name) == spec.Topic
	}, true)
	if len(refused) == 0 {
		return nil
	}
	return &usageError{
		msg: fmt.Sprintf("a daemon holds the database, so it runs the rebuild of table %q as its config defines the table; the request sends only the table name, and %s would change what is built",
			table, strings.Join(refused, ", ")),
		hint: fmt.Sprintf("kmaterialize rebuild %s --table %s (the daemon's config decides); to build with other options, change the daemon's config and reload it, or stop the daemon", where(c), table),
	}
}

// where is how the command named the daemon: --socket, or --db.
func where(c *cli.Context) string {
	if s := c.String("socket"); s != "" {
		return "--socket " + s
	}
	return "--db " + c.String("db")
}
