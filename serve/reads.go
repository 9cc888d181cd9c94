package serve

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/exportdoc"
	"github.com/kmaterialize/kmaterialize/store"
)

// HeaderGeneration names the generation that answered a read; HeaderMore
// is "true" on a rows page when rows follow its last one. api names them;
// kept here for the programs that import serve.
const (
	HeaderGeneration = api.HeaderGeneration
	HeaderMore       = api.HeaderMore
)

// Limits of the rows route.
const (
	DefaultRowsLimit = 1000
	MaxRowsLimit     = 10000
)

// readError answers a failed read: a table never published is 503 with
// Retry-After when the daemon builds it, 404 otherwise.
func (s *Server) readError(w http.ResponseWriter, table string, err error) {
	if errors.Is(err, store.ErrTableNotFound) {
		s.mu.Lock()
		_, configured := s.tables[table]
		s.mu.Unlock()
		if configured && s.buildFailed(w, table) {
			return
		}
		if configured {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
			writeError(w, http.StatusServiceUnavailable, api.CodeTableNotReady,
				fmt.Sprintf("table %q has not been published yet: its first build has not finished (see GET /v1/tables/%s)", table, table))
			return
		}
		writeError(w, http.StatusNotFound, api.CodeTableNotFound, err.Error())
		return
	}
	s.cfg.Log.Error().Err(err).Str(keyTable, table).Msg("read failed")
	writeError(w, http.StatusInternalServerError, api.CodeInternal, err.Error())
}

// names returns every table the file holds and every configured one, sorted.
func (s *Server) names(db *store.DB) ([]string, error) {
	metas, err := db.Tables()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, m := range metas {
		seen[m.Name] = true
		out = append(out, m.Name)
	}
	s.mu.Lock()
	for n := range s.tables {
		if !seen[n] {
			out = append(out, n)
		}
	}
	s.mu.Unlock()
	sortStrings(out)
	return out, nil
}

func (s *Server) listTables(w http.ResponseWriter, r *http.Request) {
	db := s.database(w)
	if db == nil {
		return
	}
	names, err := s.names(db)
	if err != nil {
		s.readError(w, "", err)
		return
	}
	out := struct {
		Tables []api.Table `json:"tables"`
	}{Tables: []api.Table{}}
	for _, n := range names {
		t, found, err := s.describe(db, n)
		if err != nil {
			s.readError(w, n, err)
			return
		}
		if found {
			out.Tables = append(out.Tables, t)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getTable(w http.ResponseWriter, r *http.Request) {
	table, ok := tableParam(w, r)
	if !ok {
		return
	}
	db := s.database(w)
	if db == nil {
		return
	}
	t, rs, found, err := s.describeAt(db, table)
	switch {
	case err != nil:
		s.readError(w, table, err)
	case !found:
		writeError(w, http.StatusNotFound, api.CodeTableNotFound, fmt.Sprintf("table %q is neither in the database nor configured (GET /v1/tables lists them)", table))
	default:
		s.setReadHeaders(w, table, rs)
		writeJSON(w, http.StatusOK, t)
	}
}

func (s *Server) getKey(w http.ResponseWriter, r *http.Request) {
	table, ok := tableParam(w, r)
	if !ok {
		return
	}
	key := []byte(r.PathValue("key"))
	if len(key) == 0 || len(key) > bolt.MaxKeySize {
		writeError(w, http.StatusBadRequest, api.CodeBadKey, fmt.Sprintf("a key has 1 to %d bytes, percent-encoded in the path", bolt.MaxKeySize))
		return
	}
	wq, ok := parseWaitQuery(w, r)
	if !ok {
		return
	}
	db := s.database(w)
	if db == nil {
		return
	}
	var rs readState
	var val []byte
	found := false
	var sh *api.Shard
	where, part := keyMayBeHere, int32(0)
	ss := s.shardStateOf(table)
	err := s.readWhenReached(w, r, db, table, wq, func() error {
		return db.ReadTable(table, func(snap *store.Snapshot) error {
			stored, err := rs.loadWithShard(snap)
			if err != nil {
				return err
			}
			sh = nil
			if where = keyMayBeHere; stored.Subset {
				// A key elsewhere is answered at once: no position
				// this shard reaches would bring it here.
				sh = ss.shard(stored)
				if where, part = place(sh, key); where == keyNotHere || where == keyRepartition {
					return nil
				}
			}
			if err := wq.check(table, rs); err != nil {
				return err
			}
			// The first row at or after key with key as prefix is key
			// itself when it exists.
			return snap.Rows(key, 1, func(k, v []byte) error {
				if bytes.Equal(k, key) {
					found, val = true, bytes.Clone(v)
				}
				return nil
			})
		})
	})
	if s.waitError(w, table, err) {
		return
	}
	if err != nil {
		s.readError(w, table, err)
		return
	}
	s.setReadHeaders(w, table, rs)
	if keyElsewhere(w, table, key, found, sh, where, part) {
		return
	}
	if !found {
		writeError(w, http.StatusNotFound, api.CodeKeyNotFound, (&store.KeyNotFoundError{Table: table, Key: key}).Error())
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(val)))
	w.WriteHeader(http.StatusOK)
	w.Write(val)
}

// rowsQuery is the rows route's parsed query.
type rowsQuery struct {
	rng        store.Range // prefix=, from= (inclusive), to= (exclusive)
	after      []byte
	limit      int
	generation uint64 // 0: whatever is published
	b64        bool
	keysOnly   bool // keys_only=1: lines without "value"
	wait       waitQuery
}

// parseBool reads a boolean query parameter: absent, 0 or false; 1 or true.
func parseBool(name, v string) (bool, error) {
	switch v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, fmt.Errorf("%s %q: want 1 or 0", name, v)
}

// parseEncoding reads encoding= (utf-8, the default, or base64).
func parseEncoding(v string) (bool, error) {
	switch v {
	case "", "utf-8", "utf8":
		return false, nil
	case "base64":
		return true, nil
	}
	return false, fmt.Errorf("encoding %q: want utf-8 or base64", v)
}

func parseRows(w http.ResponseWriter, r *http.Request) (rowsQuery, bool) {
	q := rowsQuery{limit: DefaultRowsLimit}
	if !checkParams(w, r, "prefix", "from", "to", "after", "limit", "generation", "encoding", "keys_only", api.ParamMinPositions, api.ParamWait) {
		return q, false
	}
	wq, ok := parseWaitQuery(w, r)
	if !ok {
		return q, false
	}
	q.wait = wq
	v := r.URL.Query()
	q.rng, q.after = rangeParams(v), []byte(v.Get("after"))
	keysOnly, err := parseBool("keys_only", v.Get("keys_only"))
	if err != nil {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, err.Error())
		return q, false
	}
	q.keysOnly = keysOnly
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxRowsLimit {
			writeError(w, http.StatusBadRequest, api.CodeBadLimit, fmt.Sprintf("limit %q: want 1 to %d (default %d); page with after=", s, MaxRowsLimit, DefaultRowsLimit))
			return q, false
		}
		q.limit = n
	}
	if s := v.Get("generation"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			writeError(w, http.StatusBadRequest, api.CodeBadGeneration, fmt.Sprintf("generation %q: want the positive number a first page's %s header gave", s, HeaderGeneration))
			return q, false
		}
		q.generation = n
	}
	b64, err := parseEncoding(v.Get("encoding"))
	if err != nil {
		writeError(w, http.StatusBadRequest, api.CodeBadEncoding, err.Error())
		return q, false
	}
	q.b64 = b64
	return q, true
}

