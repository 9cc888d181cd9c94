package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/store"
)

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:      "check",
		Usage:     "check a database for damage and broken invariants",
		UsageText: "kmaterialize check --db FILE [--format text|json] [--lock-timeout D]",
		Description: `Checks, without changing anything: bbolt's meta pages and the file's size,
every page (bbolt's consistency check, run in a child process so that a crash
of bbolt on a damaged page is reported rather than fatal), and the tables'
own invariants: each table names an existing generation, begun for it, whose
row count matches the table's metadata and the count recorded at publish, and
each table has a valid checkpoint.

Exits 0 when the database is sound (warnings allowed: an unpublished
generation or an older format version, which the next read-write command
resolves), 1 when it is corrupt, with every problem listed, 7 when another
process holds it.

Examples:
  $ kmaterialize check --db balances.db
  $ kmaterialize check --db balances.db --format json`,
		Flags: []cli.Flag{
			configFlag(), dbFlag(true), lockTimeoutFlag(), formatFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("unexpected argument %q", c.Args().First())
			}
			format, err := textOrJSON(c)
			if err != nil {
				return err
			}
			r, err := store.Check(c.String("db"), &store.CheckOptions{
				LockTimeout: lockTimeout(c), PageCheck: pageCheck, Table: store.CheckCheckpoint,
			})
			if err != nil {
				return err
			}
			if format == "json" {
				enc := json.NewEncoder(stdoutOf(c))
				enc.SetIndent("", "  ")
				err = enc.Encode(r)
			} else {
				err = printCheck(stdoutOf(c), r)
			}
			if err != nil {
				return err
			}
			if cerr := r.Err(); cerr != nil {
				return &checkFailed{err: cerr}
			}
			return nil
		},
	}
}

func printCheck(w io.Writer, r *store.CheckReport) error {
	fmt.Fprintf(w, "%s: format version %d, %d tables, %d generations\n", r.Path, r.FormatVersion, r.Tables, r.Generations)
	for _, p := range r.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
	for _, p := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", p)
	}
	var err error
	if r.OK() {
		_, err = fmt.Fprintln(w, "ok")
	} else {
		_, err = fmt.Fprintf(w, "corrupt: %d problems\n", len(r.Problems))
	}
	return err
}

// checkFailed is a check that found problems (exit 1): the report on stdout
// lists them, so its hint is only how to start over.
type checkFailed struct{ err error }

func (e *checkFailed) Error() string { return e.err.Error() }
func (e *checkFailed) Unwrap() error { return e.err }
