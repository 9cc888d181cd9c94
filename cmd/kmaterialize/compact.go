package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/store"
)

func compactCommand() *cli.Command {
	return &cli.Command{
		Name:      "compact",
		Usage:     "rewrite the database file without its free pages (offline)",
		UsageText: "kmaterialize compact --db FILE [--lock-timeout D]",
		Description: `Rewrites FILE with every table, checkpoint and piece of metadata, in full
pages and without free space, into a new file in the same directory
(FILE.compact-*), fsyncs it and renames it over FILE atomically. On any
failure, or a crash, FILE stays as it was (the next read-write command removes
a leftover FILE.compact-*). The directory needs room for the new file.

A rebuild reuses the pages its previous generation freed, so a file settles
at about twice its data; compact returns it to its data's size, for a
backup or after a table was dropped. It holds the database exclusively while
it runs: it exits 7 when a rebuild or a daemon holds it.

Examples:
  $ kmaterialize compact --db balances.db`,
		Flags: []cli.Flag{dbFlag(true), lockTimeoutFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("unexpected argument %q", c.Args().First())
			}
			path := c.String("db")
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
