package serve

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/exportdoc"
	"github.com/kmaterialize/kmaterialize/store"
)

// HeaderGeneration names the generation that answered a read.
const HeaderGeneration = "Kmaterialize-Generation"

// HeaderMore is "true" on a rows page when rows follow its last one.
const HeaderMore = "Kmaterialize-More"

// Limits of the rows route.
const (
	DefaultRowsLimit = 1000
	MaxRowsLimit     = 10000
)

func (s *Server) httpServer(tcp bool) *http.Server {
	return &http.Server{
		Handler:           s.handler(tcp),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          log.New(warnWriter{s.cfg.Log}, "http: ", 0),
	}
}

// handler is the API. On TCP (tcp true) every request passes authorize
// (auth.go) first.
func (s *Server) handler(tcp bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tables", s.listTables)
	mux.HandleFunc("GET /v1/tables/{table}", s.getTable)
	mux.HandleFunc("GET /v1/tables/{table}/keys/{key...}", s.getKey)
	mux.HandleFunc("GET /v1/tables/{table}/rows", s.getRows)
	mux.HandleFunc("GET /v1/tables/{table}/export", s.export)
	mux.HandleFunc("GET /v1/tables/{table}/count", s.count)
	mux.HandleFunc("POST /v1/tables/{table}/rebuild", s.rebuild)
	mux.HandleFunc("POST /v1/tables/{table}/cancel", s.cancel)
	mux.HandleFunc("DELETE /v1/tables/{table}", s.drop)
	mux.HandleFunc("POST /v1/tables/{table}/update", s.update)
	mux.HandleFunc("POST /v1/tables/{table}/rollback", s.rollback)
	mux.HandleFunc("GET /v1/tables/{table}/diff", s.diff)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "serving"})
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /v1/status", s.status)
	mux.Handle("GET /metrics", s.metrics.handler())
	api := s.authorize(tcp, mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		route := "unmatched"
		// Deferred: an export aborted mid-response (ErrAbortHandler) counts.
		defer func() {
			s.metrics.requests.WithLabelValues(route, strconv.Itoa(sw.code)).Observe(time.Since(start).Seconds())
		}()
		if _, pattern := mux.Handler(r); pattern != "" {
			route = pattern
			api.ServeHTTP(sw, r)
		} else {
			api.ServeHTTP(&muxErrorWriter{ResponseWriter: sw}, r)
		}
	})
}

// warnWriter logs what net/http's error log gets at warn level.
type warnWriter struct{ log zerolog.Logger }

func (w warnWriter) Write(b []byte) (int, error) {
	w.log.Warn().Msg(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

// statusWriter remembers the status code for the request metrics.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// database returns the open database, or answers 503 and returns nil.
func (s *Server) database(w http.ResponseWriter) *store.DB {
	s.mu.Lock()
	db := s.db
	s.mu.Unlock()
	if db == nil {
		writeError(w, http.StatusServiceUnavailable, codeShuttingDown, "the daemon is shutting down")
	}
	return db
}

// tableParam returns the {table} of the route, or answers 400.
func tableParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := r.PathValue("table")
	if err := checkTableName(name); err != nil {
		writeError(w, http.StatusBadRequest, codeBadTableName, err.Error())
		return "", false
	}
	return name, true
}

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
			writeError(w, http.StatusServiceUnavailable, codeTableNotReady,
				fmt.Sprintf("table %q has not been published yet: its first build has not finished (see GET /v1/tables/%s)", table, table))
			return
		}
		writeError(w, http.StatusNotFound, codeTableNotFound, err.Error())
		return
	}
	s.cfg.Log.Error().Err(err).Str(keyTable, table).Msg("read failed")
	writeError(w, http.StatusInternalServerError, codeInternal, err.Error())
}

