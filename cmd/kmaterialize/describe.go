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
		Usage:     "show a topic's partitions with retained low, high watermark, last stable offset and leader",
		UsageText: "kmaterialize describe --brokers HOST:PORT --topic TOPIC [--format text|json]",
		Description: `Read-only: lists partitions and offsets, and joins no group.

Examples:
  $ kmaterialize describe --brokers localhost:9092 --topic account-balances`,
		Flags: []cli.Flag{
			configFlag(), brokersFlag(), topicFlag(), propsFlag(), stallFlag(),
			formatFlag(),
		},
		Action: func(c *cli.Context) error {
			format, err := textOrJSON(c)
			if err != nil {
				return err
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
			if format == "json" {
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
