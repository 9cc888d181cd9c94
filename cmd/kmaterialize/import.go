package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/materialize"
)

func importCommand() *cli.Command {
	return &cli.Command{
		Name:      "import",
		Usage:     "load a table from an export document, with its provenance as the checkpoint",
		UsageText: "kmaterialize import --db FILE --in snapshot.json [--table NAME]",
		Description: `Loads a table from a document written by kmaterialize export, and publishes
it atomically like a rebuild (replacing the table if the database has it).
The document's per-partition end positions become the table's checkpoint,
so that a new host, or a restored backup, catches up with kmaterialize
update (or a daemon) instead of replaying the topic's history.

The document is checked first, and refused with exit 2 when it does not fit:
its format version; its fold (a latest table only: an export of a count
table has its counts but not its identity index, so updates after an import
could neither dedupe nor detect conflicts); the fold's parameters; its
partitions; its row count against its totals; and, when the database
already has the table, the same topic and fold. --table imports under
another name (default: the document's table).

An imported checkpoint's age is unknown: an update of a compacted topic
refuses it (exit 4) unless --rebuild-if-needed, since tombstones written
since the export may already be gone.

Examples:
  $ kmaterialize export --db old.db --table balances --out balances.json
  $ kmaterialize import --db new.db --in balances.json
  $ kmaterialize update --db new.db --table balances --brokers localhost:9092`,
		Flags: []cli.Flag{
			configFlag(), dbFlag(true), lockTimeoutFlag(),
			&cli.StringFlag{Name: "in", Usage: "the export document `FILE`", Required: true},
			&cli.StringFlag{Name: "table", Usage: "table `NAME` (default: the document's table)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("unexpected argument %q", c.Args().First())
			}
			log, err := newLogger(c)
			if err != nil {
				return err
			}
			in := c.String("in")
			f, err := os.Open(in)
			if err != nil {
				return &usageError{msg: fmt.Sprintf("--in %s: %v", in, err), hint: "--in FILE, a document written by kmaterialize export"}
			}
			defer f.Close()
			path := c.String("db")
			db, err := openWrite(c, path, fmt.Sprintf("kmaterialize import --db %s --in %s", path, in))
			if err != nil {
				return err
			}
			defer db.Close()
			rep, err := materialize.Import(c.Context, materialize.ImportOptions{DB: db, In: f, Source: in, Table: c.String("table"), Log: log})
			if err != nil {
				return fmt.Errorf("import into %s failed, nothing published: %w", path, err)
			}
			m := rep.Meta
			_, err = fmt.Fprintf(stdoutOf(c), "imported table %s: generation %d, %d keys, topic %s, checkpoint of %d partitions\n",
				m.Name, m.Generation, m.Keys, m.Topic, len(rep.Checkpoint.Partitions))
			return err
		},
	}
}
