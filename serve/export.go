package serve

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/exportdoc"
	"github.com/kmaterialize/kmaterialize/store"
)

// export sends the same document `kmaterialize export` writes, of one state
// of the table, without a read transaction that lasts at the client's pace
// (store/pager.go): a table that no follower changes is read in pages of
// short transactions pinned to its generation; a followed one (or one
// changed in place before the first byte) is spooled (spool.go). A key or
// value that is not UTF-8 (without encoding=base64) fails it before the
// first byte.
func (s *Server) export(w http.ResponseWriter, r *http.Request) {
	table, ok := tableParam(w, r)
	if !ok {
		return
	}
	if !checkParams(w, r, "encoding") {
		return
	}
	b64, err := parseEncoding(r.URL.Query().Get("encoding"))
	if err != nil {
		writeError(w, http.StatusBadRequest, api.CodeBadEncoding, err.Error())
		return
	}
	db := s.database(w)
	if db == nil {
		return
	}
	release, ok := s.heavySlot(w, fmt.Sprintf("export of table %q", table))
	if !ok {
		return
	}
	defer release()
	opts := exportdoc.Options{Base64: b64}
	if !s.followed(table) && s.exportPaged(w, db, table, opts) {
		return
	}
	s.exportSpooled(w, db, table, opts, release)
}

// followed reports whether a follower keeps table current (it changes in
// place between rebuilds).
func (s *Server) followed(table string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	def, ok := s.tables[table]
	return ok && def.Follow != nil
}

// exportPaged sends the export from a store.Pager. It returns false, having
// sent nothing, when the generation changed in place before the first byte:
// the caller spools it instead.
func (s *Server) exportPaged(w http.ResponseWriter, db *store.DB, table string, opts exportdoc.Options) bool {
	var cp checkpoint.Checkpoint
	p, err := db.NewPager(table, func(snap *store.Snapshot) error {
		var err error
		cp, _, err = checkpoint.Load(snap.Tx, table)
		return err
	})
	if err != nil {
		s.exportError(w, table, err)
		return true
	}
	defer p.Close()
	w.Header().Set("Content-Type", "application/json")
	s.setReadHeaders(w, table, readState{gen: p.Meta.Generation, positions: cpPositions(cp)})
	dw := &deadlineWriter{w: w, rc: http.NewResponseController(w)}
	err = exportdoc.WritePaged(p, cp, dw, opts)
	switch {
	case err == nil:
	case dw.wrote:
		// Too late for a status: end the response abruptly so that the
		// client does not take a truncated document for a whole one.
		s.cfg.Log.Warn().Err(err).Str(keyTable, table).Msg("export aborted mid-response")
		panic(http.ErrAbortHandler)
	case errors.Is(err, store.ErrPagerStale):
		clearReadHeaders(w)
		return false
	default:
		clearReadHeaders(w)
		s.exportError(w, table, err)
	}
	return true
}

// exportSpooled reads the export in one read transaction into a spool file,
// releases the heavy slot, and sends the file.
func (s *Server) exportSpooled(w http.ResponseWriter, db *store.DB, table string, opts exportdoc.Options, release func()) {
	sf, err := s.spool.create()
	if err != nil {
		s.readError(w, table, err)
		return
	}
	defer sf.close()
	var rs readState
	err = db.ReadTable(table, func(snap *store.Snapshot) error {
		if err := rs.load(snap); err != nil {
			return err
		}
		return exportdoc.WriteSnapshot(snap, sf, opts)
	})
	release()
	if err != nil {
		s.exportError(w, table, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	s.setReadHeaders(w, table, rs)
	if err := sf.send(w); err != nil {
		s.cfg.Log.Warn().Err(err).Str(keyTable, table).Msg("export aborted mid-response")
		panic(http.ErrAbortHandler)
	}
}

// exportError answers an export that failed before its first byte.
func (s *Server) exportError(w http.ResponseWriter, table string, err error) {
	switch {
	case errors.Is(err, errSpoolFull):
		s.spoolFullError(w, fmt.Sprintf("the export of table %q", table))
	case errors.Is(err, exportdoc.ErrNotUTF8):
		writeError(w, http.StatusUnprocessableEntity, api.CodeNotUTF8, err.Error()+"; ask with encoding=base64")
	default:
		s.readError(w, table, err)
	}
}

// deadlineWriter renews the connection's write deadline, to
// streamStallTimeout, before each piece of at most deadlineChunk bytes: a
// client that reads slowly but steadily (curl --limit-rate 1k) is served to
// the end, one that stops reading is cut off. It never holds a read
// transaction (an export or a diff writes to it from pages or from a spool
// file), so a slow client costs a connection and its spool file or pinned
// generation, not the writers' progress.
type deadlineWriter struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	wrote bool

	// mu guards until: once set (cutOff), no write waits past it.
	mu    sync.Mutex
	until time.Time
}

// cutOff makes every write of d, the one blocked now too, give up at the
// latest after grace. Safe from another goroutine than the writer's: the
// connection's deadline is, and mu orders it with Write's own.
func (d *deadlineWriter) cutOff(grace time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.until.IsZero() {
		d.until = time.Now().Add(grace)
		_ = d.rc.SetWriteDeadline(d.until)
	}
}

// deadline sets the connection's write deadline for the next write.
func (d *deadlineWriter) deadline() {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := time.Now().Add(streamStallTimeout)
	if !d.until.IsZero() && d.until.Before(t) {
		t = d.until
	}
	_ = d.rc.SetWriteDeadline(t)
}

// deadlineChunk is the largest write deadlineWriter makes under one
// deadline.
const deadlineChunk = 8 << 10

// streamStallTimeout bounds one write of an answer's body. It is not
// writeTimeout (30 s): the kernel reports a socket writable only once its
// buffer has drained well below full (for a unix socket, to a quarter of
// its ~200 KiB), which at 1 KiB/s takes minutes, not seconds.
const streamStallTimeout = 5 * time.Minute

func (d *deadlineWriter) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		piece := b[:min(len(b), deadlineChunk)]
		d.deadline()
		d.wrote = true
		m, err := d.w.Write(piece)
		n += m
		if err != nil {
			return n, err
		}
		b = b[m:]
	}
	return n, nil
}

// cpPositions are a checkpoint's positions (nil for a table without one:
// a checkpoint with no topic).
func cpPositions(cp checkpoint.Checkpoint) api.Positions {
	if cp.Topic == "" {
		return nil
	}
	p := make(api.Positions, len(cp.Partitions))
	for _, part := range cp.Partitions {
		p[part.Partition] = part.End
	}
	return p
}
