package tableview

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/store"
)

// ShardOf is how the table whose metadata is m and checkpoint cp covers
// its topic's partitions, as far as the file says (a daemon adds
// Repartitioned and LiveCount): a subset when its stored definition names
// partitions (materialize.Spec.Partitions) or its checkpoint says so, with
// the topic's partition count the checkpoint recorded, and the
// partitioner of its definition. The partition set is the subset, or for
// a table over all partitions those of its checkpoint. A stored
// definition that is not JSON is store.ErrCorrupt.
func ShardOf(m store.TableMeta, cp checkpoint.Checkpoint) (*api.Shard, error) {
	// The two fields of the stored materialize.Spec (by its JSON tags)
	// that say how the table is sharded; a table stored before they
	// existed has neither. (Not materialize.Spec itself: materialize imports
	// exportdoc, which uses this.)
	var def struct {
		Partitions  []int32 `json:"partitions"`
		Partitioner string  `json:"partitioner"`
	}
	if len(m.Spec) > 0 {
		if err := json.Unmarshal(m.Spec, &def); err != nil {
			return nil, fmt.Errorf("table %q: stored definition: %w: %v", m.Name, store.ErrCorrupt, err)
		}
	}
	sh := &api.Shard{Subset: cp.Subset || def.Partitions != nil, PartitionsOfTopic: cp.PartitionsOfTopic,
		Partitioner: def.Partitioner, PartitionSet: slices.Clone(def.Partitions)}
	if sh.PartitionSet == nil {
		sh.PartitionSet = make([]int32, 0, len(cp.Partitions))
		for _, p := range cp.Partitions {
			sh.PartitionSet = append(sh.PartitionSet, p.Partition)
		}
	}
	return sh, nil
}
