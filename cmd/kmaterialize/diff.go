package main

import (
	"bufio"
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/exportdoc"
	"github.com/kmaterialize/kmaterialize/store"
)

func diffCommand() *cli.Command {
	return &cli.Command{
		Name:      "diff",
		Usage:     "print the keys two generations of a table differ in",
		UsageText: "kmaterialize diff --db FILE --table NAME [--from G] [--to G] [--limit N] [--base64]",
		Description: `Prints, one JSON line per key in ascending key order, each key that differs
between two generations of a table:

  {"key":"acct-7","op":"changed","old":"10","new":"12"}
  {"key":"acct-8","op":"added","old":null,"new":"5"}
  {"key":"acct-9","op":"removed","old":"3","new":null}

--to defaults to the published generation, --from to the generation it
replaced, which must still be kept (rebuild --keep N, or the daemon's keep);
either may be the published generation or a kept one (kmaterialize tables
lists them), and --from may be the newer of the two. Keys and values are
printed as in scan --format jsonl and export: UTF-8 text as it is, or with
--base64 every key and value in standard base64; a key or value that is not
UTF-8 without --base64 exits 2 before anything is printed. A generation that
is not kept exits 6.

Examples:
  $ kmaterialize diff --db balances.db --table account-balances
  $ kmaterialize diff --db balances.db --table account-balances --from 12 --to 14 --limit 100
  $ kmaterialize diff --db balances.db --table account-balances | jq -r 'select(.op=="removed") | .key'`,
		Flags: []cli.Flag{
			configFlag(), dbFlag(true), lockTimeoutFlag(), socketFlag(),
			&cli.StringFlag{Name: "table", Usage: "table `NAME`", Required: true},
			&cli.Uint64Flag{Name: "from", Usage: "the older generation `G`", DefaultText: "the one --to replaced"},
			&cli.Uint64Flag{Name: "to", Usage: "the newer generation `G`", DefaultText: "the published one"},
			&cli.IntFlag{Name: "limit", Usage: "print at most `N` keys (0: all)"},
			&cli.BoolFlag{Name: "base64", Usage: "encode keys and values in base64"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("unexpected argument %q", c.Args().First())
			}
			table, from, to, limit, b64 := c.String("table"), c.Uint64("from"), c.Uint64("to"), c.Int("limit"), c.Bool("base64")
			for _, f := range []string{"from", "to"} {
				if c.IsSet(f) && c.Uint64(f) == 0 {
					return &usageError{msg: fmt.Sprintf("--%s 0: not a generation", f), hint: "kmaterialize tables --db FILE lists the generations"}
				}
			}
			if limit < 0 {
				return &usageError{msg: fmt.Sprintf("--limit %d: must not be negative", limit), hint: "--limit 100"}
			}
			if routed, err := viaDaemon(c, func(d *daemon) error {
				var sp spool
				defer sp.Close()
				_, _, err := d.cl.Diff(c.Context, table, client.DiffOptions{From: from, To: to, Limit: limit, Base64: b64}, &sp)
				if err != nil {
					return d.fail(err, table)
				}
				_, err = sp.WriteTo(stdoutOf(c))
				return err
			}); routed {
				return err
			}
			db, err := openRead(c)
			if err != nil {
				return err
			}
			defer db.Close()
			// Checked in a first pass, so that a key that cannot be shown
			// fails before the first line (as export does).
			if !b64 {
				_, err := db.Diff(table, from, to, limit, func(ch store.Change) error {
					_, err := exportdoc.DiffLine(ch, false)
					return err
				})
				if errors.Is(err, exportdoc.ErrNotUTF8) {
					return &usageError{msg: err.Error(), hint: "add --base64"}
				}
				if err != nil {
					return err
				}
			}
			w := bufio.NewWriter(stdoutOf(c))
			if _, err := db.Diff(table, from, to, limit, func(ch store.Change) error {
				line, err := exportdoc.DiffLine(ch, b64)
				if err != nil {
					return err
				}
				_, err = w.Write(line)
				return err
			}); err != nil {
				return err
			}
			return w.Flush()
		},
	}
}
