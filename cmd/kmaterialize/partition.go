package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/partition"
	"github.com/kmaterialize/kmaterialize/replay"
)

func partitionCommand() *cli.Command {
	return &cli.Command{
		Name:  "partition",
		Usage: "print the partition a producer's partitioner writes each key to",
		UsageText: "kmaterialize partition --partitioner NAME (--partitions N | --brokers HOST:PORT --topic TOPIC) [--base64] KEY...\n" +
			"kmaterialize partition --table TABLE (--socket PATH | --db FILE) [--base64] KEY...",
		Description: `Prints "KEY<TAB>PARTITION" for each KEY: the partition a producer using
--partitioner writes a record with that key to, computed as the producer
computes it from the key's bytes (the argument's UTF-8 bytes, or its base64
decoding with --base64, printed as given). Nothing is written or read but,
with --topic, the topic's metadata for its partition count.

With --table, the daemon (kmaterialize serve) that serves TABLE answers
instead, by the table's configured partitioner and the partition count its
checkpoint recorded (GET /v1/tables/TABLE/partition): --socket names the
daemon, or --db the database it holds; the file alone is not read. A table
without a partitioner, or a key it does not place, is exit 2; a table over
a subset of partitions whose topic's partition count changed is exit 3.

Partitioners (see docs/shards.md):
  murmur2      Kafka's Java producer, franz-go, librdkafka's murmur2_random
  consistent   CRC-32: librdkafka's default (consistent_random)
  fnv1a        librdkafka's fnv1a_random (Sarama's default hash)
librdkafka's names murmur2_random, consistent_random and fnv1a_random are
accepted too. An empty key ("") has no partition under consistent
(consistent_random spreads it): exit 2, as for an unknown partitioner or a
partition count below 1.

Examples:
  $ kmaterialize partition --partitioner murmur2 --partitions 12 acct-1 acct-2
  $ kmaterialize partition --partitioner consistent --brokers localhost:9092 --topic account-balances acct-1
  $ kmaterialize partition --partitioner fnv1a --partitions 6 --base64 AAEC/w==
  $ kmaterialize partition --table account-balances --socket /run/kmaterialize/tables.sock acct-1`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "partitioner", Usage: "the producers' `NAME`: " + partition.Names()},
			&cli.StringFlag{Name: "table", Usage: "ask the daemon for table `NAME`'s partitioner and partition count (instead of --partitioner)"},
			socketFlag(), dbFlag(false),
			&cli.IntFlag{Name: "partitions", Usage: "the topic's partition count `N`", DefaultText: "none"},
			brokersFlag(),
			&cli.StringFlag{Name: "topic", Aliases: []string{"t"}, Usage: "read the partition count of Kafka `TOPIC` (instead of --partitions)"},
			propsFlag(), stallFlag(),
			&cli.BoolFlag{Name: "base64", Usage: "the KEYs are base64 (standard, padded)"},
		},
		Action: func(c *cli.Context) error {
			if c.IsSet("table") {
				return partitionsOfTable(c)
			}
			o, err := partitionOptionsOf(c)
			if err != nil {
				return err
			}
			if o.topic != "" {
				if o.partitions, err = topicPartitions(c, o.topic); err != nil {
					return err
				}
			}
			return o.run(c)
		},
	}
}

// partitionOptions are partition's flags and arguments, validated.
type partitionOptions struct {
	p          partition.Partitioner
	partitions int32 // 0 until read from topic's metadata
	topic      string
	args       []string // as given, printed
	keys       [][]byte // the bytes hashed
}

func partitionOptionsOf(c *cli.Context) (partitionOptions, error) {
	var o partitionOptions
	var err error
	if !c.IsSet("partitioner") {
		return o, &usageError{msg: "--partitioner is required (or --table, to ask the daemon)", hint: "kmaterialize partition --partitioner murmur2 --partitions 12 KEY, or --table TABLE --socket PATH to ask the daemon"}
	}
	for _, f := range []string{"socket", "db"} {
		if c.IsSet(f) {
			return o, &usageError{msg: "--" + f + " without --table", hint: "kmaterialize partition --table TABLE --" + f + " ... KEY asks the daemon"}
		}
	}
	if o.p, err = partition.Parse(c.String("partitioner")); err != nil {
		return o, &usageError{msg: "--partitioner: " + err.Error(), hint: "--partitioner murmur2 (Java and franz-go producers) or consistent (librdkafka's default)"}
	}
	o.topic = c.String("topic")
	switch {
	case o.topic != "" && c.IsSet("partitions"):
		return o, &usageError{msg: "--partitions and --topic both given", hint: "--partitions N, or --brokers HOST:PORT --topic TOPIC to read N from the topic"}
	case o.topic == "" && !c.IsSet("partitions"):
		return o, &usageError{msg: "--partitions or --topic is required", hint: "kmaterialize partition --partitioner murmur2 --partitions 12 KEY"}
	case o.topic == "":
		n := c.Int("partitions")
		if n < 1 || n > math.MaxInt32 {
			return o, usageErrorf("--partitions %d: %v", n, partition.ErrBadPartitionCount)
		}
		o.partitions = int32(n)
	}
	o.args, o.keys, err = partitionKeys(c, "kmaterialize partition --partitioner murmur2 --partitions 12 acct-1")
	return o, err
}

