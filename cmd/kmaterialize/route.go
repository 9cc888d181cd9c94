package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/config"
	"github.com/kmaterialize/kmaterialize/exportdoc"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// This file is the CLI's routed path: get, scan, tables, export, drop and rebuild
// go through the daemon when it holds the database (its holder record names
// its socket) or when --socket names one, and print what the direct path
// prints from the same generation, with the same exit codes.

// socketEnv names the daemon's socket when --socket is not given.
const socketEnv = "KMATERIALIZE_SOCKET"

// probeTimeout bounds the health check of a daemon found through the
// holder record.
const probeTimeout = 5 * time.Second

// scanAttempts is how many times a routed scan starts over when a publish
// replaces its generation between two pages.
const scanAttempts = 3

// socketFlag is --socket on the commands that can go through the daemon.
func socketFlag() cli.Flag {
	return &cli.StringFlag{Name: "socket", EnvVars: []string{socketEnv},
		Usage: "ask the daemon listening on unix socket `PATH` (default: the daemon that holds --db, if one does)"}
}

// daemonHelp is the paragraph on the daemon in the help of the commands
// that take --socket.
const daemonHelp = `
When a daemon (kmaterialize serve) holds the database, the command goes
through it: the database's holder record (FILE.holder) names its socket.
--socket PATH (or KMATERIALIZE_SOCKET) names the daemon to ask. The output
and exit code are those of the same command reading the file.`

// rebuildDaemonHelp follows daemonHelp in rebuild's help.
const rebuildDaemonHelp = `

A routed rebuild sends only the table's name (--table, or the topic's) and
waits for the run: the daemon builds the table as its config says, so
--config, --db, --table, --socket, --lock-timeout, --progress and
--progress-interval are all it takes; any other flag is exit 2. A rebuild of the table already
running in the daemon is exit 7.`

// rebuildViaDaemonFlags are the rebuild flags a routed rebuild accepts:
// they say which table and which daemon, or how to show it, never how it is
// built (the daemon's config decides that).
var rebuildViaDaemonFlags = map[string]bool{
	"config": true, "db": true, "table": true, "socket": true, "lock-timeout": true, "progress-interval": true,
	"progress": true,
}

