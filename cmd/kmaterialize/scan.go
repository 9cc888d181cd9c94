package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/exportdoc"
	"github.com/kmaterialize/kmaterialize/store"
)

func scanCommand() *cli.Command {
	return withCluster(&cli.Command{
		Name:      "scan",
		Usage:     "print a table's rows in key order",
		UsageText: "kmaterialize scan --db FILE --table TABLE [--prefix P] [--from K] [--to K] [--limit N] [--keys-only | --count] [--format json|jsonl|tsv|text] [--base64]",
		Description: `Prints rows in ascending key (byte) order.

  json   (default) one JSON object mapping key to value, keys sorted
  jsonl  one {"key":...,"value":...} object per line
  tsv    key TAB value per line
  text   the same as tsv

--prefix, --from and --to select the rows, all at once: keys that start with
the prefix, at or above --from (inclusive) and below --to (exclusive), so
--from a --to b is every key that starts with a, and consecutive ranges
(--to m, then --from m) never overlap. --key-encoding base64 or hex says that
these three are written in that encoding (for keys that are not text).

--keys-only prints keys without values: a JSON array of keys (json),
{"key":...} lines (jsonl), or one key per line (tsv, text).
--count prints the number of rows the scan would print (at most --limit): a
bare number (text, tsv) or {"count":N} (json, jsonl).

Keys and values are printed as UTF-8 strings. A key or value that is not
valid UTF-8 is never mangled: the scan fails naming the key, before printing
anything, unless --base64 is given, which prints every key and value
base64-encoded (standard encoding). In tsv, a key or value containing a tab
or newline is refused the same way.

Examples:
  $ kmaterialize scan --db balances.db --table account-balances
  $ kmaterialize scan --db balances.db --table account-balances --prefix acct-4 --limit 100 --format tsv
  $ kmaterialize scan --db balances.db --table account-balances --from acct-100 --to acct-200 --keys-only
  $ kmaterialize scan --db balances.db --table account-balances --prefix acct- --count`,
		Flags: []cli.Flag{
			configFlag(), dbFlag(true), lockTimeoutFlag(), socketFlag(),
			&cli.StringFlag{Name: "table", Usage: "table `NAME`", Required: true},
			&cli.StringFlag{Name: "prefix", Usage: "only keys starting with `PREFIX`"},
			&cli.StringFlag{Name: "from", Usage: "only keys at or above `KEY` (inclusive)"},
			&cli.StringFlag{Name: "to", Usage: "only keys below `KEY` (exclusive)"},
			&cli.IntFlag{Name: "limit", Usage: "at most `N` rows (0: all)"},
			&cli.BoolFlag{Name: "keys-only", Usage: "print keys without values"},
			&cli.BoolFlag{Name: "count", Usage: "print only the number of rows"},
			formatsFlag(formatJSON, formatJSON, formatJSONL, formatTSV, formatText),
			&cli.BoolFlag{Name: "base64", Usage: "print keys and values base64-encoded"},
			keyEncodingFlag("--prefix, --from and --to"),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("unexpected argument %q", c.Args().First())
			}
			f, err := scanFormatter(c)
			if err != nil {
				return err
			}
			if c.Int("limit") < 0 {
				return usageErrorf("--limit must not be negative")
			}
			if c.Bool("count") && c.Bool("keys-only") {
				return &usageError{msg: "--count and --keys-only exclude each other", hint: "--count alone"}
			}
			table := c.String("table")
			rng, err := scanRange(c)
			if err != nil {
				return err
			}
			if clusterFile(c) != "" {
				return scanViaCluster(c, table, rng)
			}
			if c.Bool("count") {
				return scanCount(c, f.format, table, rng)
			}
			if routed, err := viaDaemon(c, func(d *daemon) error { return scanVia(c, d, table, rng, c.Int("limit")) }); routed {
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
				if err := s.RangeRows(rng, c.Int("limit"), f.check); err != nil {
					return err
				}
				f.begin(bw)
				if err := s.RangeRows(rng, c.Int("limit"), func(k, v []byte) error { return f.row(bw, k, v) }); err != nil {
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
	})
}

// scanRange is the rows --prefix, --from and --to select, decoded with
// --key-encoding.
func scanRange(c *cli.Context) (store.Range, error) {
	var r store.Range
	dec, err := keyDecoder(c)
	if err != nil {
		return r, err
	}
	for _, b := range []struct {
		flag string
		to   *[]byte
	}{{"prefix", &r.Prefix}, {"from", &r.From}, {"to", &r.To}} {
		if c.IsSet(b.flag) {
			if *b.to, err = dec("--"+b.flag, c.String(b.flag)); err != nil {
				return r, err
			}
		}
	}
	return r, nil
}

// scanCount prints the number of rows in rng (at most --limit).
func scanCount(c *cli.Context, format, table string, rng store.Range) error {
	var n int64
	if routed, err := viaDaemon(c, func(d *daemon) error {
		var err error
		n, _, err = d.cl.Count(c.Context, table, client.CountOptions{Prefix: rng.Prefix, From: rng.From, To: rng.To})
		return d.fail(err, table)
	}); routed {
		if err != nil {
			return err
		}
	} else {
		db, err := openRead(c)
		if err != nil {
			return err
		}
		err = db.ReadTable(table, func(s *store.Snapshot) error {
			var err error
			n, err = s.Count(rng)
			return err
		})
		db.Close()
		if err != nil {
			return err
		}
	}
	if l := int64(c.Int("limit")); l > 0 && n > l {
		n = l
	}
	var err error
	if format == formatJSON || format == formatJSONL {
		_, err = fmt.Fprintf(stdoutOf(c), "{\"count\":%d}\n", n)
	} else {
		_, err = fmt.Fprintf(stdoutOf(c), "%d\n", n)
	}
	return err
}

// rowFormatter prints rows in one of the scan formats.
type rowFormatter struct {
	format   string // json, jsonl or tsv (text is tsv)
	b64      bool
	keysOnly bool
	n        int
}

// scanFormatter is the formatter of scan's flags.
func scanFormatter(c *cli.Context) (*rowFormatter, error) {
	format, err := formatOf(c, formatJSON, formatJSONL, formatTSV, formatText)
	if err != nil {
		return nil, err
	}
	f, err := newRowFormatter(format, c.Bool("base64"))
	if err != nil {
		return nil, err
	}
	f.keysOnly = c.Bool("keys-only")
	return f, nil
}

func newRowFormatter(format string, b64 bool) (*rowFormatter, error) {
	switch format {
	case formatText:
		format = formatTSV
		fallthrough
	case formatJSON, formatJSONL, formatTSV:
		return &rowFormatter{format: format, b64: b64}, nil
	}
	return nil, usageErrorf("--format %q: want json, jsonl, tsv or text", format)
}

func (f *rowFormatter) text(what string, k, b []byte) (string, error) {
	s, err := exportdoc.Text(k, b, what, f.b64)
	if err != nil {
		return "", &usageError{msg: err.Error(), hint: "add --base64 to print keys and values base64-encoded"}
	}
	if !f.b64 && f.format == "tsv" && bytes.ContainsAny(b, "\t\n") && !(f.keysOnly && what == "key" && !bytes.ContainsRune(b, '\n')) {
		return "", &usageError{msg: fmt.Sprintf("the %s of key %q contains a tab or newline, which tsv cannot show", what, k), hint: "--format jsonl, or --base64"}
	}
	return s, nil
}

// check returns the error row would return for k and v, writing nothing.
func (f *rowFormatter) check(k, v []byte) error {
	if f.b64 {
		return nil
	}
	if _, err := f.text("key", k, k); err != nil || f.keysOnly {
		return err
	}
	_, err := f.text("value", k, v)
	return err
}

func (f *rowFormatter) begin(w io.Writer) {
	switch {
	case f.format == "json" && f.keysOnly:
		io.WriteString(w, "[")
	case f.format == "json":
		io.WriteString(w, "{")
	}
}

func (f *rowFormatter) row(w io.Writer, k, v []byte) error {
	ks, err := f.text("key", k, k)
	if err != nil {
		return err
	}
	if f.keysOnly {
		f.key(w, ks)
		return nil
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
		w.Write(exportdoc.JSONLine(ks, vs))
	case "tsv":
		fmt.Fprintf(w, "%s\t%s\n", ks, vs)
	}
	f.n++
	return nil
}

// key prints a row of --keys-only.
func (f *rowFormatter) key(w io.Writer, ks string) {
	kj, _ := json.Marshal(ks)
	switch f.format {
	case "json":
		if f.n > 0 {
			io.WriteString(w, ",")
		}
		io.WriteString(w, "\n  ")
		w.Write(kj)
	case "jsonl":
		fmt.Fprintf(w, "{\"key\":%s}\n", kj)
	case "tsv":
		fmt.Fprintf(w, "%s\n", ks)
	}
	f.n++
}

func (f *rowFormatter) end(w io.Writer) {
	if f.format == "json" {
		if f.n > 0 {
			io.WriteString(w, "\n")
		}
		if f.keysOnly {
			io.WriteString(w, "]\n")
		} else {
			io.WriteString(w, "}\n")
		}
	}
}

// scanAttempts is how many times a routed scan starts over when a publish
// replaces its generation between two pages.
const scanAttempts = 3

// scanVia is scan through the daemon: pages pinned to one generation,
// formatted by the direct path's formatter from the raw bytes (asked in
// base64), held until the last row so that a failure prints nothing. A
// publish between two pages starts the scan over.
func scanVia(c *cli.Context, d *daemon, table string, rng store.Range, limit int) error {
	return scanRouted(c, table, func(o client.RowsOptions, fn func(client.Row) error) error {
		o.Limit = limit
		_, err := d.cl.Rows(c.Context, table, o, fn)
		return err
	}, func(err error) error { return d.fail(err, table) }, rng)
}

// scanRouted is a routed scan's loop (one daemon's or a cluster's rows):
// the rows in rng, formatted by the direct path's formatter from the raw
// bytes (asked in base64), held until the last row so that a failure
// prints nothing; a publish between two pages starts it over, up to
// scanAttempts times. fail maps the answer's error to the command's.
func scanRouted(c *cli.Context, table string, rows func(client.RowsOptions, func(client.Row) error) error, fail func(error) error, rng store.Range) error {
	for attempt := 1; ; attempt++ {
		f, err := scanFormatter(c)
		if err != nil {
			return err
		}
		var sp spool
		bw := bufio.NewWriterSize(&sp, 64<<10)
		f.begin(bw)
		err = rows(client.RowsOptions{Prefix: rng.Prefix, From: rng.From, To: rng.To, KeysOnly: f.keysOnly, Base64: true},
			func(r client.Row) error { return f.row(bw, r.Key, r.Value) })
		if err == nil {
			f.end(bw)
			err = bw.Flush()
		}
		if err == nil {
			_, err = sp.WriteTo(stdoutOf(c))
			sp.Close()
			return err
		}
		sp.Close()
		switch {
		case client.IsCode(err, client.CodeGenerationGone) && attempt < scanAttempts:
			continue
		case isUsage(err):
			return fmt.Errorf("scan table %q: %w", table, err)
		}
		return fail(err)
	}
}
