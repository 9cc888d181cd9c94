package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/replay"
)

func describeCommand() *cli.Command {
	return &cli.Command{
		Name:      "describe",
		Usage:     "show a topic's partitions with retained low, high watermark, last stable offset and leader, or a group's offsets and lag",
		UsageText: "kmaterialize describe --brokers HOST:PORT --topic TOPIC [--format text|json|jsonl]\n   kmaterialize describe --brokers HOST:PORT --group GROUP [--topic TOPIC] [--format text|json|jsonl]",
		Description: `Read-only: lists partitions and offsets, and joins no group.

With --group, shows the group's committed offset and lag (high watermark
minus committed offset) per partition: of --topic's partitions when given (a
partition the group has not committed on shows "-"), else of every topic the
group committed on. It asks for the group's offsets without joining,
committing to or changing the group, so it is safe on a live group. A group
with no committed offset (there, with --topic) exits 6.

Examples:
  $ kmaterialize describe --brokers localhost:9092 --topic account-balances
  $ kmaterialize describe --brokers localhost:9092 --group balance-service
  $ kmaterialize describe --brokers localhost:9092 --group balance-service --topic account-balances --format json`,
		Flags: []cli.Flag{
			configFlag(), brokersFlag(),
			&cli.StringFlag{Name: "topic", Aliases: []string{"t"}, Usage: "Kafka `TOPIC` (required without --group)"},
			&cli.StringFlag{Name: "group", Aliases: []string{"g"}, Usage: "show consumer group `GROUP`'s committed offsets and lag"},
			propsFlag(), stallFlag(),
			formatsFlag(formatText, formatText, formatJSON, formatJSONL),
		},
		Action: func(c *cli.Context) error {
			format, err := formatOf(c, formatText, formatJSON, formatJSONL)
			if err != nil {
				return err
			}
			if c.NArg() > 0 {
				return usageErrorf("unexpected argument %q", c.Args().First())
			}
			if c.String("topic") == "" && c.String("group") == "" {
				return &usageError{msg: "--topic or --group is required", hint: "kmaterialize describe --brokers HOST:PORT --topic TOPIC"}
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
			if group := c.String("group"); group != "" {
				return describeGroup(c, format, group, replay.Config{Brokers: k.brokers, Topic: c.String("topic"), Props: k.props,
					StallTimeout: stall, Log: k.log})
			}
			plan, err := replay.Inspect(c.Context, replay.Config{Brokers: k.brokers, Topic: c.String("topic"), Props: k.props,
				StallTimeout: stall, Log: k.log})
			if err != nil {
				return err
			}
			type row struct {
				Partition int32 `json:"partition"`
				Low       int64 `json:"low"`
				High      int64 `json:"high"`
				LSO       int64 `json:"lso"`
				Leader    int32 `json:"leader"`
			}
			rows := make([]row, len(plan.Partitions))
			for i, p := range plan.Partitions {
				rows[i] = row{p.Partition, p.Low, p.High, p.LSO, p.Leader}
			}
			if format == formatJSONL {
				enc := json.NewEncoder(stdoutOf(c))
				for _, r := range rows {
					if err := enc.Encode(r); err != nil {
						return err
					}
				}
				return nil
			}
			if format == formatJSON {
				return json.NewEncoder(stdoutOf(c)).Encode(struct {
					Topic      string `json:"topic"`
					Partitions []row  `json:"partitions"`
				}{plan.Topic, rows})
			}
			tw := tabwriter.NewWriter(stdoutOf(c), 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(tw, "partition\tlow\thigh\tlso\tleader\t\n")
			for _, r := range rows {
				fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t\n", r.Partition, r.Low, r.High, r.LSO, r.Leader)
			}
			return tw.Flush()
		},
	}
}

// describeGroup prints a group's committed offsets and lag.
func describeGroup(c *cli.Context, format, group string, cfg replay.Config) error {
	parts, err := replay.GroupLag(c.Context, cfg, group)
	if err != nil {
		return err
	}
	w := stdoutOf(c)
	switch format {
	case formatJSON:
		return json.NewEncoder(w).Encode(struct {
			Group      string                  `json:"group"`
			Partitions []replay.GroupPartition `json:"partitions"`
		}{group, parts})
	case formatJSONL:
		enc := json.NewEncoder(w)
		for _, p := range parts {
			if err := enc.Encode(struct {
				Group string `json:"group"`
				replay.GroupPartition
			}{group, p}); err != nil {
				return err
			}
		}
		return nil
	}
	fmt.Fprintf(w, "group %s\n", group)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "topic\tpartition\tcommitted\thigh\tlag\t\n")
	var total int64
	for _, p := range parts {
		committed, lag := "-", "-"
		if p.Committed != nil {
			committed = fmt.Sprint(*p.Committed)
		}
		if p.Lag != nil {
			lag = fmt.Sprint(*p.Lag)
			total += *p.Lag
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t\n", p.Topic, p.Partition, committed, p.High, lag)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "total lag: %d\n", total)
	return err
}