// withDaemon adds the daemon's help to a command that takes --socket and
// routes rebuild. A routed rebuild needs neither --topic nor --brokers, so
// it is decided before the required-flag check (and after --config, which
// may name the database).
func withDaemon(cmd *cli.Command) {
	if cmd.Action == nil || !hasFlag(cmd, "socket") {
		return
	}
	cmd.Description += "\n" + daemonHelp
	if cmd.Name != "rebuild" {
		return
	}
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

// daemon is the daemon a routed command asks.
type daemon struct {
	cl *client.Client
}

// viaDaemon runs fn with the daemon that answers for the command, and
// reports whether there was one: --socket, or the daemon the holder record
// of --db names when it answers. A holder record whose socket does not
// answer (a pid reused after a crash, a daemon starting or stopping) leaves
// the command to the file, which reports it busy if it is.
func viaDaemon(c *cli.Context, fn func(*daemon) error) (bool, error) {
	var cl *client.Client
	if s := c.String("socket"); s != "" {
		cl = client.Dial(s)
		if path := c.String("db"); path != "" {
			if err := daemonHolds(c.Context, path, s, cl); err != nil {
				cl.Close()
				return true, err
			}
		}
	} else if path := c.String("db"); path != "" {
		h := store.ReadHolder(path)
		if h == nil || h.Socket == "" {
			return false, nil
		}
		cl = client.Dial(h.Socket)
		ctx, cancel := context.WithTimeout(c.Context, probeTimeout)
		err := cl.Healthz(ctx)
		cancel()
		if err != nil {
			cl.Close()
			return false, nil
		}
	} else {
		return false, nil
	}
	defer cl.Close()
	return true, fn(&daemon{cl: cl})
}

// daemonHolds refuses a --socket (often from KMATERIALIZE_SOCKET, set long
// ago) whose daemon is not the one holding --db: its answers would come from
// another database. The database's live holder record must name that
// socket; a file with no live holder while a daemon answers on the socket is
// refused too. A --db that is not on this host (no file) is left to the
// daemon: the socket is then the only name of the database there is.
func daemonHolds(ctx context.Context, path, socket string, cl *client.Client) error {
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	h := store.ReadHolder(path)
	if h != nil {
		if h.Socket != "" && sameFile(h.Socket, socket) {
			return nil
		}
		return &usageError{msg: fmt.Sprintf("--socket %s: that daemon does not hold %s, which is held by %s", socket, path, h),
			hint: "drop --socket (and KMATERIALIZE_SOCKET): the command finds the daemon that holds --db on its own"}
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if cl.Healthz(pctx) != nil {
		return nil // nobody answers there: the request itself says so
	}
	return &usageError{msg: fmt.Sprintf("--socket %s: that daemon does not hold %s (no daemon holds it)", socket, path),
		hint: "drop --socket (and KMATERIALIZE_SOCKET) to read the file itself, or give the --db the daemon serves"}
}

// sameFile reports whether paths a and b name the same file.
func sameFile(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return a == b
	}
	sb, err := os.Stat(b)
	if err != nil {
		return false
	}
	return os.SameFile(sa, sb)
}

// daemonError is an answer of the daemon that fails a routed command. Its
// exit code is the one the direct path gives for the same outcome, decided
// here from the API's error code; exitCode takes it as is.
type daemonError struct {
	msg  string // says that the daemon answered, and what
	err  error
	code int
	hint string
}

func (e *daemonError) Error() string { return e.msg }

func (e *daemonError) Unwrap() error { return e.err }

// answered is msg as the daemon's answer.
func (d *daemon) answered(msg string) string {
	return fmt.Sprintf("the daemon at %s answered: %s", d.cl.Addr(), msg)
}

// fail turns an error of the client into the command's error.
func (d *daemon) fail(err error, table string) error {
	var ce *client.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, client.ErrUnreachable):
		why := error(err)
		var se *os.SyscallError
		if errors.As(err, &se) {
			why = se // "connect: connection refused", "connect: no such file or directory"
		}
		return &daemonError{msg: fmt.Sprintf("no daemon answers at %s (%v)", d.cl.Addr(), why), err: err, code: exitError,
			hint: "start it (kmaterialize serve --config FILE); without --socket (and KMATERIALIZE_SOCKET) the command finds the daemon holding --db, or reads the file"}
	case errors.Is(err, context.Canceled), !errors.As(err, &ce):
		return err
	}
	e := &daemonError{msg: d.answered(ce.Message), err: err, code: exitError}
	switch ce.Code {
	case client.CodeKeyNotFound, client.CodeBadKey:
		// The file has no row for a key the API refuses (empty or over
		// bbolt's limit): exit 6 as on the direct path.
		e.code = exitNotFound
	case client.CodeTableNotFound:
		e.code, e.hint = exitNotFound, "kmaterialize tables --db PATH"
	case client.CodeTableNotReady:
		e.code = exitNotFound
		e.hint = fmt.Sprintf("the daemon is building it: try again later (kmaterialize tables, or GET /v1/tables/%s, shows its state)", table)
	case client.CodeTableNotConfigured:
		e.code = exitUsage
		e.hint = "add the table to the daemon's config and reload it (kill -HUP the daemon), or stop the daemon to rebuild with flags"
	case client.CodeTableConfigured:
		e.code = exitUsage
		e.hint = "remove the table from the daemon's config and reload it (kill -HUP the daemon), then drop it"
	case client.CodeTableFollowed:
		// Not a conflict of data (3) nor a busy database (7, which
		// waiting mends): the request does not apply to a followed
		// table, as a table_configured drop does not.
		e.code = exitUsage
		e.hint = "read it as the follower keeps it (kmaterialize tables shows how far it has applied), or set follow: false for it in the daemon's config and reload the daemon (kill -HUP) to update it on demand"
	case client.CodeRunInProgress:
		e.code = exitBusy
		e.hint = fmt.Sprintf("wait for run %d to end (GET /v1/tables/%s shows it), then ask again", ce.Run, table)
	case client.CodeShuttingDown:
		e.code, e.hint = exitBusy, "the daemon is stopping: run the command again"
	case client.CodeNotUTF8:
		e.code, e.hint = exitUsage, "add --base64"
	case client.CodeDefinitionChanged:
		e.code = exitUsage
		e.hint = fmt.Sprintf("the daemon rebuilds the table by its config's new definition (GET /v1/tables/%s shows the run and the fields); once it has published, updates go by the new one", table)
	case client.CodeGenerationNotFound:
		e.code, e.hint = exitNotFound, "kmaterialize tables lists the kept generations; give the table a keep in the daemon's config to keep earlier ones"
	}
	return e
}

