package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/kmaterialize/kmaterialize/api"
)

// Shards (docs/shards.md): how a table covers its topic's partitions
// (Table.Shard), and a key's partition.
type (
	// Shard is which of its topic's partitions a table holds, and its
	// partitioner.
	Shard = api.Shard
	// KeyPartition is the partition a table's partitioner puts a key in,
	// and whether the daemon's table holds it.
	KeyPartition = api.KeyPartition
)

// Partition returns the partition table's partitioner puts key in (GET
// /v1/tables/{table}/partition?key=K), computed by the daemon from the
// table's partitioner and its record of the topic's partition count. A
// table without a partitioner is an *Error with CodeNoPartitioner, a key
// the partitioner does not place (the empty key under consistent)
// CodeKeyNoPartition, a shard whose topic's partition count changed
// CodeRepartitioned.
func (c *Client) Partition(ctx context.Context, table string, key []byte) (KeyPartition, error) {
	var out KeyPartition
	path := tablePath(table, "/partition")
	resp, err := c.do(ctx, http.MethodGet, path, url.Values{"key": {string(key)}})
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	err = decode(resp, http.MethodGet, path, &out)
	return out, err
}
