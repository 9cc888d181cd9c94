package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/store"
)

func compactCommand() *cli.Command {
	return &cli.Command{
		Name:      "compact",
		Usage:     "rewrite the database file without its free pages",
		UsageText: "kmaterialize compact --db FILE [--lock-timeout D] [--socket PATH]",
		Description: `Rewrites FILE with every table, checkpoint and piece of metadata, in full
pages and without free space, into a new file in the same directory
(FILE.compact-*), fsyncs it and renames it over FILE atomically. On any
failure, or a crash, FILE stays as it was (the next read-write command removes
a leftover FILE.compact-*). The directory needs room for the new file.

A rebuild reuses the pages its previous generation freed, so a file settles
at about twice its data; compact returns it to its data's size, for a
backup or after a table was dropped. Without a daemon it holds the
database exclusively while it runs: it exits 7 when a rebuild holds it.

When the daemon holds the file, it compacts it (POST /v1/compact): runs,
followers and updates wait while the compacted copy is built beside the
file (tables show state compacting, and /readyz ignores followers' lag),
reads go on and never wait, and the command returns once the compacted
file is in place, printing how long writers waited. Exit 7 when a backup
or another compaction runs in the daemon.

Examples:
  $ kmaterialize compact --db balances.db`,
		Flags: []cli.Flag{dbFlag(true), lockTimeoutFlag(), socketFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("unexpected argument %q", c.Args().First())
			}
			path := c.String("db")
			if routed, err := viaDaemon(c, func(d *daemon) error {
				res, err := d.cl.Compact(c.Context)
				if err := compactFail(d, err); err != nil {
					return err
				}
				fmt.Fprintf(stdoutOf(c), "compacted %s through the daemon at %s: %d -> %d bytes; writers waited %d ms, reads never\n",
					path, d.cl.Addr(), res.Before, res.After, res.PausedMS)
				return nil
			}); routed {
				return err
			}
			res, err := store.Compact(path, &store.Options{LockTimeout: lockTimeout(c),
				Command: "kmaterialize compact --db " + path, PageCheck: pageCheck})
			if err != nil {
				return err
			}
			fmt.Fprintf(stdoutOf(c), "compacted %s: %d -> %d bytes\n", path, res.Before, res.After)
			return nil
		},
	}
}

// compactFail maps the daemon's refusals of a compaction to exit codes.
func compactFail(d *daemon, err error) error {
	var ce *client.Error
	if errors.As(err, &ce) && (ce.Code == client.CodeBackupRunning || ce.Code == client.CodeCompactRunning) {
		return &daemonError{msg: d.answered(ce.Message), err: err, code: exitBusy, hint: "try again once it is over"}
	}
	return d.fail(err, "")
}