// scanVia is scan through the daemon: pages pinned to one generation,
// formatted by the direct path's formatter from the raw bytes (asked in
// base64), held until the last row so that a failure prints nothing. A
// publish between two pages starts the scan over.
func scanVia(c *cli.Context, d *daemon, table string, rng store.Range, limit int) error {
	for attempt := 1; ; attempt++ {
		f, err := scanFormatter(c)
		if err != nil {
			return err
		}
		var sp spool
		bw := bufio.NewWriterSize(&sp, 64<<10)
		f.begin(bw)
		_, err = d.cl.Rows(c.Context, table, client.RowsOptions{Prefix: rng.Prefix, From: rng.From, To: rng.To,
			KeysOnly: f.keysOnly, Limit: limit, Base64: true},
			func(r client.Row) error { return f.row(bw, r.Key, r.Value) })
		if err == nil {
			f.end(bw)
			err = bw.Flush()
		}
		if err == nil {
			_, err = sp.WriteTo(stdoutOf(c))
			sp.Close()
			return err
		}
		sp.Close()
		switch {
		case client.IsCode(err, client.CodeGenerationGone) && attempt < scanAttempts:
			continue
		case isUsage(err):
			return fmt.Errorf("scan table %q: %w", table, err)
		}
		return d.fail(err, table)
	}
}

// exportVia is export through the daemon: to --out atomically, or to
// stdout once the whole document arrived.
func exportVia(c *cli.Context, d *daemon, table, out string, b64 bool) error {
	write := func(w io.Writer) error {
		_, err := d.cl.Export(c.Context, table, client.ExportOptions{Base64: b64}, w)
		return d.fail(err, table)
	}
	if out != "" {
		return exportdoc.WriteFileWith(out, write)
	}
	var sp spool
	defer sp.Close()
	if err := write(&sp); err != nil {
		return err
	}
	_, err := sp.WriteTo(stdoutOf(c))
	return err
}

// tablesVia is tables through the daemon: the published tables (a
// configured table never published is not in the file), from their stored
// metadata as the API shows it.
func tablesVia(c *cli.Context, d *daemon, format string) error {
	ts, err := d.cl.Tables(c.Context)
	if err != nil {
		return d.fail(err, "")
	}
	infos := make([]tableInfo, 0, len(ts))
	for _, t := range ts {
		if t.Generation == 0 {
			continue
		}
		info := tableInfo{TableMeta: metaOf(t), EndMark: t.EndMark, UpdatesSinceRebuild: t.UpdatesSinceRebuild, CheckpointCapturedAt: t.CheckpointCapturedAt}
		ps := make([]int32, len(t.Partitions))
		for i, p := range t.Partitions {
			ps[i] = p.Partition
			info.Partitions = append(info.Partitions, checkpoint.Partition{Partition: p.Partition, Low: p.Low, Start: p.Start, High: p.High, End: p.End})
		}
		info.PartitionSet = replay.PartitionSet(ps)
		info.Until, info.Changes = storeBound(t.Until), storeChanges(t.Changes)
		for _, k := range t.Kept {
			info.Kept = append(info.Kept, keptInfo(t.Name, k))
		}
		infos = append(infos, info)
	}
	return renderTables(c, format, c.String("db"), infos)
}

