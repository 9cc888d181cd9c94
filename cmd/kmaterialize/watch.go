package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/exportdoc"
)

func watchCommand() *cli.Command {
	return &cli.Command{
		Name:      "watch",
		Usage:     "print a table's changes as the daemon applies them",
		UsageText: "kmaterialize watch --db FILE --table TABLE (--from CURSOR | --from-now) [--format jsonl|tsv] [--base64]",
		Description: `Prints the change feed of a table (GET /v1/tables/TABLE/changes) through
the daemon that holds --db (or --socket), until interrupted:

  {"key":"acct-7","value":"12"}       a key's new value
  {"key":"acct-9","value":null}       a key deleted
  {"commit":{"positions":{"0":1201},"generation":4,"cursor":"AQ..."}}
  {"heartbeat":{"positions":{"0":1201},"generation":4,"cursor":"AQ..."}}

A commit line follows the changes of one atomic commit of the table (a
follower's apply, an update, a publish, a rollback): a copy that applied
every change so far holds the table at its positions. --from takes the
Kmaterialize-Cursor of a read (scan through the daemon, GET .../rows) or a
commit line's cursor, and prints what changed after it; --from-now starts
at the table's current state. --format tsv prints "put KEY VALUE",
"delete KEY", "commit POSITIONS GENERATION CURSOR" and "heartbeat
POSITIONS GENERATION CURSOR" lines. Keys and values are UTF-8 text as in
scan, or base64 with --base64.

Exit codes: 0 when interrupted; 4 when the cursor is gone (410: list the
table again and watch from its cursor), or the daemon cut the watcher off
(too slow) or shut down: resume with --from the last commit's cursor; 6 for
an unknown table; 2 when no daemon holds --db.

Examples:
  $ kmaterialize watch --db balances.db --table balances --from-now
  $ kmaterialize watch --db balances.db --table balances --from AQH3loS7zcKQrXsCAB4BHg --format tsv`,
		Flags: []cli.Flag{
			dbFlag(true), socketFlag(),
			&cli.StringFlag{Name: "table", Usage: "table `NAME`", Required: true},
			&cli.StringFlag{Name: "from", Usage: "print the changes after `CURSOR` (a read's Kmaterialize-Cursor or a commit line's cursor)"},
			&cli.BoolFlag{Name: "from-now", Usage: "print the changes from the table's current state"},
			formatsFlag(formatJSONL, formatJSONL, formatTSV),
			&cli.BoolFlag{Name: "base64", Usage: "print keys and values base64-encoded"},
		},
		Action: func(c *cli.Context) error {
			o, err := watchOptionsOf(c)
			if err != nil {
				return err
			}
			routed, err := viaDaemon(c, func(d *daemon) error { return o.run(c.Context, d, stdoutOf(c)) })
			if !routed {
				return &usageError{msg: "watch needs a daemon: no daemon holds --db, and the file alone has no change feed",
					hint: "run it where the daemon (kmaterialize serve) holds --db, or give its --socket"}
			}
			return err
		},
	}
}

// watchOptions are watch's flags, validated.
type watchOptions struct {
	table, from, format string
	b64                 bool
}

func watchOptionsOf(c *cli.Context) (watchOptions, error) {
	o := watchOptions{table: c.String("table"), from: c.String("from"), b64: c.Bool("base64")}
	if c.NArg() > 0 {
		return o, usageErrorf("unexpected argument %q", c.Args().First())
	}
	switch {
	case c.IsSet("from") && c.Bool("from-now"):
		return o, &usageError{msg: "--from and --from-now: give one", hint: "--from CURSOR resumes, --from-now starts at the table's current state"}
	case c.Bool("from-now"):
		o.from = client.FromNow
	case o.from == "":
		return o, &usageError{msg: "watch needs --from CURSOR or --from-now", hint: "kmaterialize watch --db FILE --table TABLE --from-now"}
	case o.from != client.FromNow:
		if _, err := api.ParseCursor(o.from); err != nil {
			return o, &usageError{msg: fmt.Sprintf("--from: %v", err), hint: "give the Kmaterialize-Cursor of a read, or a commit line's cursor, as it was printed"}
		}
	}
	f, err := formatOf(c, formatJSONL, formatTSV)
	o.format = f
	return o, err
}

