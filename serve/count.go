package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/store"
)

// rangeParams reads prefix=, from= (inclusive) and to= (exclusive): the
// rows a scan or a count covers, as `kmaterialize scan` selects them.
func rangeParams(v url.Values) store.Range {
	return store.Range{Prefix: []byte(v.Get("prefix")), From: []byte(v.Get("from")), To: []byte(v.Get("to"))}
}

// keyLine is a row's line on the rows route with keys_only=1: what
// `kmaterialize scan --keys-only --format jsonl` prints.
func keyLine(key string) []byte {
	line, _ := json.Marshal(struct {
		Key string `json:"key"`
	}{key})
	return append(line, '\n')
}

// countJSON is the body of GET .../count.
type countJSON struct {
	Count      int64  `json:"count"`
	Generation uint64 `json:"generation"`
}

// count answers the number of rows in a range of the published generation
// (GET /v1/tables/{table}/count?prefix=&from=&to=), from one read
// transaction.
func (s *Server) count(w http.ResponseWriter, r *http.Request) {
	table, ok := tableParam(w, r)
	if !ok {
		return
	}
	if !checkParams(w, r, "prefix", "from", "to", api.ParamMinPositions, api.ParamWait) {
		return
	}
	wq, ok := parseWaitQuery(w, r)
	if !ok {
		return
	}
	rng := rangeParams(r.URL.Query())
	db := s.database(w)
	if db == nil {
		return
	}
	var out countJSON
	var rs readState
	attempt := func() error {
		return db.ReadTable(table, func(snap *store.Snapshot) error {
			if err := rs.load(snap); err != nil {
				return err
			}
			if err := wq.check(table, rs); err != nil {
				return err
			}
			out.Generation = snap.Meta.Generation
			var err error
			out.Count, err = snap.Count(rng)
			return err
		})
	}
	// A count reads its range in one transaction at disk speed (nothing
	// waits for the client): only the heavy-request limit applies. A
	// count that waits for min_positions takes its slot only once they
	// are reached: a waiting read holds nothing but its goroutine.
	var err error
	if wq.min != nil {
		err = s.readWhenReached(w, r, db, table, wq, func() error {
			return db.ReadTable(table, func(snap *store.Snapshot) error {
				if err := rs.load(snap); err != nil {
					return err
				}
				return wq.check(table, rs)
			})
		})
		if s.waitError(w, table, err) {
			return
		}
		if err != nil {
			s.readError(w, table, err)
			return
		}
	}
	release, ok := s.heavySlot(w, fmt.Sprintf("count of table %q", table))
	if !ok {
		return
	}
	defer release()
	// Positions never go back but by a rollback: a count whose positions
	// went back meanwhile answers 409 as any other that misses them.
	err = attempt()
	if s.waitError(w, table, err) {
		return
	}
	if err != nil {
		s.readError(w, table, err)
		return
	}
	s.setReadHeaders(w, table, rs)
	writeJSON(w, http.StatusOK, out)
}