// metaOf is the stored metadata of a published table as the API shows it.
func metaOf(t client.Table) store.TableMeta {
	return store.TableMeta{Name: t.Name, Topic: t.Topic, Fold: t.Fold, Params: t.Params,
		Generation: t.Generation, Keys: t.Keys, BuiltAt: t.BuiltAt, Duration: t.Duration,
		Records: t.Records, Skipped: t.Skipped, SkippedByReason: t.SkippedByReason, Empty: t.Empty, Extra: t.Extra,
		Until: storeBound(t.Until), Changes: storeChanges(t.Changes)}
}

// keptInfo is a kept generation of table as the API shows it, as `tables`
// shows it.
func keptInfo(table string, k client.KeptGeneration) tableInfo {
	m := store.TableMeta{Name: table, Topic: k.Topic, Fold: k.Fold, Params: k.Params,
		Generation: k.Generation, Keys: k.Keys, BuiltAt: k.BuiltAt, Duration: k.Duration,
		Records: k.Records, Skipped: k.Skipped, SkippedByReason: k.SkippedByReason, Empty: k.Empty, Extra: k.Extra,
		Until: storeBound(k.Until), Changes: storeChanges(k.Changes)}
	cp := checkpoint.Checkpoint{EndMark: k.EndMark, Updates: k.UpdatesSinceRebuild, CapturedAt: k.CheckpointCapturedAt}
	for _, p := range k.Partitions {
		cp.Partitions = append(cp.Partitions, checkpoint.Partition{Partition: p.Partition, Low: p.Low, Start: p.Start, High: p.High, End: p.End})
	}
	return newTableInfo(m, cp)
}

func storeBound(b *client.Bound) *store.Bound {
	if b == nil {
		return nil
	}
	return &store.Bound{Timestamp: b.Timestamp, Offsets: b.Offsets}
}

func storeChanges(c *client.Changes) *store.Changes {
	if c == nil {
		return nil
	}
	return &store.Changes{From: c.From, FromKeys: c.FromKeys, Added: c.Added, Removed: c.Removed, Changed: c.Changed}
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
		return &daemonError{code: res.ExitCode, err: errors.New(res.Error),
			msg:  d.answered(fmt.Sprintf("run %d of table %q failed, nothing published: %s", res.Run, table, res.Error)),
			hint: fmt.Sprintf("GET /v1/tables/%s shows the last error; the daemon's log has the run's details", table)}
	}
	t, err := d.cl.Table(c.Context, table)
	if err != nil || t.Generation != res.Generation {
		// Another run published since: say what this one did.
		_, err = fmt.Fprintf(stdoutOf(c), "published table %s: generation %d\n", table, res.Generation)
		return err
	}
	return printPublished(stdoutOf(c), metaOf(t))
}

// onlyTableFlags refuses, for a routed rebuild, every flag that would
// change what is built: the daemon builds the table as its config says.
// A --topic or --brokers that --config supplied (the same value as the
// file's) is not the user's.
func onlyTableFlags(c *cli.Context, table string) error {
	cfg, _ := c.App.Metadata[metaConfig].(*config.Config)
	spec, fromFile := configTable(c)
	var refused []string
	for _, f := range c.Command.Flags {
		name := f.Names()[0]
		if rebuildViaDaemonFlags[name] || !c.IsSet(name) {
			continue
		}
		if name == "brokers" && cfg != nil && c.String(name) == cfg.Kafka.Brokers ||
			name == "topic" && fromFile && c.String(name) == spec.Topic {
			continue
		}
		flag := "--" + name
		if len(name) == 1 {
			flag = "-" + name
		}
		if ev, ok := f.(interface{ GetEnvVars() []string }); ok && len(ev.GetEnvVars()) > 0 {
			flag += " (or " + strings.Join(ev.GetEnvVars(), ", ") + ")"
		}
		refused = append(refused, flag)
	}
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
