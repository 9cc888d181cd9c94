package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/kmaterialize/kmaterialize/snapshot"
	"github.com/kmaterialize/kmaterialize/store"
	"github.com/urfave/cli/v2"
)

func scanCommand() *cli.Command {
	return &cli.Command{
		Name:      "scan",
		Usage:     "print a table's rows in key order",
		UsageText: "kmaterialize scan --db FILE --table TABLE [--prefix P] [--limit N] [--format json|jsonl|tsv] [--base64]",
		Description: `Prints rows in ascending key (byte) order.

  json   (default) one JSON object mapping key to value, keys sorted
  jsonl  one {"key":...,"value":...} object per line
  tsv    key TAB value per line

Keys and values are printed as UTF-8 strings. A key or value that is not
valid UTF-8 is never mangled: the scan fails naming the key, before printing
anything, unless --base64 is given, which prints every key and value
base64-encoded (standard encoding). In tsv, a key or value containing a tab
or newline is refused the same way.

Examples:
  $ kmaterialize scan --db balances.db --table account-balances
  $ kmaterialize scan --db balances.db --table account-balances --prefix acct-4 --limit 100 --format tsv`,
		Flags: []cli.Flag{
			configFlag(), dbFlag(true), lockTimeoutFlag(), socketFlag(),
			&cli.StringFlag{Name: "table", Usage: "table `NAME`", Required: true},
			&cli.StringFlag{Name: "prefix", Usage: "only keys starting with `PREFIX`"},
			&cli.IntFlag{Name: "limit", Usage: "at most `N` rows (0: all)"},
			&cli.StringFlag{Name: "format", Value: "json", Usage: "json, jsonl or tsv"},
			&cli.BoolFlag{Name: "base64", Usage: "print keys and values base64-encoded"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("unexpected argument %q", c.Args().First())
			}
			f, err := newRowFormatter(c.String("format"), c.Bool("base64"))
			if err != nil {
				return err
			}
			if c.Int("limit") < 0 {
				return usageErrorf("--limit must not be negative")
			}
			table := c.String("table")
			var prefix []byte
			if c.IsSet("prefix") {
				prefix = []byte(c.String("prefix"))
			}
			if routed, err := viaDaemon(c, func(d *daemon) error { return scanVia(c, d, table, prefix, c.Int("limit")) }); routed {
				return err
			}
			db, err := openRead(c)
			if err != nil {
				return err
			}
			defer db.Close()
			if _, err := db.Table(table); err != nil {
				return err
			}
			bw := bufio.NewWriterSize(stdoutOf(c), 64<<10)
			err = db.ReadTable(table, func(s *store.Snapshot) error {
				// A row that cannot be shown fails the scan before its
				// first byte: a partial document on stdout would look like
				// a complete one to the next program in a pipe. Both passes
				// read the same snapshot.
				if err := s.Rows(prefix, c.Int("limit"), f.check); err != nil {
					return err
				}
				f.begin(bw)
				if err := s.Rows(prefix, c.Int("limit"), func(k, v []byte) error { return f.row(bw, k, v) }); err != nil {
					return err
				}
				f.end(bw)
				return nil
			})
			if err != nil {
				return fmt.Errorf("scan table %q: %w", table, err)
			}
			return bw.Flush()
		},
	}
}

// rowFormatter prints rows in one of the scan formats.
type rowFormatter struct {
	format string
	b64    bool
	n      int
}

func newRowFormatter(format string, b64 bool) (*rowFormatter, error) {
	switch format {
	case "json", "jsonl", "tsv":
		return &rowFormatter{format: format, b64: b64}, nil
	}
	return nil, usageErrorf("--format %q: want json, jsonl or tsv", format)
}

func (f *rowFormatter) text(what string, k, b []byte) (string, error) {
	s, err := snapshot.Text(k, b, what, f.b64)
	if err != nil {
		return "", &usageError{msg: err.Error(), hint: "add --base64 to print keys and values base64-encoded"}
	}
	if !f.b64 && f.format == "tsv" && bytes.ContainsAny(b, "\t\n") {
		return "", &usageError{msg: fmt.Sprintf("the %s of key %q contains a tab or newline, which tsv cannot show", what, k), hint: "--format jsonl, or --base64"}
	}
	return s, nil
}

// check returns the error row would return for k and v, writing nothing.
func (f *rowFormatter) check(k, v []byte) error {
	if f.b64 {
		return nil
	}
	if _, err := f.text("key", k, k); err != nil {
		return err
	}
	_, err := f.text("value", k, v)
	return err
}

func (f *rowFormatter) begin(w io.Writer) {
	if f.format == "json" {
		io.WriteString(w, "{")
	}
}

func (f *rowFormatter) row(w io.Writer, k, v []byte) error {
	ks, err := f.text("key", k, k)
	if err != nil {
		return err
	}
	vs, err := f.text("value", k, v)
	if err != nil {
		return err
	}
	switch f.format {
	case "json":
		kj, _ := json.Marshal(ks)
		vj, _ := json.Marshal(vs)
		if f.n > 0 {
			io.WriteString(w, ",")
		}
		io.WriteString(w, "\n  ")
		w.Write(kj)
		io.WriteString(w, ": ")
		w.Write(vj)
	case "jsonl":
		w.Write(snapshot.JSONLine(ks, vs))
	case "tsv":
		fmt.Fprintf(w, "%s\t%s\n", ks, vs)
	}
	f.n++
	return nil
}

func (f *rowFormatter) end(w io.Writer) {
	if f.format == "json" {
		if f.n > 0 {
			io.WriteString(w, "\n")
		}
		io.WriteString(w, "}\n")
	}
}
