package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func rollbackCommand() *cli.Command {
	return &cli.Command{
		Name:      "rollback",
		Usage:     "publish a kept generation of a table again, with its checkpoint",
		UsageText: "kmaterialize rollback --db FILE --table NAME [--generation G]",
		Description: `Makes a generation kept with rebuild --keep N (or the daemon's keep) the
table's published generation again, in one transaction with the checkpoint
and provenance it was published with: readers see the table before or after,
never between. The generation published until then is kept in its place, so
a rollback can itself be rolled back. Without --generation, the newest kept
generation. kmaterialize tables lists the kept generations.

A generation that is not kept for the table exits 6. When a daemon holds the
database, it does the rollback.

Examples:
  $ kmaterialize tables --db balances.db
  $ kmaterialize rollback --db balances.db --table account-balances
  $ kmaterialize rollback --db balances.db --table account-balances --generation 12`,
		Flags: []cli.Flag{
			configFlag(), dbFlag(true), lockTimeoutFlag(), socketFlag(),
			&cli.StringFlag{Name: "table", Usage: "table `NAME`", Required: true},
			&cli.Uint64Flag{Name: "generation", Usage: "the kept generation `G` to publish", DefaultText: "the newest kept"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("unexpected argument %q", c.Args().First())
			}
			table, gen := c.String("table"), c.Uint64("generation")
			if c.IsSet("generation") && gen == 0 {
				return &usageError{msg: "--generation 0: not a generation", hint: "kmaterialize tables --db FILE lists the kept generations"}
			}
			if routed, err := viaDaemon(c, func(d *daemon) error {
				res, err := d.cl.Rollback(c.Context, table, gen)
				if err != nil {
					return d.fail(err, table)
				}
				return printRollback(c, table, res.From, res.Generation, res.Keys)
			}); routed {
				return err
			}
			path := c.String("db")
			db, err := openWrite(c, path, fmt.Sprintf("kmaterialize rollback --db %s --table %s", path, table))
			if err != nil {
				return err
			}
			defer db.Close()
			res, err := db.Rollback(table, gen)
			if err != nil {
				return err
			}
			return printRollback(c, table, res.From.Generation, res.To.Generation, res.To.Keys)
		},
	}
}

func printRollback(c *cli.Context, table string, from, to uint64, keys int64) error {
	_, err := fmt.Fprintf(stdoutOf(c), "rolled back table %s: generation %d published (%d keys); generation %d kept\n", table, to, keys, from)
	return err
}
