package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/store"
)

func dropCommand() *cli.Command {
	return &cli.Command{
		Name:      "drop",
		Usage:     "remove a table from the database",
		UsageText: "kmaterialize drop --db FILE --table NAME [--format text|json]",
		Description: `Removes the table, its published generation, the generations kept for
rollback (--keep) and its checkpoint in one transaction: a crash leaves the table whole or gone, never half of it. Exits 6
when the table is absent. The file keeps its size (bbolt reuses the pages):
kmaterialize compact returns them.

A table in the daemon's config cannot be dropped through the daemon (exit 2):
it would build it again. Remove it from the config and reload the daemon
(kill -HUP), then drop it.

Examples:
  $ kmaterialize drop --db balances.db --table old-balances
  $ kmaterialize drop --db balances.db --table old-balances --format json`,
		Flags: []cli.Flag{
			configFlag(), dbFlag(true), lockTimeoutFlag(), socketFlag(),
			&cli.StringFlag{Name: "table", Usage: "table `NAME`", Required: true},
			formatsFlag(formatText, formatText, formatJSON),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("unexpected argument %q", c.Args().First())
			}
			format, err := formatOf(c, formatText, formatJSON)
			if err != nil {
				return err
			}
			table := c.String("table")
			var dropped api.Dropped
			if routed, err := viaDaemon(c, func(d *daemon) error {
				var err error
				dropped, err = d.cl.Drop(c.Context, table)
				return d.fail(err, table)
			}); routed {
				if err != nil {
					return err
				}
			} else {
				path := c.String("db")
				// A read-write open would create a missing file.
				if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("drop table %q: %w", table, &store.NoDatabaseError{Path: path})
				} else if err != nil {
					return fmt.Errorf("drop table %q: %w", table, err)
				}
				db, err := openWrite(c, path, "kmaterialize drop --db "+path+" --table "+table)
				if err != nil {
					return err
				}
				m, err := materialize.Drop(db, table)
				if cerr := db.Close(); err == nil && cerr != nil {
					err = fmt.Errorf("close %s: %w", path, cerr)
				}
				if err != nil {
					return err
				}
				dropped = api.Dropped{Generation: m.Generation, Keys: m.Keys}
			}
			dropped.Table = table
			return printDropped(c, format, dropped)
		},
	}
}

// printDropped prints what a drop removed, read from the file or through
// the daemon.
func printDropped(c *cli.Context, format string, d api.Dropped) error {
	if format == formatJSON {
		return json.NewEncoder(stdoutOf(c)).Encode(d)
	}
	_, err := fmt.Fprintf(stdoutOf(c), "dropped table %s: generation %d, %d keys\n", d.Table, d.Generation, d.Keys)
	return err
}
