package main

import (
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/verify"
)

// errLedgerMismatch is verify's "data conflict" outcome: exit 3.
type errLedgerMismatch struct{ missing, duplicated int64 }

func (e *errLedgerMismatch) Error() string {
	return fmt.Sprintf("verify failed: %d missing, %d duplicated", e.missing, e.duplicated)
}

func runVerify(c *cli.Context) error {
	if c.String("from") == "" || c.String("to") == "" {
		return &usageError{msg: "--from and --to are required", hint: "kmaterialize verify --brokers B --from ledger --to ledger-copy"}
	}
	by := c.String("by")
	if by != "record" && by != "value" {
		return usageErrorf("--by %q: want record or value", by)
	}
	stall, err := stallTimeout(c)
	if err != nil {
		return err
	}
	k, err := parseKafka(c)
	if err != nil {
		return err
	}
	if err := checkProps(k.brokers, k.props, replay.ConsumerClient); err != nil {
		return err
	}
	prog, err := newProgress(c, k.log)
	if err != nil {
		return err
	}
	rep, err := verify.Run(c.Context, verify.Config{Brokers: k.brokers, Props: k.props, From: c.String("from"), To: c.String("to"),
		ByValue: by == "value", StallTimeout: stall, Examples: c.Int("examples"), Log: k.log,
		Progress: prog.Update, ProgressInterval: prog.Tick()})
	endProgress(prog, err)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdoutOf(c))
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return err
	}
	if !rep.OK {
		return &errLedgerMismatch{rep.Missing, rep.Duplicated}
	}
	return nil
}
