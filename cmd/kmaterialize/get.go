package main

import (
	"encoding/base64"
	"fmt"

	"github.com/urfave/cli/v2"
)

func getCommand() *cli.Command {
	return &cli.Command{
		Name:      "get",
		Usage:     "print one key's value",
		UsageText: "kmaterialize get --db FILE --table TABLE KEY",
		Description: `Prints the value of KEY followed by a newline and exits 0, or exits 6 when
the key (or the table) is absent. The value's bytes are printed as they are;
--base64 prints them base64-encoded (standard encoding) instead.

Examples:
  $ kmaterialize get --db balances.db --table account-balances acct-42
  $ kmaterialize get --db balances.db --table account-balances --base64 acct-42
  $ kmaterialize get --config /etc/kmaterialize.yaml --table balances acct-42`,
		Flags: []cli.Flag{
			configFlag(), dbFlag(true), lockTimeoutFlag(), socketFlag(),
			&cli.StringFlag{Name: "table", Usage: "table `NAME`", Required: true},
			&cli.BoolFlag{Name: "base64", Usage: "print the value base64-encoded"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return &usageError{msg: fmt.Sprintf("get takes exactly one KEY, got %d arguments", c.NArg()), hint: "kmaterialize get --db balances.db --table account-balances acct-42"}
			}
			table, key := c.String("table"), []byte(c.Args().First())
			if routed, err := viaDaemon(c, func(d *daemon) error { return getVia(c, d, table, key) }); routed {
				return err
			}
			db, err := openRead(c)
			if err != nil {
				return err
			}
			defer db.Close()
			v, err := db.Get(table, key)
			if err != nil {
				return err
			}
			return printValue(c, v)
		},
	}
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