// errPageEnd ends a rows page's cursor walk.
var errPageEnd = errors.New("page full")

// getRows answers one page of rows as JSON lines, exactly as `scan --format
// jsonl` prints them. The page is formatted in memory inside the read
// transaction (at most limit rows and Config.PageMaxBytes of keys and
// values, or a single larger row), so the status is decided before its
// first byte and no slow client holds a transaction open.
func (s *Server) getRows(w http.ResponseWriter, r *http.Request) {
	table, ok := tableParam(w, r)
	if !ok {
		return
	}
	q, ok := parseRows(w, r)
	if !ok {
		return
	}
	db := s.database(w)
	if db == nil {
		return
	}
	var buf bytes.Buffer
	var rs readState
	size := 0 // bytes of keys and values on the page
	more, gone := false, false
	err := s.readWhenReached(w, r, db, table, q.wait, func() error {
		return db.ReadTable(table, func(snap *store.Snapshot) error {
			buf.Reset()
			size, more, gone = 0, false, false
			if err := rs.load(snap); err != nil {
				return err
			}
			if q.generation != 0 && q.generation != rs.gen {
				gone = true
				return nil
			}
			if err := q.wait.check(table, rs); err != nil {
				return err
			}
			return s.rowsPage(snap, q, &buf, &size, &more)
		})
	})
	if s.waitError(w, table, err) {
		return
	}
	gen := rs.gen
	switch {
	case errors.Is(err, exportdoc.ErrNotUTF8):
		writeError(w, http.StatusUnprocessableEntity, api.CodeNotUTF8, err.Error()+"; ask with encoding=base64")
		return
	case err != nil:
		s.readError(w, table, err)
		return
	case gone:
		writeError(w, http.StatusConflict, api.CodeGenerationGone,
			fmt.Sprintf("generation %d of table %q is no longer published (now %d): start the scan again from the first page", q.generation, table, gen))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	s.setReadHeaders(w, table, rs)
	w.Header().Set(HeaderMore, strconv.FormatBool(more))
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	w.Write(buf.Bytes())
}

// rowsPage formats one page of q's rows from snap into buf: size is the
// bytes of keys and values on it, more is set when rows follow its last.
func (s *Server) rowsPage(snap *store.Snapshot, q rowsQuery, buf *bytes.Buffer, size *int, more *bool) error {
	n := 0
	err := snap.RangeAfter(q.rng, q.after, q.limit+1, func(k, v []byte) error {
		// The page ends at q.limit rows, or before the row that would
		// take it past the byte budget (a first row larger than it
		// comes alone).
		if n == q.limit || (n > 0 && *size+len(k)+len(v) > s.cfg.PageMaxBytes) {
			*more = true
			return errPageEnd
		}
		n++
		*size += len(k) + len(v)
		ks, err := exportdoc.Text(k, k, "key", q.b64)
		if err != nil {
			return err
		}
		if q.keysOnly {
			buf.Write(keyLine(ks))
			return nil
		}
		vs, err := exportdoc.Text(k, v, "value", q.b64)
		if err != nil {
			return err
		}
		buf.Write(exportdoc.JSONLine(ks, vs))
		return nil
	})
	if errors.Is(err, errPageEnd) {
		return nil
	}
	return err
}
