package tableview_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/internal/tableview"
	"github.com/kmaterialize/kmaterialize/store"
)

// TestShardOf: a table is a subset when its stored definition names
// partitions or its checkpoint says so, with the checkpoint's count of the
// topic and the definition's partitioner; a table over all partitions
// holds its checkpoint's; a definition that is not JSON is ErrCorrupt.
func TestShardOf(t *testing.T) {
	cp := checkpoint.Checkpoint{Topic: "e", PartitionsOfTopic: 4,
		Partitions: []checkpoint.Partition{{Partition: 1}, {Partition: 3}}}
	subsetCP := cp
	subsetCP.Subset = true
	for _, tc := range []struct {
		name string
		spec string
		cp   checkpoint.Checkpoint
		want api.Shard
	}{
		{"stored definition", `{"topic":"e","partitions":[1,3],"partitioner":"murmur2"}`, cp,
			api.Shard{Subset: true, PartitionSet: []int32{1, 3}, PartitionsOfTopic: 4, Partitioner: "murmur2"}},
		{"definition's set over the checkpoint's", `{"topic":"e","partitions":[1,2,3]}`, subsetCP,
			api.Shard{Subset: true, PartitionSet: []int32{1, 2, 3}, PartitionsOfTopic: 4}},
		{"checkpoint only", "", subsetCP, api.Shard{Subset: true, PartitionSet: []int32{1, 3}, PartitionsOfTopic: 4}},
		{"all partitions", `{"topic":"e","partitioner":"fnv1a"}`, cp,
			api.Shard{PartitionSet: []int32{1, 3}, PartitionsOfTopic: 4, Partitioner: "fnv1a"}},
		{"no checkpoint", `{"topic":"e"}`, checkpoint.Checkpoint{}, api.Shard{PartitionSet: []int32{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tableview.ShardOf(store.TableMeta{Name: "t", Spec: []byte(tc.spec)}, tc.cp)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, *got); diff != "" {
				t.Errorf("ShardOf (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := tableview.ShardOf(store.TableMeta{Name: "t", Spec: []byte("{")}, cp); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("ShardOf of a damaged definition = %v, want store.ErrCorrupt", err)
	}
}