// tableJSON is a table as the API shows it. Fields of the published
// generation are null while it has none.
type tableJSON struct {
	Name   string            `json:"name"`
	Topic  string            `json:"topic"`
	Fold   string            `json:"fold"`
	Params map[string]string `json:"params,omitempty"`
	State  string            `json:"state"`
	// Retry is the planned retry of a failed first build (retry.go);
	// absent when none is planned.
	Retry *retryJSON `json:"retry,omitempty"`
	// Definition says whether the configured definition differs from the
	// one the published table was built by (definition.go); absent when
	// there is nothing to compare.
	Definition *definitionJSON        `json:"definition,omitempty"`
	Configured bool                   `json:"configured"`
	Schedule   *string                `json:"schedule"`
	Generation *uint64                `json:"generation"`
	Keys       *int64                 `json:"keys"`
	BuiltAt    *string                `json:"built_at"`
	TookMS     *int64                 `json:"took_ms"`
	Records    *int64                 `json:"records"`
	Skipped    *int64                 `json:"skipped"`
	EndMark    string                 `json:"end_mark,omitempty"`
	Partitions []partitionAndLiveJSON `json:"partitions"`
	// UpdatesSinceRebuild and CheckpointCapturedAt are the checkpoint's
	// provenance: incremental updates since the last full rebuild, and
	// when its end marks were captured (null: unknown, an imported table).
	UpdatesSinceRebuild  int64          `json:"updates_since_rebuild"`
	CheckpointCapturedAt *string        `json:"checkpoint_captured_at"`
	LastError            *lastErrorJSON `json:"last_error"`
	NextRun              *string        `json:"next_run"`
	Run                  *runJSON       `json:"run"`
	// SkippedRuns counts scheduled runs skipped because one was going.
	SkippedRuns int64 `json:"skipped_runs"`

	// The rest of the stored metadata, so that a client (the routed
	// `kmaterialize tables`) shows exactly what the file says: built_at
	// has nanoseconds, duration_ns is took_ms unrounded.
	DurationNS      *int64           `json:"duration_ns"`
	SkippedByReason map[string]int64 `json:"skipped_by_reason,omitempty"`
	Empty           bool             `json:"empty,omitempty"`
	Extra           map[string]int64 `json:"extra,omitempty"`
	// Follow is a followed table's follower (follow.go); absent otherwise.
	Follow *followJSON `json:"follow,omitempty"`

	// History: the end bound of an as-of rebuild, what the last publish
	// changed, and the generations kept (--keep / keep), newest first.
	Until   *store.Bound   `json:"until,omitempty"`
	Changes *store.Changes `json:"changes,omitempty"`
	Kept    []keptJSON     `json:"kept,omitempty"`
}

// keptJSON is a kept generation with the metadata and checkpoint it was
// published with.
type keptJSON struct {
	Generation      uint64                 `json:"generation"`
	Topic           string                 `json:"topic"`
	Fold            string                 `json:"fold"`
	Params          map[string]string      `json:"params,omitempty"`
	Keys            int64                  `json:"keys"`
	BuiltAt         string                 `json:"built_at"`
	DurationNS      int64                  `json:"duration_ns"`
	Records         int64                  `json:"records"`
	Skipped         int64                  `json:"skipped"`
	SkippedByReason map[string]int64       `json:"skipped_by_reason,omitempty"`
	Empty           bool                   `json:"empty,omitempty"`
	Extra           map[string]int64       `json:"extra,omitempty"`
	Until           *store.Bound           `json:"until,omitempty"`
	Changes         *store.Changes         `json:"changes,omitempty"`
	EndMark         string                 `json:"end_mark,omitempty"`
	Partitions      []checkpoint.Partition `json:"partitions"`
	// As the table's: its checkpoint's incremental updates and capture
	// time, as they were.
	UpdatesSinceRebuild  int64   `json:"updates_since_rebuild"`
	CheckpointCapturedAt *string `json:"checkpoint_captured_at"`
}

