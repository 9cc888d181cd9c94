package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/store"
)

// This file finds the daemon a command goes through and maps its answers
// to exit codes. get, scan, tables, export, drop, diff, rollback, update
// and rebuild go through the daemon when it holds the database (its holder
// record names its socket) or when --socket names one; each routed variant
// sits beside its command (tablesVia in tables.go, ...) and prints with the
// direct path's formatter, from the same generation, with the same exit
// codes.

// socketEnv names the daemon's socket when --socket is not given.
const socketEnv = "KMATERIALIZE_SOCKET"

// probeTimeout bounds the health check of a daemon found through the
// holder record.
const probeTimeout = 5 * time.Second

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

// withDaemon adds the daemon's help to a command that takes --socket, and
// routes rebuild (routeRebuild).
func withDaemon(cmd *cli.Command) {
	if cmd.Action == nil || !hasFlag(cmd, "socket") {
		return
	}
	cmd.Description += "\n" + daemonHelp
	if cmd.Name == "rebuild" {
		routeRebuild(cmd)
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
	case client.CodeKeyNotHere:
		// The key is not in this daemon's shard: not found here, and
		// where it is, the message says (its partition).
		e.code, e.hint = exitNotFound, "ask a daemon that holds the key's partition, or read through them all: kmaterialize get --cluster FILE (docs/shards.md)"
	case client.CodeRepartitioned:
		e.code, e.hint = exitConflict, "the topic's partition count changed under the shard: drop the table and rebuild it (docs/shards.md)"
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
	case client.CodePositionsNotReached:
		// As an incomplete replay: the table did not reach the positions
		// in time.
		e.code = exitIncomplete
		e.hint = "ask again, or with a longer --wait (at most 30s); kmaterialize tables shows how far the follower has applied"
	case client.CodeBadPositions, client.CodeBadWait:
		e.code = exitUsage
	case client.CodeTooManyWaiters:
		e.code, e.hint = exitBusy, "too many reads wait at the daemon: ask again"
	case client.CodeTooManyWatchers:
		e.code, e.hint = exitBusy, "max_watchers change feeds are open at the daemon: watch again later"
	case client.CodeGenerationNotFound:
		e.code, e.hint = exitNotFound, "kmaterialize tables lists the kept generations; give the table a keep in the daemon's config to keep earlier ones"
	}
	return e
}

// runFailed is the error of a routed run (what: "" for a rebuild, "
// (update)") that ended with exitCode and msg: the command's exit code is
// the run's.
func (d *daemon) runFailed(what string, run uint64, table string, exitCode int, msg string) error {
	return &daemonError{code: exitCode, err: errors.New(msg),
		msg:  d.answered(fmt.Sprintf("run %d%s of table %q failed, nothing published: %s", run, what, table, msg)),
		hint: fmt.Sprintf("GET /v1/tables/%s shows the last error; the daemon's log has the run's details", table)}
}

// refusedFlags names the flags set on c that a routed command does not
// send (not in accepted), but for those --config supplied (fromConfig: the
// same value as the file's, not the user's). withEnv adds each one's
// environment variables, "--brokers (or KMATERIALIZE_BROKERS)", as a routed
// rebuild says them.
func refusedFlags(c *cli.Context, accepted map[string]bool, fromConfig func(name string) bool, withEnv bool) []string {
	var refused []string
	for _, f := range c.Command.Flags {
		name := f.Names()[0]
		if accepted[name] || !c.IsSet(name) || fromConfig(name) {
			continue
		}
		flag := "--" + name
		if len(name) == 1 {
			flag = "-" + name
		}
		if ev, ok := f.(interface{ GetEnvVars() []string }); withEnv && ok && len(ev.GetEnvVars()) > 0 {
			flag += " (or " + strings.Join(ev.GetEnvVars(), ", ") + ")"
		}
		refused = append(refused, flag)
	}
	return refused
}
