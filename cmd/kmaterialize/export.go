package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/exportdoc"
)

func exportCommand() *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "write a table and its provenance as one reproducible JSON document",
		UsageText: "kmaterialize export --db FILE --table TABLE [--out FILE] [--base64]",
		Description: `Writes one JSON document: table, topic, fold and its parameters, per
partition the retained low, the end mark, the start and the end position (the
provenance, with updates_since_rebuild: the updates since the last full
rebuild; and, for a rebuild with --until-timestamp or --to-offsets, the bound
as "until"; for a table over a subset of its topic's partitions,
partition_set and partitions_of_topic; its partitioner, when it has one), the totals (records read and skipped, keys, and the fold's counters such as
logical events and duplicates folded), and the rows in key order. It has no
wall-clock field and no generation number, so two rebuilds of the same frozen
batch export byte-identical files.

With --out the document is written to a temporary file in the same directory
and renamed into place; on any error the previous file is untouched. Without
--out it goes to stdout. Keys and values must be valid UTF-8 unless --base64.

Examples:
  $ kmaterialize export --db votes.db --table studio-votes --out studio-votes.json
  $ kmaterialize export --db votes.db --table studio-votes | sha256sum`,
		Flags: []cli.Flag{
			configFlag(), dbFlag(true), lockTimeoutFlag(), socketFlag(),
			&cli.StringFlag{Name: "table", Usage: "table `NAME`", Required: true},
			&cli.StringFlag{Name: "out", Usage: "write to `FILE` atomically instead of stdout"},
			&cli.BoolFlag{Name: "base64", Usage: "encode keys and values in base64"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("unexpected argument %q", c.Args().First())
			}
			if routed, err := viaDaemon(c, func(d *daemon) error {
				return exportVia(c, d, c.String("table"), c.String("out"), c.Bool("base64"))
			}); routed {
				return err
			}
			db, err := openRead(c)
			if err != nil {
				return err
			}
			defer db.Close()
			opts := exportdoc.Options{Base64: c.Bool("base64")}
			if out := c.String("out"); out != "" {
				err = exportdoc.WriteFile(db, c.String("table"), out, opts)
			} else {
				err = exportdoc.Write(db, c.String("table"), stdoutOf(c), opts)
			}
			if errors.Is(err, exportdoc.ErrNotUTF8) {
				return &usageError{msg: err.Error(), hint: "add --base64"}
			}
			if err != nil {
				return fmt.Errorf("%w", err)
			}
			return nil
		},
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