// describeHistory fills t's history fields from snap.
func describeHistory(t *tableJSON, snap *store.Snapshot) error {
	t.Until, t.Changes = snap.Meta.Until, snap.Meta.Changes
	kept, err := store.KeptGenerations(snap.Tx, snap.Meta.Name)
	if err != nil {
		return err
	}
	for _, k := range kept {
		m := k.Meta
		kj := keptJSON{Generation: k.Generation, Topic: m.Topic, Fold: m.Fold, Params: m.Params, Keys: m.Keys,
			BuiltAt: m.BuiltAt.UTC().Format(time.RFC3339Nano), DurationNS: int64(m.Duration), Records: m.Records, Skipped: m.Skipped,
			SkippedByReason: m.SkippedByReason, Empty: m.Empty, Extra: m.Extra, Until: m.Until, Changes: m.Changes,
			Partitions: []checkpoint.Partition{}}
		cp, ok, err := store.KeptCheckpoint(snap.Tx, m.Name, k.Generation)
		if err != nil {
			return err
		}
		if ok {
			kj.EndMark = cp.EndMark
			if cp.Partitions != nil {
				kj.Partitions = cp.Partitions
			}
			kj.UpdatesSinceRebuild = cp.Updates
			if !cp.CapturedAt.IsZero() {
				at := cp.CapturedAt.UTC().Format(time.RFC3339Nano)
				kj.CheckpointCapturedAt = &at
			}
		}
		t.Kept = append(t.Kept, kj)
	}
	return nil
}

type lastErrorJSON struct {
	Error    string `json:"error"`
	ExitCode int    `json:"exit_code"`
	Run      uint64 `json:"run"`
	At       string `json:"at"`
}

// runJSON is the run queued or going. Started is null while it is queued;
// Phase is queued, reading (its replay) or publishing (merging,
// publishing: it ends by itself, and cannot be cancelled).
type runJSON struct {
	ID       uint64  `json:"id"`
	Trigger  string  `json:"trigger"`
	Phase    string  `json:"phase"`
	QueuedAt string  `json:"queued_at"`
	Started  *string `json:"started"`
}

