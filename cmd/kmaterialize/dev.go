package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

func devCommand() *cli.Command {
	usage := func(_ *cli.Context, err error, _ bool) error { return usageErrorf("%v", err) }
	return &cli.Command{
		Name:         "dev",
		Usage:        "tools for trying kmaterialize out on one machine (not for production)",
		UsageText:    "kmaterialize dev broker [--port N] [--topic NAME[:PARTITIONS[:compact]]]... [--data-dir DIR]",
		OnUsageError: usage,
		Subcommands: []*cli.Command{{
			Name:      "broker",
			Usage:     "run the embedded Kafka-compatible broker (kfake) on loopback until Ctrl-C",
			UsageText: "kmaterialize dev broker [--port N] [--topic NAME[:PARTITIONS[:compact]]]... [--data-dir DIR]",
			Description: `Runs the Kafka-compatible broker that the demo and the tests use (kfake, built
into this binary) on 127.0.0.1, for as long as it runs: Ctrl-C (SIGINT) or
SIGTERM stops it, with exit 0. It prints its address and a line to paste into
other shells:

  export KMATERIALIZE_BROKERS=127.0.0.1:PORT

It is for trying things, not for production: one broker, no replication, no
authentication, not Apache Kafka. Without --data-dir its topics and records
are gone when it stops; with --data-dir they are kept there, and a broker
started again on the same directory has them.

Each --topic NAME[:PARTITIONS[:compact]] creates a topic (1 partition unless
given; compact sets cleanup.policy=compact). A topic already kept in
--data-dir must match what --topic says.

Examples:
  $ kmaterialize dev broker --topic orders:3 --topic accounts:1:compact
  $ kmaterialize dev broker --port 9092 --data-dir ~/.cache/kmaterialize-broker`,
			OnUsageError: usage,
			Flags: []cli.Flag{
				&cli.IntFlag{Name: "port", Usage: "loopback `PORT` to listen on (0: a free one)"},
				&cli.StringSliceFlag{Name: "topic", Usage: "create topic `NAME[:PARTITIONS[:compact]]` (repeatable)"},
				&cli.StringFlag{Name: "data-dir", Usage: "keep the broker's topics and records in `DIR` (default: memory only)"},
			},
			Action: runDevBroker,
		}},
	}
}

func runDevBroker(c *cli.Context) error {
	if c.NArg() > 0 {
		return &usageError{msg: fmt.Sprintf("unexpected argument %q", c.Args().First()), hint: "kmaterialize dev broker --help"}
	}
	o := localkafka.DevOptions{Port: c.Int("port"), DataDir: c.String("data-dir")}
	for _, spec := range c.StringSlice("topic") {
		t, err := localkafka.ParseDevTopic(spec)
		if err != nil {
			return &usageError{msg: err.Error(), hint: "kmaterialize dev broker --topic orders:3 --topic accounts:1:compact"}
		}
		o.Topics = append(o.Topics, t)
	}
	if o.Port < 0 || o.Port > 65535 {
		return usageErrorf("--port %d: want 0 (a free port) to 65535", o.Port)
	}
	b, err := localkafka.StartDev(o)
	if err != nil {
		if o.Port != 0 {
			return fmt.Errorf("dev broker on port %d: %w", o.Port, err)
		}
		return err
	}
	out, errw := stdoutOf(c), stderrOf(c)
	fmt.Fprintf(out, "Kafka-compatible broker (kfake, embedded) listening on %s\n", b.Addr)
	for _, t := range b.Created {
		fmt.Fprintf(out, "created topic %s\n", describeDevTopic(t))
	}
	for _, t := range b.Kept {
		fmt.Fprintf(out, "kept topic %s from %s\n", describeDevTopic(t), o.DataDir)
	}
	if o.DataDir != "" {
		fmt.Fprintf(out, "data kept in %s\n", o.DataDir)
	} else {
		fmt.Fprintln(out, "data in memory only: gone when the broker stops (--data-dir keeps it)")
	}
	fmt.Fprintln(out, "This broker is for trying kmaterialize out, not for production (one broker, no replication, no authentication). Ctrl-C stops it.")
	// The last line, so that a script can wait for it.
	fmt.Fprintf(out, "export KMATERIALIZE_BROKERS=%s\n", b.Addr)
	// Only a signal ends it (main's context): stdin is not its lifeline,
	// so it runs the same under nohup, systemd-run or `&`.
	<-c.Context.Done()
	b.Close()
	fmt.Fprintln(errw, "broker stopped")
	return nil
}

func describeDevTopic(t localkafka.DevTopic) string {
	s := fmt.Sprintf("%s (%d partition", t.Name, t.Partitions)
	if t.Partitions != 1 {
		s += "s"
	}
	if t.Compact {
		s += ", cleanup.policy=compact"
	}
	return s + ")"
}
