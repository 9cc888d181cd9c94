package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/exportdoc"
	"github.com/kmaterialize/kmaterialize/store"
)

func getCommand() *cli.Command {
	return withCluster(&cli.Command{
		Name:      "get",
		Usage:     "print the values of keys",
		UsageText: "kmaterialize get --db FILE --table TABLE [--key-encoding utf8|base64|hex] [--format text|json|jsonl] [--base64] [--min-positions P:N,... [--wait D]] KEY... | -",
		Description: `With one KEY, prints its value followed by a newline and exits 0, or exits 6
when the key (or the table) is absent. The value's bytes are printed as they
are; --base64 prints them base64-encoded (standard encoding) instead.

With several KEYs, or with - (read keys from stdin, one per line; empty
lines are skipped), prints one JSON line per key, in the order given:
  {"key":"acct-42","value":"100"}
and for a key the table does not hold:
  {"key":"acct-99","value":null}
then exits 0 when every key was found, 6 when any was not (stderr says how
many). All keys are read from one generation. The keys and values in these
lines are UTF-8 text; one that is not valid UTF-8 fails the command before it
prints anything (exit 2) unless --base64 is given, which base64-encodes the
keys and the values in the lines. --format json prints one JSON object
mapping each key to its value (or null) instead.

--min-positions P:N,... reads only once the table has applied those
positions (through a daemon only: the file alone cannot wait): N is the
offset of your last record in partition P plus one, so that the answer
includes it. --wait D (default 0, at most 30s) is how long the daemon waits
for them; past it get exits 4 and stderr names the table's positions.

--key-encoding says how KEYs (and the lines of -) are written: utf8, as they
are (the default), base64 (what scan --base64 prints, so that every key a
scan shows can be fetched back) or hex.

Examples:
  $ kmaterialize get --db balances.db --table account-balances acct-42
  $ kmaterialize get --db balances.db --table account-balances --base64 acct-42
  $ kmaterialize get --db balances.db --table account-balances acct-42 acct-43
  $ kmaterialize scan --db balances.db --table t --base64 --keys-only --format tsv |
      kmaterialize get --db balances.db --table t --key-encoding base64 --base64 -
  $ kmaterialize get --db balances.db --table t --key-encoding hex ff00
  $ kmaterialize get --config /etc/kmaterialize.yaml --table balances acct-42
  $ kmaterialize get --db balances.db --table balances --min-positions 1:1300,4:77 --wait 2s acct-42`,
		Flags: []cli.Flag{
			configFlag(), dbFlag(true), lockTimeoutFlag(), socketFlag(),
			&cli.StringFlag{Name: "table", Usage: "table `NAME`", Required: true},
			&cli.BoolFlag{Name: "base64", Usage: "print the value (and, in JSON lines, the key) base64-encoded"},
			keyEncodingFlag("KEYs and the lines of -"),
			formatsFlag("", formatText, formatJSON, formatJSONL),
			&cli.StringFlag{Name: "min-positions", Usage: "read once the table has applied `P:N,...` (N: a record's offset + 1; daemon only)"},
			&cli.DurationFlag{Name: "wait", Usage: "how long the daemon waits for --min-positions (at most 30s)"},
		},
		Action: func(c *cli.Context) error {
			keys, single, err := getKeys(c)
			if err != nil {
				return err
			}
			format := c.String("format")
			if format == "" {
				format = formatJSONL
				if single {
					format = formatText
				}
			}
			if format, err = checkFormat("get", format, formatText, formatJSON, formatJSONL); err != nil {
				return err
			}
			if format == formatText && !single {
				return &usageError{msg: "--format text prints one value: give one KEY", hint: "--format jsonl (the default for several keys)"}
			}
			opts, err := getOptions(c)
			if err != nil {
				return err
			}
			table := c.String("table")
			if clusterFile(c) != "" {
				return getViaCluster(c, format, table, keys, opts)
			}
			var values [][]byte
			var via *daemon
			if routed, err := viaDaemon(c, func(d *daemon) error {
				var err error
				via = d
				values, _, err = d.cl.GetManyWith(c.Context, table, keys, opts)
				return d.fail(err, table)
			}); routed {
				if err != nil {
					return err
				}
				if err := printValues(c, format, table, keys, values); errors.Is(err, store.ErrKeyNotFound) {
					// Say who answered, as every routed failure does.
					return &daemonError{msg: via.answered(err.Error()), err: err, code: exitNotFound}
				} else {
					return err
				}
			} else {
				if opts.MinPositions != nil {
					return &usageError{msg: "--min-positions needs a daemon: no daemon holds --db, and the file alone cannot wait for positions",
						hint: "run it where the daemon (kmaterialize serve) that follows the topic holds --db, or give its --socket; without --min-positions get reads the file"}
				}
				db, err := openRead(c)
				if err != nil {
					return err
				}
				values, _, err = db.GetMany(table, keys)
				db.Close()
				if err != nil {
					return err
				}
			}
			return printValues(c, format, table, keys, values)
		},
	})
}

