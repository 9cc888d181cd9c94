package serve

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/exportdoc"
	"github.com/kmaterialize/kmaterialize/store"
)

// rollback makes a kept generation of a table the published one
// (store.DB.Rollback): ?generation=G, or the newest kept one without it.
func (s *Server) rollback(w http.ResponseWriter, r *http.Request) {
	table, ok := tableParam(w, r)
	if !ok {
		return
	}
	if !checkParams(w, r, "generation") {
		return
	}
	gen, ok := generationParam(w, r, "generation")
	if !ok {
		return
	}
	if r.ContentLength > 0 {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "a rollback request carries no body")
		return
	}
	db := s.database(w)
	if db == nil {
		return
	}
	res, err := db.Rollback(table, gen)
	if err != nil {
		s.historyError(w, table, err)
		return
	}
	// Its positions may have gone back: the observer (feed.go) started a
	// new epoch of the table in the commit's wake.
	s.cfg.Log.Info().Str(keyTable, table).Uint64("from", res.From.Generation).Uint64("generation", res.To.Generation).
		Msg("rolled back: a kept generation is published again, the previous one kept")
	writeJSON(w, http.StatusOK, api.RollbackResult{Generation: res.To.Generation, From: res.From.Generation, Keys: res.To.Keys})
}

// diff sends the keys two generations of a table differ in as JSON lines
// (store.DB.Diff): ?from=G&to=G&limit=N&encoding=base64, spooled
// (spool.go) and counted as a heavy request (heavy.go). The
// X-Kmaterialize-Diff header says which generations were compared.
func (s *Server) diff(w http.ResponseWriter, r *http.Request) {
	table, ok := tableParam(w, r)
	if !ok {
		return
	}
	q, ok := parseDiff(w, r)
	if !ok {
		return
	}
	from, to, limit, b64 := q.from, q.to, q.limit, q.b64
	db := s.database(w)
	if db == nil {
		return
	}
	release, ok := s.heavySlot(w, fmt.Sprintf("diff of table %q", table))
	if !ok {
		return
	}
	defer release()
	// The whole answer is spooled, in Diff's one read transaction, before
	// the first byte (spool.go): a key that is not UTF-8 (without base64)
	// or an answer past spool_max_bytes is an error response, not a cut
	// stream, and memory holds a line at a time.
	sf, err := s.spool.create()
	if err != nil {
		s.readError(w, table, err)
		return
	}
	defer sf.close()
	rng, err := db.Diff(table, from, to, limit, func(c store.Change) error {
		line, err := exportdoc.DiffLine(c, b64)
		if err != nil {
			return err
		}
		_, err = sf.Write(line)
		return err
	})
	release()
	switch {
	case errors.Is(err, errSpoolFull):
		s.spoolFullError(w, fmt.Sprintf("the diff of table %q", table))
		return
	case errors.Is(err, exportdoc.ErrNotUTF8):
		writeError(w, http.StatusBadRequest, api.CodeNotUTF8, err.Error()+": ask with encoding=base64")
		return
	case err != nil:
		s.historyError(w, table, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set(api.HeaderDiff, fmt.Sprintf("%d..%d", rng.From, rng.To))
	if err := sf.send(w); err != nil {
		s.cfg.Log.Warn().Err(err).Str(keyTable, table).Msg("diff aborted mid-response")
		panic(http.ErrAbortHandler)
	}
}

// diffQuery is the query of GET .../diff.
type diffQuery struct {
	from, to uint64 // 0: absent
	limit    int    // 0: no limit
	b64      bool
}

// parseDiff reads the diff's query, or answers 400.
func parseDiff(w http.ResponseWriter, r *http.Request) (diffQuery, bool) {
	var q diffQuery
	if !checkParams(w, r, "from", "to", "limit", "encoding") {
		return q, false
	}
	var ok bool
	if q.from, ok = generationParam(w, r, "from"); !ok {
		return q, false
	}
	if q.to, ok = generationParam(w, r, "to"); !ok {
		return q, false
	}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, api.CodeBadLimit, fmt.Sprintf("limit %q: want a number, 0 or more", v))
			return q, false
		}
		q.limit = n
	}
	b64, err := parseEncoding(r.URL.Query().Get("encoding"))
	if err != nil {
		writeError(w, http.StatusBadRequest, api.CodeBadEncoding, err.Error())
		return q, false
	}
	q.b64 = b64
	return q, true
}

// generationParam reads an optional generation number parameter (0 when
// absent), or answers 400.
func generationParam(w http.ResponseWriter, r *http.Request, name string) (uint64, bool) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, true
	}
	g, err := strconv.ParseUint(v, 10, 64)
	if err != nil || g == 0 {
		writeError(w, http.StatusBadRequest, api.CodeBadGeneration, fmt.Sprintf("%s %q: want a generation number", name, v))
		return 0, false
	}
	return g, true
}

// historyError answers a Rollback or Diff error.
func (s *Server) historyError(w http.ResponseWriter, table string, err error) {
	if errors.Is(err, store.ErrGenerationNotFound) {
		writeError(w, http.StatusNotFound, api.CodeGenerationNotFound, err.Error())
		return
	}
	s.readError(w, table, err)
}
