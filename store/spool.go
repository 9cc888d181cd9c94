// Spooled changes: the changes a Publish or Rollback hands the observer,
// which may be every row of the table, written during the transaction's
// walk to a file in FeedDir instead of being held in memory.

package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// A spool file is a sequence of frames, one per change, in the order of
// the commit's changes (key order for a Publish or Rollback), and nothing
// else:
//
//	op     1 byte   framePut ('p') or frameDel ('d')
//	klen   uvarint  the key's length, at least 1
//	key    klen bytes
//	vlen   uvarint  framePut only: the value's length
//	value  vlen bytes
//
// There is no header, checksum or trailer: the file is never read by
// another process or after a restart (Open removes leftovers, and a
// restarted daemon starts a new epoch of every feed), and the Spool that
// names it says how many changes and bytes it holds, which the reader
// checks.
const (
	framePut = 'p'
	frameDel = 'd'
)

// maxFrameHeader is the most bytes a frame takes besides its key and
// value: the op and two uvarints.
const maxFrameHeader = 1 + 2*binary.MaxVarintLen64

// Spool names the changes of one commit spooled to a file (Commit.Spool).
// The observer that is handed it owns the file: it must Remove it once
// nobody reads it. Its readers may be many and concurrent, each from its
// own Open.
type Spool struct {
	Path  string // the file, in FeedDir
	Count int64  // the changes it holds
	Bytes int64  // its size
}

// Open starts a reader of the spooled changes from the first. On Linux a
// reader opened before Remove reads to the end after it.
func (s *Spool) Open() (*SpoolReader, error) {
	f, err := os.Open(s.Path)
	if err != nil {
		return nil, fmt.Errorf("open spooled changes: %w", err)
	}
	return &SpoolReader{f: f, fr: newFrameReader(bufio.NewReaderSize(f, spoolReadBuffer), s.Bytes, s.Count), path: s.Path}, nil
}

// Remove deletes the file.
func (s *Spool) Remove() error {
	if err := os.Remove(s.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove spooled changes: %w", err)
	}
	return nil
}

// spoolReadBuffer is a reader's buffer: the file is read in chunks of it,
// never whole.
const spoolReadBuffer = 64 << 10

// SpoolReader reads spooled changes in order, from one goroutine.
type SpoolReader struct {
	f    *os.File
	fr   *frameReader
	path string
}

// Next returns the next change, io.EOF after the last. Its slices are
// valid until the next call. An error names the file.
func (r *SpoolReader) Next() (KeyChange, error) {
	ch, err := r.fr.next()
	if err != nil && err != io.EOF {
		return KeyChange{}, fmt.Errorf("read spooled changes %s: %w", r.path, err)
	}
	return ch, err
}

// Close closes the file.
func (r *SpoolReader) Close() error { return r.f.Close() }

// ErrBadSpool is returned by a SpoolReader when the file does not hold
// the frames its Spool says (a bad frame, or more or fewer than Count).
var ErrBadSpool = errors.New("bad spooled changes")

// frameReader decodes frames from r, which holds size bytes and count
// frames.
type frameReader struct {
	r     *bufio.Reader
	left  int64 // bytes not read
	count int64 // frames not read
	key   []byte
	val   []byte
}

func newFrameReader(r *bufio.Reader, size, count int64) *frameReader {
	return &frameReader{r: r, left: size, count: count}
}

// next decodes one frame. A length is checked against the bytes left
// before anything is allocated for it, so a bad length never allocates
// more than the file holds.
func (fr *frameReader) next() (KeyChange, error) {
	if fr.count == 0 {
		if fr.left != 0 {
			return KeyChange{}, fmt.Errorf("%w: %d bytes after the last change", ErrBadSpool, fr.left)
		}
		return KeyChange{}, io.EOF
	}
	op, err := fr.r.ReadByte()
	if err != nil {
		return KeyChange{}, fr.short(err)
	}
	fr.left--
	if op != framePut && op != frameDel {
		return KeyChange{}, fmt.Errorf("%w: op %#x", ErrBadSpool, op)
	}
	if fr.key, err = fr.field(fr.key, "key"); err != nil {
		return KeyChange{}, err
	}
	if len(fr.key) == 0 {
		return KeyChange{}, fmt.Errorf("%w: an empty key", ErrBadSpool)
	}
	fr.count--
	if op == frameDel {
		return KeyChange{Key: fr.key, Deleted: true}, nil
	}
	if fr.val, err = fr.field(fr.val, "value"); err != nil {
		return KeyChange{}, err
	}
	return KeyChange{Key: fr.key, Value: fr.val}, nil
}

// field reads a uvarint length and that many bytes into buf's storage.
func (fr *frameReader) field(buf []byte, what string) ([]byte, error) {
	n, err := fr.uvarint(what)
	if err != nil {
		return nil, err
	}
	if fr.left < 0 || n > uint64(fr.left) {
		return nil, fmt.Errorf("%w: a %s of %d bytes, %d left", ErrBadSpool, what, n, max(fr.left, 0))
	}
	if uint64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(fr.r, buf); err != nil {
		return nil, fr.short(err)
	}
	fr.left -= int64(n)
	// A value that is not empty is never nil: nil is a deletion's.
	if buf == nil {
		buf = []byte{}
	}
	return buf, nil
}

