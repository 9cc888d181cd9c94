package serve

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"sync"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/store"
)

// An answer that must be one state of a table that may change while it is
// sent (the export of a followed table, a diff) is read in one read
// transaction at disk speed into a spool file, and sent from the file at
// the client's pace once the transaction has ended: a slow client never
// holds a bbolt read transaction (which would make every growing commit,
// and then every reader, wait: store/pager.go). The spool is bounded in
// bytes (Config.SpoolMaxBytes, for all spool files at once): an answer that
// would pass it fails with 503 spool_full before its first byte is sent.
// The whole answer is in the file before the status is written, so an
// error met while reading (a key that is not UTF-8) is a proper error
// response.
//
// Spool files live in store.SpoolDir (FILE.spool/), created on demand; each
// is removed once sent, and a read-write open of the database removes the
// leftovers of a daemon that was killed (store.SpoolSuffix).

// errSpoolFull is returned by a spoolFile's Write when the answer would take
// the spool past its limit.
var errSpoolFull = errors.New("spool full")

// spooler is the spool directory and its byte budget.
type spooler struct {
	dir   string
	limit int64

	mu   sync.Mutex // dir's creation and removal, used
	used int64      // bytes in spool files now
}

func newSpooler(dir string, limit int64) *spooler { return &spooler{dir: dir, limit: limit} }

// create makes a new spool file, and the directory first if needed.
func (sp *spooler) create() (*spoolFile, error) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if err := os.Mkdir(sp.dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("create spool directory %s: %w", sp.dir, err)
	}
	f, err := os.CreateTemp(sp.dir, "*"+store.SpoolSuffix)
	if err != nil {
		return nil, fmt.Errorf("create a spool file in %s: %w", sp.dir, err)
	}
	sf := &spoolFile{sp: sp, f: f}
	sf.bw = bufio.NewWriterSize(sf.counted(), 256<<10)
	return sf, nil
}

// reserve takes n bytes of the budget, or reports that they are not there.
func (sp *spooler) reserve(n int64) bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.used+n > sp.limit {
		return false
	}
	sp.used += n
	return true
}

// release returns n bytes and removes the directory when it is empty
// (under mu: create makes it again when needed).
func (sp *spooler) release(n int64) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.used -= n
	_ = os.Remove(sp.dir) // fails, harmlessly, when not empty
}

// spoolFile is one answer being spooled, then sent. Its owner is the
// request's handler: Write while reading, then send, and close always.
type spoolFile struct {
	sp   *spooler
	f    *os.File
	bw   *bufio.Writer
	size int64 // bytes reserved (and written through bw)
}

// counted is the file behind bw: each write reserves its bytes first.
func (sf *spoolFile) counted() io.Writer { return spoolCounted{sf} }

type spoolCounted struct{ sf *spoolFile }

func (c spoolCounted) Write(b []byte) (int, error) {
	if !c.sf.sp.reserve(int64(len(b))) {
		return 0, errSpoolFull
	}
	c.sf.size += int64(len(b))
	return c.sf.f.Write(b)
}

// Write buffers b for the file.
func (sf *spoolFile) Write(b []byte) (int, error) { return sf.bw.Write(b) }

// send writes the spooled answer as the body of a response whose headers
// the caller set, with status 200 and its Content-Length. Each chunk renews
// the write deadline (deadlineWriter): a stalled client is cut off after
// writeTimeout, but it holds only this file, not a transaction.
func (sf *spoolFile) send(w http.ResponseWriter) error {
	if err := sf.bw.Flush(); err != nil {
		return err
	}
	if _, err := sf.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("rewind spool file %s: %w", sf.f.Name(), err)
	}
	w.Header().Set("Content-Length", strconv.FormatInt(sf.size, 10))
	w.WriteHeader(http.StatusOK)
	dw := &deadlineWriter{w: w, rc: http.NewResponseController(w)}
	_, err := io.CopyBuffer(dw, sf.f, make([]byte, 64<<10))
	return err
}

// close removes the file and gives its bytes back. It is idempotent.
func (sf *spoolFile) close() {
	if sf.f == nil {
		return
	}
	name := sf.f.Name()
	_ = sf.f.Close()
	_ = os.Remove(name)
	sf.f = nil
	sf.sp.release(sf.size)
}

// spoolFullError answers 503 spool_full.
func (s *Server) spoolFullError(w http.ResponseWriter, what string) {
	w.Header().Set("Retry-After", strconv.Itoa(heavyRetryAfter))
	writeError(w, http.StatusServiceUnavailable, api.CodeSpoolFull,
		fmt.Sprintf("%s would take the spool (%s) past spool_max_bytes (%d bytes, shared by the answers being sent): try again later, ask for less (a diff's limit=, a scan's range), or raise spool_max_bytes",
			what, s.spool.dir, s.spool.limit))
}