// getKeys returns the keys of get, decoded: the arguments, or stdin's
// lines for -. single is true for exactly one KEY argument.
func getKeys(c *cli.Context) (keys [][]byte, single bool, err error) {
	dec, err := keyDecoder(c)
	if err != nil {
		return nil, false, err
	}
	args := c.Args().Slice()
	example := "kmaterialize get --db balances.db --table account-balances acct-42"
	switch {
	case len(args) == 0:
		return nil, false, &usageError{msg: "get takes one or more KEYs, or - to read them from stdin", hint: example}
	case len(args) == 1 && args[0] == "-":
		sc := bufio.NewScanner(stdinOf(c))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for line := 1; sc.Scan(); line++ {
			if len(sc.Bytes()) == 0 {
				continue
			}
			k, err := dec(fmt.Sprintf("stdin line %d", line), sc.Text())
			if err != nil {
				return nil, false, err
			}
			keys = append(keys, k)
		}
		if err := sc.Err(); err != nil {
			return nil, false, fmt.Errorf("read keys from stdin: %w", err)
		}
		return keys, false, nil
	}
	for _, a := range args {
		if a == "-" {
			return nil, false, &usageError{msg: "- (keys from stdin) must be the only KEY argument", hint: example}
		}
		k, err := dec("KEY", a)
		if err != nil {
			return nil, false, err
		}
		keys = append(keys, k)
	}
	return keys, len(keys) == 1, nil
}

// stdinOf is where get reads the keys of -.
func stdinOf(c *cli.Context) io.Reader {
	if r, ok := c.App.Metadata["stdin"].(io.Reader); ok {
		return r
	}
	return os.Stdin
}

// keysNotFound is a get of several keys where some were absent: their lines
// say "value": null, and the exit code is 6.
type keysNotFound struct {
	table          string
	missing, total int
}

func (e *keysNotFound) Error() string {
	return fmt.Sprintf("%d of %d keys not found in table %q (their lines have \"value\": null)", e.missing, e.total, e.table)
}

func (e *keysNotFound) Is(target error) bool { return target == store.ErrKeyNotFound }

// printValues prints what get found: values[i] is keys[i]'s value, nil when
// absent. Everything is formatted before the first byte is written, so
// that a key or value that cannot be shown prints nothing.
func printValues(c *cli.Context, format, table string, keys, values [][]byte) error {
	b64 := c.Bool("base64")
	if format == formatText {
		if values[0] == nil {
			return &store.KeyNotFoundError{Table: table, Key: keys[0]}
		}
		return printValue(c, values[0])
	}
	text := func(what string, k, b []byte) (string, error) {
		s, err := exportdoc.Text(k, b, what, b64)
		if err != nil {
			return "", &usageError{msg: err.Error(), hint: "add --base64 to print keys and values base64-encoded"}
		}
		return s, nil
	}
	var buf bytes.Buffer
	missing := 0
	seen := map[string]bool{}
	if format == formatJSON {
		buf.WriteString("{")
	}
	for i, k := range keys {
		ks, err := text("key", k, k)
		if err != nil {
			return err
		}
		vj := []byte("null")
		if values[i] == nil {
			missing++
		} else {
			vs, err := text("value", k, values[i])
			if err != nil {
				return err
			}
			vj, _ = json.Marshal(vs)
		}
		kj, _ := json.Marshal(ks)
		switch format {
		case formatJSONL:
			fmt.Fprintf(&buf, "{\"key\":%s,\"value\":%s}\n", kj, vj)
		case formatJSON:
			// A key asked twice is one member of the object.
			if seen[string(k)] {
				continue
			}
			seen[string(k)] = true
			if len(seen) > 1 {
				buf.WriteString(",")
			}
			fmt.Fprintf(&buf, "\n  %s: %s", kj, vj)
		}
	}
	if format == formatJSON {
		if len(seen) > 0 {
			buf.WriteString("\n")
		}
		buf.WriteString("}\n")
	}
	if _, err := buf.WriteTo(stdoutOf(c)); err != nil {
		return err
	}
	if missing > 0 {
		return &keysNotFound{table: table, missing: missing, total: len(keys)}
	}
	return nil
}

// printValue prints a value as get does.
func printValue(c *cli.Context, v []byte) error {
	out := stdoutOf(c)
	if c.Bool("base64") {
		_, err := fmt.Fprintln(out, base64.StdEncoding.EncodeToString(v))
		return err
	}
	if _, err := out.Write(v); err != nil {
		return err
	}
	_, err := fmt.Fprintln(out)
	return err
}

// getOptions reads --min-positions and --wait.
func getOptions(c *cli.Context) (client.GetOptions, error) {
	var o client.GetOptions
	text, wait := c.String("min-positions"), c.Duration("wait")
	if c.IsSet("min-positions") {
		p, err := api.ParsePositions(text)
		if err == nil && len(p) == 0 {
			err = errors.New("empty")
		}
		if err != nil {
			return o, &usageError{msg: fmt.Sprintf("--min-positions %q: %v", text, err), hint: "--min-positions 1:1300,4:77 (per partition, your last record's offset + 1)"}
		}
		o.MinPositions = p
	}
	switch {
	case wait < 0 || wait > api.MaxWait:
		return o, &usageError{msg: fmt.Sprintf("--wait %s: want 0 to %s", wait, api.MaxWait), hint: "--wait 2s"}
	case wait > 0 && o.MinPositions == nil:
		return o, &usageError{msg: "--wait without --min-positions: get waits only for positions", hint: "--min-positions 1:1300 --wait 2s"}
	}
	o.Wait = wait
	return o, nil
}
