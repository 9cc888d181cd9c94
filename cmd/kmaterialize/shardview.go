package main

import (
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/internal/tableview"
	"github.com/kmaterialize/kmaterialize/partition"
	"github.com/kmaterialize/kmaterialize/store"
)

// storedShard is how the table whose metadata is m covers its topic's
// partitions, read in tx from the file alone (tableview.ShardOf).
func storedShard(tx *bolt.Tx, m store.TableMeta) (*api.Shard, error) {
	cp, _, err := checkpoint.Load(tx, m.Name)
	if err != nil {
		return nil, fmt.Errorf("checkpoint of table %q: %w", m.Name, err)
	}
	return tableview.ShardOf(m, cp)
}

// shardText says how a table covers its topic in `tables`: the partition
// set, of how many ("1,3 of the topic's 4: a subset"), "" for a table over
// all its topic's partitions (the partitions line says which).
func shardText(sh *api.Shard) string {
	if sh == nil || !sh.Subset {
		return ""
	}
	of := "the topic's partitions"
	if sh.PartitionsOfTopic > 0 {
		of = fmt.Sprintf("the topic's %d", sh.PartitionsOfTopic)
	}
	return fmt.Sprintf("%s of %s (a subset: docs/shards.md)", partition.FormatSet(sh.PartitionSet), of)
}
