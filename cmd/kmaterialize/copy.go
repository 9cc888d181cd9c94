package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/copier"
	"github.com/kmaterialize/kmaterialize/replay"
)

func copyCommand() *cli.Command {
	return &cli.Command{
		Name:      "copy",
		Usage:     "copy a topic exactly once with Kafka transactions",
		UsageText: "kmaterialize copy --brokers HOST:PORT --from TOPIC --to TOPIC --group GROUP --transactional-id ID [options]",
		Description: `A transactional read-process-write copy: each transaction produces a batch to
--to (same key, value, headers and timestamp; same partition number unless
--repartition) and commits the group's positions on --from in the same
transaction, so output and input progress commit atomically. Readers of the
destination must use isolation.level=read_committed.

By default the copy stops once the group's committed offsets on every source
partition have reached the source's end offsets captured at start (waiting up
to --stall-timeout for open transactions, then exit 4): a bounded copy, good
for cron. --follow copies until SIGINT/SIGTERM. On a signal the open
transaction is finished and the copy exits.

The transactional id is used exactly as given: a second copier with the same
id fences the first, which exits 1. The consumer uses static membership
(group.instance.id kmaterialize-copy-<transactional id>), so a copier
restarted after a crash gets its partitions back at once.

The last line on stdout is a JSON summary: records, transactions, committed
(true when this run committed at least one transaction; false with --abort
and for a run that committed nothing, even one that failed at the start).

Progress goes to stderr: a bar per assigned source partition on a terminal,
JSON progress lines every --progress-interval otherwise (--progress).

Examples:
  $ kmaterialize copy --brokers localhost:9092 --from ledger --to ledger-copy --group ledger-copier --transactional-id ledger-copier-1
  $ kmaterialize copy --brokers localhost:9092 --from ledger --to ledger-copy --group ledger-copier --transactional-id ledger-copier-1 --max-records 500 --abort
  $ kmaterialize copy --brokers localhost:9092 --from ledger --to ledger-copy --group ledger-copier --transactional-id ledger-copier-1 -F client.properties --progress lines
  $ kmaterialize verify --brokers localhost:9092 --from ledger --to ledger-copy`,
		Flags: []cli.Flag{
			configFlag(), brokersFlag(),
			&cli.StringFlag{Name: "from", Usage: "source `TOPIC`"},
			&cli.StringFlag{Name: "to", Usage: "destination `TOPIC` (at least as many partitions as the source, unless --repartition)"},
			&cli.StringFlag{Name: "group", Usage: "consumer `GROUP` whose committed offsets record the copy's progress"},
			&cli.StringFlag{Name: "transactional-id", Usage: "transactional `ID`, kept exactly as given"},
			&cli.IntFlag{Name: "batch-records", Value: 1000, Usage: "most records per transaction"},
			&cli.DurationFlag{Name: "batch-interval", Value: time.Second, Usage: "longest a transaction stays open"},
			&cli.Int64Flag{Name: "max-records", Usage: "stop after `N` records (0: no limit)"},
			&cli.BoolFlag{Name: "follow", Usage: "keep copying until SIGINT/SIGTERM"},
			&cli.BoolFlag{Name: "abort", Usage: "produce each batch and abort it: nothing becomes visible and the group does not advance"},
			&cli.BoolFlag{Name: "repartition", Usage: "place records by key with the Java-compatible murmur2_random partitioner"},
			&cli.DurationFlag{Name: "call-timeout", Value: 10 * time.Second, Usage: "bound on one transactional call; a call that times out is retried (a commit as a commit) until --stall-timeout"},
			stallFlag(), propsFlag(), progressIntervalFlag(),
		},
		Action: func(c *cli.Context) error {
			for _, f := range []string{"from", "to", "group", "transactional-id"} {
				if c.String(f) == "" {
					return &usageError{msg: "--" + f + " is required", hint: "kmaterialize copy --brokers B --from ledger --to ledger-copy --group ledger-copier --transactional-id ledger-copier-1"}
				}
			}
			if c.String("from") == c.String("to") {
				return usageErrorf("--from and --to are the same topic %q", c.String("from"))
			}
			if c.Bool("follow") && c.IsSet("max-records") {
				return usageErrorf("--follow and --max-records are exclusive")
			}
			if c.Int("batch-records") <= 0 || c.Duration("batch-interval") <= 0 || c.Int64("max-records") < 0 || c.Duration("call-timeout") <= 0 {
				return usageErrorf("--batch-records, --batch-interval and --call-timeout must be positive, --max-records not negative")
			}
			stall, err := stallTimeout(c)
			if err != nil {
				return err
			}
			k, err := parseKafka(c)
			if err != nil {
				return err
			}
			if err := checkProps(k.brokers, k.props, replay.ProducerClient, replay.ConsumerClient); err != nil {
				return err
			}
			prog, err := newProgress(c, k.log)
			if err != nil {
				return err
			}
			sum, err := copier.Run(c.Context, copier.Config{
				Brokers: k.brokers, Props: k.props, From: c.String("from"), To: c.String("to"),
				Group: c.String("group"), TransactionalID: c.String("transactional-id"),
				BatchRecords: c.Int("batch-records"), BatchInterval: c.Duration("batch-interval"),
				MaxRecords: c.Int64("max-records"), Follow: c.Bool("follow"), Abort: c.Bool("abort"),
				Repartition: c.Bool("repartition"), StallTimeout: stall,
				CallTimeout: c.Duration("call-timeout"), Log: k.log,
				Progress: prog.Update, ProgressInterval: prog.Tick(),
			})
			endProgress(prog, err)
			line, _ := json.Marshal(sum)
			fmt.Fprintln(stdoutOf(c), string(line))
			if errors.Is(err, copier.ErrBadDestination) {
				return &usageError{msg: err.Error(), hint: "create the destination with enough partitions, or add --repartition"}
			}
			return err
		},
	}
}

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:      "verify",
		Usage:     "check that a copy is complete and duplicate-free",
		UsageText: "kmaterialize verify --brokers HOST:PORT --from TOPIC --to TOPIC [--by value]",
		Description: `Reads both topics to their end offsets (captured at start) with
read_committed and compares them as multisets of records (key, value and
headers; --by value compares values only): every source record must be in the
destination as often as in the source. Prints the missing and duplicated
counts with a few examples (partition and offset on each side), as JSON on
stdout, and exits 0 when both are zero, 3 otherwise.

Progress goes to stderr, the source's partitions then the destination's
(--progress).

Examples:
  $ kmaterialize verify --brokers localhost:9092 --from ledger --to ledger-copy
  $ kmaterialize verify --brokers localhost:9092 --from ledger --to ledger-copy --by value
  $ kmaterialize verify --brokers localhost:9092 --from ledger --to ledger-copy -F client.properties --progress off`,
		Flags: []cli.Flag{
			configFlag(), brokersFlag(),
			&cli.StringFlag{Name: "from", Usage: "source `TOPIC`"},
			&cli.StringFlag{Name: "to", Usage: "destination `TOPIC`"},
			&cli.StringFlag{Name: "by", Value: "record", Usage: "record (key, value and headers) or value"},
			&cli.IntFlag{Name: "examples", Value: 5, Usage: "examples shown per kind"},
			stallFlag(), propsFlag(), progressIntervalFlag(),
		},
		Action: runVerify,
	}
}