// describe returns table as the API shows it, reading its metadata and
// checkpoint in one transaction. found is false when the table is neither
// in the file nor configured.
func (s *Server) describe(db *store.DB, table string) (tableJSON, bool, error) {
	s.mu.Lock()
	def, configured := s.tables[table]
	var active *run
	var phase runPhase
	var last *runResult
	var skipped int64
	var retry *retryJSON
	if st := s.runs[table]; st != nil {
		active, last, skipped = st.active, st.last, st.skipped
		if active != nil {
			phase = active.phase
		}
		if st.retry != nil {
			retry = st.retry.json()
		}
	}
	s.mu.Unlock()

	t := tableJSON{Name: table, Configured: configured, Partitions: []partitionAndLiveJSON{}, SkippedRuns: skipped}
	if configured {
		t.Topic, t.Fold = def.Topic, def.Fold
		if def.Schedule != "" {
			sch := def.Schedule
			t.Schedule = &sch
		}
	}
	published := false
	err := db.ReadTable(table, func(snap *store.Snapshot) error {
		published = true
		m := snap.Meta
		t.Topic, t.Fold, t.Params = m.Topic, m.Fold, m.Params
		gen, keys, took, recs, skip := m.Generation, m.Keys, m.Duration.Milliseconds(), m.Records, m.Skipped
		built := m.BuiltAt.UTC().Format(time.RFC3339Nano)
		t.Generation, t.Keys, t.TookMS, t.Records, t.Skipped, t.BuiltAt = &gen, &keys, &took, &recs, &skip, &built
		dur := int64(m.Duration)
		t.DurationNS, t.SkippedByReason, t.Empty, t.Extra = &dur, m.SkippedByReason, m.Empty, m.Extra
		cp, ok, err := checkpoint.Load(snap.Tx, table)
		if err != nil {
			return err
		}
		if ok {
			t.EndMark = cp.EndMark
			t.UpdatesSinceRebuild = cp.Updates
			if !cp.CapturedAt.IsZero() {
				at := cp.CapturedAt.UTC().Format(time.RFC3339Nano)
				t.CheckpointCapturedAt = &at
			}
			for _, p := range cp.Partitions {
				t.Partitions = append(t.Partitions, partitionAndLiveJSON{Partition: p})
			}
		}
		return describeHistory(&t, snap)
	})
	if err != nil && !errors.Is(err, store.ErrTableNotFound) {
		return t, false, err
	}
	if !published && !configured {
		return t, false, nil
	}
	if published && configured {
		if t.Definition, err = s.definitionInfo(db, table); err != nil {
			return t, false, err
		}
	}
	fv, followed := s.followInfo(table)
	followFailed := followed && !fv.running && fv.err != nil
	t.State = tableState(stateInputs{published: published, active: active, phase: phase, last: last,
		followed: followed, following: fv.running, followFailed: followFailed})
	t.Retry = retry
	if last != nil && last.Err != nil {
		t.LastError = &lastErrorJSON{Error: last.Err.Error(), ExitCode: last.ExitCode, Run: last.ID, At: last.Ended.UTC().Format(time.RFC3339)}
	}
	if followed {
		t.Follow = fv.json()
		t.Partitions = fv.withLive(t.Partitions)
		if followFailed && (last == nil || last.Err == nil || last.Ended.Before(fv.errAt)) {
			// The reason following stopped is the table's last error.
			t.LastError = &lastErrorJSON{Error: "following stopped: " + fv.err.Error(), ExitCode: s.cfg.ExitCode(fv.err), At: fv.errAt.UTC().Format(time.RFC3339)}
		}
	}
	if active != nil {
		t.Run = &runJSON{ID: active.id, Trigger: active.trigger, Phase: phase.String(), QueuedAt: active.queued.UTC().Format(time.RFC3339Nano)}
		if phase != phaseQueued {
			st := active.started.UTC().Format(time.RFC3339)
			t.Run.Started = &st
		}
	}
	if next := s.nextRun(table); next != nil {
		n := next.Format(time.RFC3339)
		t.NextRun = &n
	}
	return t, true, nil
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
		Tables []tableJSON `json:"tables"`
	}{Tables: []tableJSON{}}
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
	t, found, err := s.describe(db, table)
	switch {
	case err != nil:
		s.readError(w, table, err)
	case !found:
		writeError(w, http.StatusNotFound, codeTableNotFound, fmt.Sprintf("table %q is neither in the database nor configured (GET /v1/tables lists them)", table))
	default:
		if t.Generation != nil {
			w.Header().Set(HeaderGeneration, strconv.FormatUint(*t.Generation, 10))
		}
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
		writeError(w, http.StatusBadRequest, codeBadKey, fmt.Sprintf("a key has 1 to %d bytes, percent-encoded in the path", bolt.MaxKeySize))
		return
	}
	db := s.database(w)
	if db == nil {
		return
	}
	var gen uint64
	var val []byte
	found := false
	err := db.ReadTable(table, func(snap *store.Snapshot) error {
		gen = snap.Meta.Generation
		// The first row at or after key with key as prefix is key itself
		// when it exists.
		return snap.Rows(key, 1, func(k, v []byte) error {
			if bytes.Equal(k, key) {
				found, val = true, bytes.Clone(v)
			}
			return nil
		})
	})
	if err != nil {
		s.readError(w, table, err)
		return
	}
	w.Header().Set(HeaderGeneration, strconv.FormatUint(gen, 10))
	if !found {
		writeError(w, http.StatusNotFound, codeKeyNotFound, (&store.KeyNotFoundError{Table: table, Key: key}).Error())
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

// checkParams answers 400 for a query parameter not in allowed: the API
// never ignores what a client asked for.
func checkParams(w http.ResponseWriter, r *http.Request, allowed ...string) bool {
	for k := range r.URL.Query() {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok {
			writeError(w, http.StatusBadRequest, codeBadRequest, fmt.Sprintf("unknown query parameter %q (this route takes %s)", k, strings.Join(allowed, ", ")))
			return false
		}
	}
	return true
}

func parseRows(w http.ResponseWriter, r *http.Request) (rowsQuery, bool) {
	q := rowsQuery{limit: DefaultRowsLimit}
	if !checkParams(w, r, "prefix", "from", "to", "after", "limit", "generation", "encoding", "keys_only") {
		return q, false
	}
	v := r.URL.Query()
	q.rng, q.after = rangeParams(v), []byte(v.Get("after"))
	keysOnly, err := parseBool("keys_only", v.Get("keys_only"))
	if err != nil {
		writeError(w, http.StatusBadRequest, codeBadRequest, err.Error())
		return q, false
	}
	q.keysOnly = keysOnly
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxRowsLimit {
			writeError(w, http.StatusBadRequest, codeBadLimit, fmt.Sprintf("limit %q: want 1 to %d (default %d); page with after=", s, MaxRowsLimit, DefaultRowsLimit))
			return q, false
		}
		q.limit = n
	}
	if s := v.Get("generation"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			writeError(w, http.StatusBadRequest, codeBadGeneration, fmt.Sprintf("generation %q: want the positive number a first page's %s header gave", s, HeaderGeneration))
			return q, false
		}
		q.generation = n
	}
	b64, err := parseEncoding(v.Get("encoding"))
	if err != nil {
		writeError(w, http.StatusBadRequest, codeBadEncoding, err.Error())
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
	var gen uint64
	size := 0 // bytes of keys and values on the page
	more, gone := false, false
	err := db.ReadTable(table, func(snap *store.Snapshot) error {
		gen = snap.Meta.Generation
		if q.generation != 0 && q.generation != gen {
			gone = true
			return nil
		}
		n := 0
		err := snap.RangeAfter(q.rng, q.after, q.limit+1, func(k, v []byte) error {
			// The page ends at q.limit rows, or before the row that would
			// take it past the byte budget (a first row larger than it
			// comes alone).
			if n == q.limit || (n > 0 && size+len(k)+len(v) > s.cfg.PageMaxBytes) {
				more = true
				return errPageEnd
			}
			n++
			size += len(k) + len(v)
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
	})
	switch {
	case errors.Is(err, exportdoc.ErrNotUTF8):
		writeError(w, http.StatusUnprocessableEntity, codeNotUTF8, err.Error()+"; ask with encoding=base64")
		return
	case err != nil:
		s.readError(w, table, err)
		return
	case gone:
		writeError(w, http.StatusConflict, codeGenerationGone,
			fmt.Sprintf("generation %d of table %q is no longer published (now %d): start the scan again from the first page", q.generation, table, gen))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set(HeaderGeneration, strconv.FormatUint(gen, 10))
	w.Header().Set(HeaderMore, strconv.FormatBool(more))
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	w.Write(buf.Bytes())
}

// rebuildResult is the body of POST .../rebuild?wait=1.
type rebuildResult struct {
	Run        uint64  `json:"run"`
	ExitCode   int     `json:"exit_code"`
	Error      *string `json:"error"`
	Generation *uint64 `json:"generation"`
}

// rebuild starts a run of a configured table, as configured: the request
// carries no options.
func (s *Server) rebuild(w http.ResponseWriter, r *http.Request) {
	table, ok := tableParam(w, r)
	if !ok {
		return
	}
	if !checkParams(w, r, "wait") {
		return
	}
	wait := false
	switch v := r.URL.Query().Get("wait"); v {
	case "", "0", "false":
	case "1", "true":
		wait = true
	default:
		writeError(w, http.StatusBadRequest, codeBadRequest, fmt.Sprintf("wait %q: want 1 or 0", v))
		return
	}
	if r.ContentLength > 0 {
		writeError(w, http.StatusBadRequest, codeBadRequest, "a rebuild request carries no body: the daemon's config decides how the table is built")
		return
	}
	s.mu.Lock()
	_, configured := s.tables[table]
	s.mu.Unlock()
	if !configured {
		writeError(w, http.StatusNotFound, codeTableNotConfigured,
			fmt.Sprintf("table %q is not in the daemon's config, so the daemon cannot rebuild it; add it to the config and reload (SIGHUP)", table))
		return
	}
	run, err := s.startRun(table, triggerRequest)
	switch {
	case errors.Is(err, errRunning):
		writeJSON(w, http.StatusConflict, apiError{Error: fmt.Sprintf("a run of table %q is already running or queued (run %d; POST /v1/tables/%s/cancel cancels it)", table, run.id, table), Code: codeRunInProgress, Run: run.id})
		return
	case errors.Is(err, errStopping):
		writeError(w, http.StatusServiceUnavailable, codeShuttingDown, err.Error())
		return
	case err != nil:
		writeError(w, http.StatusNotFound, codeTableNotConfigured, err.Error())
		return
	}
	if !wait {
		writeJSON(w, http.StatusAccepted, map[string]uint64{"run": run.id})
		return
	}
	// A rebuild takes as long as it takes: no write deadline while waiting.
	// (The read deadline is no concern: net/http clears it for the
	// background read that watches for the client going away.)
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	res, done := waitRun(r.Context(), run)
	if !done {
		return // the client went away; the run goes on
	}
	out := rebuildResult{Run: res.ID, ExitCode: res.ExitCode}
	if res.Err != nil {
		msg := res.Err.Error()
		out.Error = &msg
	}
	if res.Generation != 0 {
		g := res.Generation
		out.Generation = &g
	} else if db := s.database(w); db != nil {
		if m, err := db.Table(table); err == nil {
			out.Generation = &m.Generation
		}
	} else {
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// readyTable is one table in /readyz's answer.
type readyTable struct {
	Name   string `json:"name"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
}

// readyz is 200 once every configured table has a published generation,
// else 503 naming the tables that are not ready and why.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	db := s.database(w)
	if db == nil {
		return
	}
	s.mu.Lock()
	names := s.configuredLocked()
	s.mu.Unlock()
	var tables, notReady []readyTable
	for _, n := range names {
		t, _, err := s.describe(db, n)
		if err != nil {
			s.readError(w, n, err)
			return
		}
		rt := readyTable{Name: n, State: t.State}
		if fv, followed := s.followInfo(n); followed && t.Generation != nil {
			if why := fv.notReady(); why != "" {
				rt.Reason = why
				notReady = append(notReady, rt)
			}
		}
		if t.Generation == nil {
			switch {
			case t.State == StateBuilding:
				rt.Reason = "its first build is running"
			case t.State == StateQueued:
				rt.Reason = "its first build is queued (max_concurrent_runs)"
			case t.LastError != nil && t.Retry != nil && t.Retry.Next != nil:
				rt.Reason = fmt.Sprintf("its first build failed (exit code %d): %s; retried at %s", t.LastError.ExitCode, t.LastError.Error, *t.Retry.Next)
			case t.LastError != nil:
				rt.Reason = fmt.Sprintf("its first build failed (exit code %d): %s", t.LastError.ExitCode, t.LastError.Error)
			default:
				rt.Reason = "never published"
			}
			notReady = append(notReady, rt)
		}
		tables = append(tables, rt)
	}
	if len(notReady) > 0 {
		writeJSON(w, http.StatusServiceUnavailable, apiError{
			Error: fmt.Sprintf("%d of %d configured tables are not ready (no published generation yet, or following and behind)", len(notReady), len(names)),
			Code:  codeNotReady, Tables: notReady,
		})
		return
	}
	if tables == nil {
		tables = []readyTable{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "tables": tables})
}
