package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/partition"
)

// shardFlags are rebuild's flags of a table over a subset of its topic's
// partitions, and of the producers' partitioner (docs/shards.md): the
// config file's partitions: and partitioner:.
func shardFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "partitions", Usage: "read only the topic's partitions in `SET`, e.g. 0-5 or 0,2,4: the table is a shard of the topic (a partition the topic lacks is exit 2)",
			DefaultText: "all, or the config file's partitions"},
		&cli.StringFlag{Name: "partitioner", Usage: "the producers' partitioner `NAME` (" + partition.Names() + "), with which a key's partition is found; needs raw keys",
			DefaultText: "none, or the config file's partitioner"},
	}
}

// shardHelp is rebuild's help on --partitions and --partitioner.
const shardHelp = `
--partitions SET reads only those of the topic's partitions ("0-5", "0,2,4"):
the table is a shard of the topic, which update and follow keep to (a follow
never adds the topic's new partitions); a partition the topic lacks is exit 2.
--partitioner NAME (murmur2, consistent or fnv1a; librdkafka's murmur2_random,
consistent_random and fnv1a_random are the same) is the partitioner the topic's
producers use, with which the daemon finds a key's partition; producers hash
the serialized key bytes, so it needs --key-format raw (the default). Sharding by partition holds only while the partition count
is fixed: a shard whose topic has another count than it recorded is refused
(exit 3) until it is dropped and rebuilt. See docs/shards.md.`

// shardSpec reads --partitions and --partitioner into s, over the config
// file's partitions and partitioner when given. s's key format is already
// read: a partitioner needs raw keys.
func shardSpec(c *cli.Context, s *materialize.Spec) error {
	if c.IsSet("partitions") {
		ps, err := partition.ParseSet(c.String("partitions"))
		if err != nil {
			return &usageError{msg: fmt.Sprintf("--partitions %q: %v", c.String("partitions"), err),
				hint: "--partitions 0-5 or --partitions 0,2,4 (the topic's partitions the table holds)"}
		}
		s.Partitions = ps
	}
	if c.IsSet("partitioner") {
		p, err := partition.Parse(c.String("partitioner"))
		if err != nil {
			return &usageError{msg: "--partitioner: " + err.Error(), hint: "--partitioner murmur2 (Java's and franz-go's default) or --partitioner consistent (librdkafka's)"}
		}
		s.Partitioner = string(p)
	}
	if kf := s.KeyFormat; s.Partitioner != "" && kf != "" && kf != decode.Raw {
		// Either may come from the config file's table.
		what := "--partitioner " + s.Partitioner
		if !c.IsSet("partitioner") {
			what = "the config file's partitioner " + s.Partitioner
		}
		return &usageError{msg: fmt.Sprintf("%s with key format %s: producers hash the serialized key bytes, "+
			"and a table that decodes its keys stores them as canonical JSON, so a key's partition cannot be computed", what, kf),
			hint: "--key-format raw, or leave the partitioner out"}
	}
	return nil
}
