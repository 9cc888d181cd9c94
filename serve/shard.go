package serve

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/internal/tableview"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/partition"
	"github.com/kmaterialize/kmaterialize/store"
)

// A table over a subset of its topic's partitions is a shard
// (docs/shards.md): it holds only the keys its partitions hold, so a key
// it lacks may be in another daemon's shard. Its answers say so: every
// table answer carries api.Shard, a key read of a key whose partition it
// does not hold is 421 key_not_here (never a 404 that a cluster client
// would take for "absent"), and once its topic's partition count changed
// its keys may be anywhere, so key reads are 409 repartitioned until the
// table is dropped and rebuilt. A table over all partitions answers as it
// always has.
//
// What the table holds is what its published generation was built by: the
// stored definition's partitions and the checkpoint's record of the
// topic's partition count, read in the answer's own transaction. The
// partitioner is the configured one when there is one (it says how the
// producers place keys, which a rebuild does not change), else the stored
// one.

// loadWithShard is rs.load that also returns how snap's table covers its
// topic's partitions as the file records it (tableview.ShardOf), from the
// one read of its checkpoint.
func (rs *readState) loadWithShard(snap *store.Snapshot) (*api.Shard, error) {
	cp, ok, err := checkpoint.Load(snap.Tx, snap.Meta.Name)
	if err != nil {
		return nil, fmt.Errorf("table %q: positions: %w", snap.Meta.Name, err)
	}
	rs.gen, rs.positions = snap.Meta.Generation, nil
	if ok {
		rs.positions = make(api.Positions, len(cp.Partitions))
		for _, p := range cp.Partitions {
			rs.positions[p.Partition] = p.End
		}
	}
	return tableview.ShardOf(snap.Meta, cp)
}

// shardState is what the daemon itself knows of a table's shard: the
// configured definition, and the newest failure that said the topic's
// partition count changed. It is taken under Server.mu, before a key
// read's transaction: the transaction then takes no lock.
type shardState struct {
	configured  *materialize.Spec // nil: not configured with one
	repartition *materialize.RepartitionedError
}

// shardStateOf reads table's shardState.
func (s *Server) shardStateOf(table string) shardState {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out shardState
	if def, ok := s.tables[table]; ok {
		out.configured = def.Spec
	}
	if rs := s.runs[table]; rs != nil {
		out.repartition = rs.repartition
	}
	return out
}

// shard is table's api.Shard (s.shardStateOf(table).shard(stored)).
func (s *Server) shard(table string, stored *api.Shard) *api.Shard {
	return s.shardStateOf(table).shard(stored)
}

// shard is the api.Shard of what the published generation holds (stored,
// as the file records it; nil while nothing is published: then the
// configured definition's), with the configured partitioner, and whether
// the daemon has seen the topic with another partition count than the
// one recorded.
func (ss shardState) shard(stored *api.Shard) *api.Shard {
	out := &api.Shard{PartitionSet: []int32{}}
	if stored != nil {
		c := *stored
		out = &c
	} else if ss.configured != nil && ss.configured.Partitions != nil {
		out.Subset, out.PartitionSet = true, slices.Clone(ss.configured.Partitions)
	}
	if ss.configured != nil && ss.configured.Partitioner != "" {
		out.Partitioner = ss.configured.Partitioner
	}
	if live := ss.liveCount(); out.Subset && live != 0 && live != out.PartitionsOfTopic {
		out.Repartitioned, out.LiveCount = true, live
	}
	return out
}

// liveCount is the topic's partition count as the daemon last saw it
// live, 0 when it has not: a shard's follower stops, and its rebuilds and
// updates fail, with a *materialize.RepartitionedError once the topic's
// count differs from the checkpoint's (materialize reads it from the live
// marks, replay.LiveMarks.PartitionsOfTopic); runState.noteFailure keeps
// the newest. A table dropped and rebuilt since records that count: the
// shard compares it with its own.
func (ss shardState) liveCount() int32 {
	if ss.repartition == nil {
		return 0
	}
	return ss.repartition.Now
}

// keyPlace is where a key read stands with a table's shard.
type keyPlace int

const (
	keyMayBeHere   keyPlace = iota // read it: a table over all, or a key of the set
	keyPartial                     // read it; absent, it may be in another shard (no partitioner)
	keyNotHere                     // its partition is not in the set: 421
	keyRepartition                 // the topic's count changed: 409
)

// place says where key stands with sh, and its partition when
// sh's partitioner placed it.
func place(sh *api.Shard, key []byte) (keyPlace, int32) {
	switch {
	case !sh.Subset:
		return keyMayBeHere, 0
	case sh.Repartitioned:
		return keyRepartition, 0
	case sh.Partitioner == "" || sh.PartitionsOfTopic < 1:
		return keyPartial, 0
	}
	p, err := partition.Partitioner(sh.Partitioner).Partition(key, sh.PartitionsOfTopic)
	if err != nil {
		// A key the producers do not hash (an empty key under
		// consistent) has no partition: where it is, is unknown.
		return keyPartial, 0
	}
	if _, held := slices.BinarySearch(sh.PartitionSet, p); held {
		return keyMayBeHere, p
	}
	return keyNotHere, p
}

// keyElsewhere answers a key read whose key this shard cannot answer for,
// and returns true: 421 key_not_here with the key's partition, 409
// repartitioned, or, for an absent key of a shard without a partitioner,
// 404 key_not_found marked partial (HeaderPartial) with the partition set.
func keyElsewhere(w http.ResponseWriter, table string, key []byte, found bool, sh *api.Shard, where keyPlace, part int32) bool {
	switch {
	case where == keyNotHere:
		writeJSON(w, http.StatusMisdirectedRequest, api.ErrorBody{Code: api.CodeKeyNotHere, Partition: &part, PartitionSet: sh.PartitionSet,
			Error: fmt.Sprintf("key %q of table %q is in partition %d under partitioner %s (of %d); this daemon holds partitions %s: ask one that holds it",
				key, table, part, sh.Partitioner, sh.PartitionsOfTopic, partition.FormatSet(sh.PartitionSet))})
	case where == keyRepartition:
		writeError(w, http.StatusConflict, api.CodeRepartitioned, repartitionedMessage(table, sh))
	case where == keyPartial && !found:
		w.Header().Set(api.HeaderPartial, "true")
		writeJSON(w, http.StatusNotFound, api.ErrorBody{Code: api.CodeKeyNotFound, PartitionSet: sh.PartitionSet,
			Error: (&store.KeyNotFoundError{Table: table, Key: key}).Error() + fmt.Sprintf(
				" in partitions %s; the table has no partitioner, so the key may be in another daemon's partitions", partition.FormatSet(sh.PartitionSet))})
	default:
		return false
	}
	return true
}

// repartitionedMessage says why a repartitioned shard refuses key reads.
func repartitionedMessage(table string, sh *api.Shard) string {
	return fmt.Sprintf("table %q holds partitions %s of a topic of %d partitions, which now has %d: its keys may no longer be in the partition their hash names, "+
		"so it answers no key reads; drop the table and rebuild it (docs/shards.md: a sharded table needs a fixed partition count)",
		table, partition.FormatSet(sh.PartitionSet), sh.PartitionsOfTopic, sh.LiveCount)
}