// run prints the feed until ctx ends (nil: interrupted is watch's end).
func (o watchOptions) run(ctx context.Context, d *daemon, out io.Writer) error {
	w := bufio.NewWriter(out)
	err := d.cl.Watch(ctx, o.table, o.from, func(ev client.Event) error {
		line, err := o.line(ev)
		if err != nil {
			return err
		}
		w.Write(line)
		if ev.Change == nil {
			return w.Flush() // a commit or heartbeat ends a batch: show it now
		}
		return nil
	})
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	var fe *client.FeedError
	switch {
	case errors.Is(err, context.Canceled):
		return nil
	case errors.As(err, &fe):
		return &daemonError{msg: d.answered(fe.Message), err: err, code: exitIncomplete,
			hint: "watch again with --from the last commit line's cursor"}
	case errors.Is(err, client.ErrCursorGone):
		return &daemonError{msg: d.answered(err.Error()), err: err, code: exitIncomplete,
			hint: "list the table again (kmaterialize scan through the daemon, or GET /v1/tables/" + o.table + "/rows) and watch from its cursor, or watch --from-now"}
	}
	return d.fail(err, o.table)
}

// line formats one event.
func (o watchOptions) line(ev client.Event) ([]byte, error) {
	text := func(k, b []byte, what string) (string, error) {
		s, err := exportdoc.Text(k, b, what, o.b64)
		if err != nil {
			return "", &usageError{msg: err.Error(), hint: "add --base64"}
		}
		if o.format == formatTSV && !o.b64 && bytes.ContainsAny(b, "\t\n") {
			return "", &usageError{msg: fmt.Sprintf("the %s of key %q contains a tab or newline, which tsv cannot show", what, k), hint: "--format jsonl, or --base64"}
		}
		return s, nil
	}
	var st *api.FeedState
	kind := "commit"
	switch {
	case ev.Change != nil:
		k, err := text(ev.Change.Key, ev.Change.Key, "key")
		if err != nil {
			return nil, err
		}
		fc := api.FeedChange{Key: k}
		if !ev.Change.Deleted {
			v, err := text(ev.Change.Key, ev.Change.Value, "value")
			if err != nil {
				return nil, err
			}
			fc.Value = &v
		}
		if o.format == formatTSV {
			if fc.Value == nil {
				return []byte("delete\t" + k + "\n"), nil
			}
			return []byte("put\t" + k + "\t" + *fc.Value + "\n"), nil
		}
		b, err := json.Marshal(fc)
		return append(b, '\n'), err
	case ev.Commit != nil:
		st = &api.FeedState{Positions: ev.Commit.Positions, Generation: ev.Commit.Generation, Cursor: ev.Commit.Cursor}
	case ev.Heartbeat != nil:
		kind = "heartbeat"
		st = &api.FeedState{Positions: ev.Heartbeat.Positions, Cursor: ev.Heartbeat.Cursor}
		if c, err := api.ParseCursor(ev.Heartbeat.Cursor); err == nil {
			st.Generation = c.Generation
		}
	default:
		return nil, nil
	}
	if st.Positions == nil {
		st.Positions = api.Positions{}
	}
	if o.format == formatTSV {
		return []byte(kind + "\t" + st.Positions.String() + "\t" + strconv.FormatUint(st.Generation, 10) + "\t" + st.Cursor + "\n"), nil
	}
	l := api.FeedLine{Commit: st}
	if kind == "heartbeat" {
		l = api.FeedLine{Heartbeat: st}
	}
	b, err := json.Marshal(l)
	return append(b, '\n'), err
}