// short is the error of a file that ended before its frames did.
func (fr *frameReader) short(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: it ends %d changes early", ErrBadSpool, fr.count)
	}
	return err
}

// uvarint reads a length as binary.AppendUvarint writes it: in its
// shortest form, which is the only one a spool holds (so that every byte
// read is counted, and a file decodes to the frames that encode it).
func (fr *frameReader) uvarint(what string) (uint64, error) {
	var n uint64
	for i := 0; i < binary.MaxVarintLen64; i++ {
		b, err := fr.r.ReadByte()
		if err != nil {
			return 0, fr.short(err)
		}
		fr.left--
		if i == binary.MaxVarintLen64-1 && b > 1 {
			break
		}
		n |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			if b == 0 && i > 0 {
				return 0, fmt.Errorf("%w: the %s length is not in its shortest form", ErrBadSpool, what)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%w: the %s length overflows 64 bits", ErrBadSpool, what)
}

// appendFrame appends the frame of one change to b.
func appendFrame(b []byte, key, value []byte, deleted bool) []byte {
	if deleted {
		b = append(b, frameDel)
		b = binary.AppendUvarint(b, uint64(len(key)))
		return append(b, key...)
	}
	b = append(b, framePut)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(len(value)))
	return append(b, value...)
}

// spoolWriter writes one commit's changes to a new file in dir, buffered
// and sequential: the capture encodes frames into a buffer, and a goroutine
// of the writer's (ended by finish or discard, one of which its owner
// always calls) writes each full buffer to the file while the next fills,
// so that the walk of a publish does not wait for the write system calls.
// At most spoolBuffers buffers exist: a walk faster than the writes waits
// for a free one.
//
// Nothing is synced: the spool is not durable state. It is read only by
// this process, through the page cache, which has what was written
// whether or not it reached the disk; a crash loses every feed anyway (a
// restart is a new epoch, whose cursors name no spooled commit), and the
// next read-write Open removes the leftovers (cleanFiles). An fsync would
// only make the publish that writes it wait for the disk.
type spoolWriter struct {
	f     *os.File
	buf   []byte
	count int64
	size  int64 // bytes encoded

	full    chan []byte // to the goroutine; closed by stop
	free    chan []byte // back from it
	done    chan error  // its first write error (or nil), once full is closed
	err     error       // set by stop
	stopped bool
}

// spoolWriteBuffer is how much a spoolWriter gathers before a write;
// spoolBuffers how many such buffers it has.
const (
	spoolWriteBuffer = 1 << 20
	spoolBuffers     = 3
)

// newSpoolWriter creates a spool file in dir, and dir if it is missing,
// and starts the goroutine that writes it.
func newSpoolWriter(dir string) (*spoolWriter, error) {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("create feed spool directory %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "*"+FeedSuffix)
	if err != nil {
		return nil, fmt.Errorf("create a feed spool file in %s: %w", dir, err)
	}
	w := &spoolWriter{f: f, buf: make([]byte, 0, spoolWriteBuffer),
		full: make(chan []byte, spoolBuffers), free: make(chan []byte, spoolBuffers), done: make(chan error, 1)}
	for range spoolBuffers - 1 {
		w.free <- make([]byte, 0, spoolWriteBuffer)
	}
	go w.run()
	return w, nil
}

// run writes the full buffers in order until full is closed. After a
// failed write it writes nothing more (the spool is incomplete: finish
// reports it) but still gives the buffers back.
func (w *spoolWriter) run() {
	var err error
	for b := range w.full {
		if err == nil {
			if _, werr := w.f.Write(b); werr != nil {
				err = fmt.Errorf("write feed spool file %s: %w", w.f.Name(), werr)
			}
		}
		if cap(b) > 2*spoolWriteBuffer {
			// One big value grew it: do not keep that.
			b = make([]byte, 0, spoolWriteBuffer)
		}
		w.free <- b[:0]
	}
	w.done <- err
}

// write adds one change.
func (w *spoolWriter) write(key, value []byte, deleted bool) {
	n := len(w.buf)
	w.buf = appendFrame(w.buf, key, value, deleted)
	w.size += int64(len(w.buf) - n)
	w.count++
	if len(w.buf) >= spoolWriteBuffer-maxFrameHeader {
		w.full <- w.buf
		w.buf = <-w.free
	}
}

// stop hands the goroutine what is buffered and waits for it to end.
func (w *spoolWriter) stop() error {
	if !w.stopped {
		w.stopped = true
		if len(w.buf) > 0 {
			w.full <- w.buf
		}
		close(w.full)
		w.err = <-w.done
		w.buf = nil
	}
	return w.err
}

// finish writes what is buffered and closes the file: the Spool then
// names it.
func (w *spoolWriter) finish() (*Spool, error) {
	err := w.stop()
	if cerr := w.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close feed spool file %s: %w", w.f.Name(), cerr)
	}
	if err != nil {
		_ = os.Remove(w.f.Name())
		return nil, err
	}
	return &Spool{Path: w.f.Name(), Count: w.count, Bytes: w.size}, nil
}

// discard stops the goroutine, closes and removes the file.
func (w *spoolWriter) discard() {
	_ = w.stop()
	_ = w.f.Close()
	_ = os.Remove(w.f.Name())
}
