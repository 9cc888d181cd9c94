package serve

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/partition"
	"github.com/kmaterialize/kmaterialize/store"
)

// partitionQuery is GET .../partition's parsed query: the key's bytes.
type partitionQuery struct {
	key []byte
}

// parsePartitionQuery reads key= (required; its bytes as given, or
// base64, standard and padded, with encoding=base64) and encoding=. The
// empty key is a key (key=): the partitioner says whether it has a
// partition.
func parsePartitionQuery(w http.ResponseWriter, r *http.Request) (partitionQuery, bool) {
	var q partitionQuery
	if !checkParams(w, r, "key", "encoding") {
		return q, false
	}
	v := r.URL.Query()
	b64, err := parseEncoding(v.Get("encoding"))
	if err != nil {
		writeError(w, http.StatusBadRequest, api.CodeBadEncoding, err.Error())
		return q, false
	}
	ks, ok := v["key"]
	if !ok || len(ks) != 1 {
		writeError(w, http.StatusBadRequest, api.CodeBadKey, "give the key once, as key= (percent-encoded; base64 with encoding=base64)")
		return q, false
	}
	q.key = []byte(ks[0])
	if b64 {
		if q.key, err = base64.StdEncoding.DecodeString(ks[0]); err != nil {
			writeError(w, http.StatusBadRequest, api.CodeBadKey, fmt.Sprintf("key %q is not base64 (standard, padded): %v", ks[0], err))
			return q, false
		}
	}
	return q, true
}

// keyPartition answers GET /v1/tables/{table}/partition?key=K: the
// partition the table's partitioner puts K in, and whether this daemon's
// table holds it (api.KeyPartition). It needs the published table's
// record of its topic's partition count: a table not published yet is
// answered as a read of it is (503 while it is built).
func (s *Server) keyPartition(w http.ResponseWriter, r *http.Request) {
	table, ok := tableParam(w, r)
	if !ok {
		return
	}
	q, ok := parsePartitionQuery(w, r)
	if !ok {
		return
	}
	db := s.database(w)
	if db == nil {
		return
	}
	var rs readState
	var stored *api.Shard
	err := db.ReadTable(table, func(snap *store.Snapshot) error {
		var err error
		stored, err = rs.loadWithShard(snap)
		return err
	})
	if err != nil {
		s.readError(w, table, err)
		return
	}
	s.setReadHeaders(w, table, rs)
	sh := s.shard(table, stored)
	n := sh.PartitionsOfTopic
	if n < 1 && !sh.Subset {
		// A table over all partitions checkpointed before the count
		// was recorded holds every partition its capture saw.
		n = int32(len(sh.PartitionSet))
	}
	switch {
	case sh.Partitioner == "":
		writeError(w, http.StatusBadRequest, api.CodeNoPartitioner, fmt.Sprintf(
			"table %q has no partitioner: configure the producers' (partitioner: %s) to find a key's partition (docs/shards.md)", table, partition.Names()))
		return
	case sh.Repartitioned:
		writeError(w, http.StatusConflict, api.CodeRepartitioned, repartitionedMessage(table, sh))
		return
	case n < 1:
		writeError(w, http.StatusBadRequest, api.CodeNoPartitioner, fmt.Sprintf(
			"table %q does not record its topic's partition count (built before it was recorded): rebuild it to find a key's partition", table))
		return
	}
	p, err := partition.Partitioner(sh.Partitioner).Partition(q.key, n)
	if errors.Is(err, partition.ErrNoPartition) {
		writeError(w, http.StatusBadRequest, api.CodeKeyNoPartition, fmt.Sprintf("key %q under partitioner %s: %v", q.key, sh.Partitioner, err))
		return
	}
	if err != nil {
		s.readError(w, table, fmt.Errorf("table %q: partitioner %q: %w", table, sh.Partitioner, err))
		return
	}
	_, held := slices.BinarySearch(sh.PartitionSet, p)
	writeJSON(w, http.StatusOK, api.KeyPartition{Table: table, Partitioner: sh.Partitioner, PartitionsOfTopic: n, Partition: p, Held: held})
}