// partitionKeys are the KEY arguments as given and their bytes.
func partitionKeys(c *cli.Context, example string) (args []string, keys [][]byte, err error) {
	args = c.Args().Slice()
	if len(args) == 0 {
		return nil, nil, &usageError{msg: "no KEY given", hint: example}
	}
	for _, a := range args {
		k := []byte(a)
		if c.Bool("base64") {
			if k, err = base64.StdEncoding.DecodeString(a); err != nil {
				return nil, nil, usageErrorf("key %q is not base64: %v", a, err)
			}
		}
		keys = append(keys, k)
	}
	return args, keys, nil
}

// partitionsOfTable asks the daemon for each key's partition in --table,
// all before printing any, so that a refused key prints nothing.
func partitionsOfTable(c *cli.Context) error {
	for _, f := range []string{"partitioner", "partitions", "topic", "brokers"} {
		if c.IsSet(f) {
			return &usageError{msg: "--" + f + " and --table both given",
				hint: "--table asks the daemon, which knows the table's partitioner and partition count; --partitioner computes without one"}
		}
	}
	table := c.String("table")
	args, keys, err := partitionKeys(c, "kmaterialize partition --table "+table+" --socket PATH acct-1")
	if err != nil {
		return err
	}
	var b strings.Builder
	routed, err := viaDaemon(c, func(d *daemon) error {
		for i, k := range keys {
			kp, err := d.cl.Partition(c.Context, table, k)
			if err != nil {
				return partitionFailed(d, err, table, args[i])
			}
			fmt.Fprintf(&b, "%s\t%d\n", args[i], kp.Partition)
		}
		return nil
	})
	if !routed {
		return &usageError{msg: "--table asks the daemon that serves the table, and none was found",
			hint: "give its --socket PATH (or KMATERIALIZE_SOCKET), or the --db FILE it holds; or compute it with --partitioner NAME --partitions N"}
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprint(stdoutOf(c), b.String())
	return err
}

// partitionFailed is the command's error for the daemon's refusal of
// key's partition: what cannot be answered for this table or key is bad
// usage, a repartitioned shard a conflict of data (it answers no key
// until it is rebuilt), the rest as every routed command maps it.
func partitionFailed(d *daemon, err error, table, key string) error {
	var ce *client.Error
	if !errors.As(err, &ce) {
		return d.fail(err, table)
	}
	switch ce.Code {
	case client.CodeNoPartitioner:
		return &daemonError{msg: d.answered(ce.Message), err: err, code: exitUsage,
			hint: "give the table its producers' partitioner (partitioner: in the daemon's config, docs/shards.md) and reload the daemon, or compute it with --partitioner NAME --partitions N"}
	case client.CodeKeyNoPartition:
		return &daemonError{msg: d.answered(fmt.Sprintf("key %q: %s", key, ce.Message)), err: err, code: exitUsage,
			hint: "kmaterialize partition --help (docs/shards.md: null and empty keys)"}
	case client.CodeRepartitioned:
		return &daemonError{msg: d.answered(ce.Message), err: err, code: exitConflict,
			hint: fmt.Sprintf("drop table %q and rebuild it (docs/shards.md: a sharded table needs a fixed partition count)", table)}
	}
	return d.fail(err, table)
}

// topicPartitions is topic's partition count from its metadata.
func topicPartitions(c *cli.Context, topic string) (int32, error) {
	stall, err := stallTimeout(c)
	if err != nil {
		return 0, err
	}
	k, err := parseKafka(c)
	if err != nil {
		return 0, err
	}
	if err := checkProps(k.brokers, k.props, replay.ConsumerClient); err != nil {
		return 0, err
	}
	plan, err := replay.Inspect(c.Context, replay.Config{Brokers: k.brokers, Topic: topic, Props: k.props, StallTimeout: stall, Log: k.log})
	if err != nil {
		return 0, err
	}
	return int32(len(plan.Partitions)), nil
}

// run computes every key's partition before printing any, so that a
// refused key prints nothing.
func (o partitionOptions) run(c *cli.Context) error {
	var b strings.Builder
	for i, k := range o.keys {
		p, err := o.p.Partition(k, o.partitions)
		if err != nil {
			return &usageError{msg: fmt.Sprintf("key %q: %v", o.args[i], err), hint: "kmaterialize partition --help (docs/shards.md: null and empty keys)"}
		}
		fmt.Fprintf(&b, "%s\t%d\n", o.args[i], p)
	}
	_, err := fmt.Fprint(stdoutOf(c), b.String())
	return err
}
