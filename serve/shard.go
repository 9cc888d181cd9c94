package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/checkpoint"
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

// storedShard is how the published generation covers its topic's
// partitions, as the file records it.
type storedShard struct {
	subset bool
	// set is the subset, or for a table over all partitions those of its
	// checkpoint; nil when not loaded (a key read of a table over all).
	set               []int32
	partitionsOfTopic int32
	partitioner       string
}

// loadShard reads how snap's table covers its topic's partitions. A key
// read (full false) of a table whose stored definition says it is over
// all partitions stops there: it needs nothing more, and the checkpoint is
// not read for it.
func loadShard(snap *store.Snapshot, full bool) (storedShard, error) {
	var spec struct {
		Partitions  []int32 `json:"partitions"`
		Partitioner string  `json:"partitioner"`
	}
	m := snap.Meta
	if len(m.Spec) > 0 {
		if err := json.Unmarshal(m.Spec, &spec); err != nil {
			return storedShard{}, fmt.Errorf("table %q: stored definition: %w: %v", m.Name, store.ErrCorrupt, err)
		}
	}
	st := storedShard{subset: spec.Partitions != nil, partitioner: spec.Partitioner}
	if !full && len(m.Spec) > 0 && !st.subset {
		return st, nil
	}
	cp, ok, err := checkpoint.Load(snap.Tx, m.Name)
	if err != nil {
		return st, fmt.Errorf("checkpoint of table %q: %w", m.Name, err)
	}
	if ok {
		// A table built without a stored definition (by a program
		// that gave replay its partitions itself) is a subset when
		// its checkpoint says so.
		st.subset = st.subset || cp.Subset
		st.partitionsOfTopic = cp.PartitionsOfTopic
		if spec.Partitions == nil {
			st.set = make([]int32, len(cp.Partitions))
			for i, p := range cp.Partitions {
				st.set[i] = p.Partition
			}
		}
	}
	if spec.Partitions != nil {
		st.set = slices.Clone(spec.Partitions)
	}
	if st.set == nil {
		st.set = []int32{}
	}
	return st, nil
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

// shard is table's api.Shard (s.shardStateOf(table).shard(st)).
func (s *Server) shard(table string, st *storedShard) *api.Shard {
	return s.shardStateOf(table).shard(st)
}

// shard is the api.Shard of what the published generation holds (st;
// nil while nothing is published: then the configured definition's),
// with the configured partitioner, and whether the daemon has seen the
// topic with another partition count than the one recorded.
func (ss shardState) shard(st *storedShard) *api.Shard {
	out := &api.Shard{PartitionSet: []int32{}}
	if st != nil {
		out.Subset, out.PartitionSet, out.PartitionsOfTopic, out.Partitioner = st.subset, st.set, st.partitionsOfTopic, st.partitioner
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
