package materialize

import (
	"errors"
	"fmt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// ErrRepartitioned is returned (as a *RepartitionedError) by a rebuild, an
// update or a follower of a table over a subset of its topic's partitions
// (a shard) when the topic now has another partition count than the one
// the table's checkpoint recorded. Producers place a key by hashing it
// modulo the count: after the change, keys written before it stay in
// their old partitions and new records of the same key go elsewhere, so
// no shard's partition set says any more where a key is. Nothing is read
// or published; the table keeps serving its rows, and the daemon refuses
// its key reads. A table over all partitions is not a shard and keeps
// working (a follower reads the new partitions). To shard the topic again,
// drop the table and rebuild it (docs/shards.md).
var ErrRepartitioned = errors.New("the topic's partition count changed under a sharded table")

// RepartitionedError names the table, its topic and both counts. It
// matches ErrRepartitioned.
type RepartitionedError struct {
	Op       string // OpUpdate, OpFollow, OpCatchUp or "rebuild"
	Table    string
	Topic    string
	Recorded int32 // the count in the table's checkpoint
	Now      int32 // the topic's count now
}

// Error returns e.g. `follow of table "balances-0" from topic "balances":
// the topic has 8 partitions, the table's checkpoint 4: ...`.
func (e *RepartitionedError) Error() string {
	op := e.Op
	if op == "" {
		op = OpUpdate
	}
	return fmt.Sprintf("%s of table %q from topic %q: the topic has %d partitions, the table's checkpoint %d: "+
		"the table holds a subset of the partitions, and keys written before the change are no longer where "+
		"the partitioner places them; its key reads are refused: drop the table and rebuild it (a sharded table needs a fixed partition count)",
		op, e.Table, e.Topic, e.Now, e.Recorded)
}

// Is reports whether target is ErrRepartitioned.
func (e *RepartitionedError) Is(target error) bool { return target == ErrRepartitioned }

// Repartitioned reports whether a topic of now partitions no longer fits
// checkpoint cp of a shard: cp holds a subset, recorded a count, and now
// (known, > 0) is another. A table over all partitions, or one whose
// count is unknown (built before it was recorded), is never repartitioned.
func Repartitioned(cp checkpoint.Checkpoint, now int32) bool {
	return cp.Subset && cp.PartitionsOfTopic > 0 && now > 0 && now != cp.PartitionsOfTopic
}

// checkRepartition refuses, for op, a plan whose topic count no longer
// fits the shard checkpoint cp.
func checkRepartition(op, table string, cp checkpoint.Checkpoint, plan replay.Plan) error {
	if !Repartitioned(cp, plan.PartitionsOfTopic) {
		return nil
	}
	return &RepartitionedError{Op: op, Table: table, Topic: plan.Topic, Recorded: cp.PartitionsOfTopic, Now: plan.PartitionsOfTopic}
}

// rebuildCheck is a shard's rebuild's replay.Config.Check: a table
// published as a shard whose topic's count changed is not rebuilt over the
// new count (its keys' placement before the change is unknown) until it is
// dropped. check, if set, runs after.
func rebuildCheck(db *store.DB, table string, check func(replay.Plan) error) (func(replay.Plan) error, error) {
	_, cp, ok, err := loadState(db, table)
	switch {
	case errors.Is(err, store.ErrTableNotFound):
		return check, nil
	case err != nil:
		return nil, err
	case !ok || !cp.Subset:
		return check, nil
	}
	return func(plan replay.Plan) error {
		if err := checkRepartition("rebuild", table, cp, plan); err != nil {
			return err
		}
		if check != nil {
			return check(plan)
		}
		return nil
	}, nil
}
