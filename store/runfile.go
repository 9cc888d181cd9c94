// The run file: its format, its writer (Generation.SpillRun), its reader
// (runReader), and the files' life in RunsDir beside the database (created
// at a rebuild's first spill, removed when its merge ends). The merge that
// reads them back is merge.go; what a crash leaves, leftovers.go.

package store

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/internal/failpoint"
)

// A run file is a sorted, deduplicated batch of rows a rebuild spilled
// because it no longer fit its memory budget (see Generation.SpillRun). It
// lives in RunsDir beside the database only while its rebuild runs; nothing
// reads it after a crash, so it is neither fsynced nor, uncompressed,
// checksummed (the compressed codecs check their own CRCs). It is
//
//	"KMRUN" | format version 1 | codec byte (runCodec) | body
//
// where the body, compressed as a stream by the codec, is entries
//
//	uvarint len(key) | uvarint len(value)+1, or 0 for a tombstone | key | value
//
// in strictly ascending key order (checked as it is read).
// A damaged file is reported as errRunDamaged naming the file: a bad
// header, a length over bbolt's limits, a short entry, a codec's CRC.
const runMagic = "KMRUN\x01"

// runCodec is how a run file's body is compressed.
type runCodec byte

const (
	runPlain runCodec = iota // uncompressed
	runS2                    // klauspost/compress s2 stream, CRC per block
	runZstd                  // zstd at its fastest level, frame CRC
)

func (c runCodec) String() string {
	switch c {
	case runPlain:
		return "none"
	case runS2:
		return "s2"
	case runZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec %d", byte(c))
}

// EnvRunCompression names the run files' codec: "none" (the default), "s2"
// or "zstd" (its fastest level). It is a measuring knob, not a supported
// setting: it exists so that a whole rebuild can be timed with each codec
// (issue 22), and it goes away once one is chosen. The default is none
// because compressing only pays when the run files' bytes reach the disk:
// a run file lives for seconds and is removed after the merge, so with
// the page cache larger than the runs (the 5M-key rebuild's 14 runs are
// about 570 MB) its pages are never written back, and the codec is CPU
// spent beside the replay for nothing. BenchmarkSpillMerge (a loaded
// 2-core machine) measured s2 at a seventh of the bytes on the bench's
// values (9% fewer on random ones) for 1.5 times the spill's CPU (3 times
// on random values), zstd at a eighteenth (12% fewer) for 3 times (8
// times), and neither made the merge measurably faster.
const EnvRunCompression = "KMATERIALIZE_RUN_COMPRESSION"

// runCodecFromEnv returns the codec EnvRunCompression names.
func runCodecFromEnv() (runCodec, error) {
	switch v := os.Getenv(EnvRunCompression); v {
	case "", "none":
		return runPlain, nil
	case "s2":
		return runS2, nil
	case "zstd":
		return runZstd, nil
	default:
		return 0, fmt.Errorf("%s=%q: want none, s2 or zstd", EnvRunCompression, v)
	}
}

// errRunDamaged is returned, wrapped with the file's path, when a run file
// cannot be read back as it was written.
var errRunDamaged = errors.New("run file is damaged")

// runWriteBuffer and runReadBuffer bound the memory of one run file's
// writer and of each reader during the merge; runCodecBlock bounds a
// compressed block (s2) or window (zstd), on both sides.
const (
	runWriteBuffer = 1 << 20
	runReadBuffer  = 256 << 10
	// runReadBufferMin is the smallest reader buffer when a merge opens many
	// runs: runReadBufferTotal is shared between them.
	runReadBufferMin   = 16 << 10
	runReadBufferTotal = 16 << 20
	runCodecBlock      = 128 << 10
)

// SpillRun writes src, which must be in strictly ascending key order, as
// the generation's next run file (RunPath), for WriteMerged to merge later.
// On error the file is removed and the error names it.
func (g *Generation) SpillRun(src Sorted) error {
	if g.done {
		return fmt.Errorf("spill generation %d of table %q: %w", g.id, g.table, ErrGenerationDone)
	}
	codec, err := runCodecFromEnv()
	if err != nil {
		return fmt.Errorf("spill generation %d of table %q: %w", g.id, g.table, err)
	}
	path := RunPath(g.db.path, g.id, len(g.runs)+1)
	f, err := g.db.createRun(path)
	if err != nil {
		return fmt.Errorf("spill generation %d of table %q: create run file %s: %w", g.id, g.table, path, err)
	}
	g.runs = append(g.runs, path)
	if err := writeRun(f, src, codec); err != nil {
		_ = f.Close()
		g.removeRuns()
		return fmt.Errorf("spill generation %d of table %q: write run file %s: %w", g.id, g.table, path, err)
	}
	if err := f.Close(); err != nil {
		g.removeRuns()
		return fmt.Errorf("spill generation %d of table %q: write run file %s: %w", g.id, g.table, path, err)
	}
	failpoint.Hit(failpoint.RunWritten) // a crash here leaves the old table, an empty unpublished generation and run files; the next read-write open removes them
	return nil
}

// writeRun writes src to w as a run file compressed with codec.
func writeRun(w io.Writer, src Sorted, codec runCodec) error {
	bw := bufio.NewWriterSize(w, runWriteBuffer)
	if _, err := bw.WriteString(runMagic); err != nil {
		return err
	}
	if err := bw.WriteByte(byte(codec)); err != nil {
		return err
	}
	var body io.Writer = bw
	var closeBody func() error
	switch codec {
	case runPlain:
	case runS2:
		// One goroutine (this one): the spill already runs beside the
		// replay on a shared machine.
		zw := s2.NewWriter(bw, s2.WriterConcurrency(1), s2.WriterBlockSize(runCodecBlock))
		body, closeBody = zw, zw.Close
	case runZstd:
		zw, err := zstd.NewWriter(bw, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(runCodecBlock), zstd.WithEncoderCRC(true))
		if err != nil {
			return err
		}
		body, closeBody = zw, zw.Close
	default:
		return fmt.Errorf("unknown run codec %d", codec)
	}
	if err := writeEntries(body, src); err != nil {
		if closeBody != nil {
			_ = closeBody()
		}
		return err
	}
	if closeBody != nil {
		if err := closeBody(); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// writeEntries writes src's rows to w, checking their order. A write
// through w is made per row: w buffers (bufio.Writer, or a codec's block).
func writeEntries(w io.Writer, src Sorted) error {
	var buf []byte
	var prev []byte
	for first := true; ; first = false {
		k, v, ok, err := src.Next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if !first && bytes.Compare(prev, k) >= 0 {
			return fmt.Errorf("%w: key %q after %q", errUnsorted, k, prev)
		}
		prev = append(prev[:0], k...)
		vl := uint64(0)
		if v != nil {
			vl = uint64(len(v)) + 1
		}
		buf = binary.AppendUvarint(buf[:0], uint64(len(k)))
		buf = binary.AppendUvarint(buf, vl)
		buf = append(buf, k...)
		buf = append(buf, v...)
		if _, err := w.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

// Runs returns how many run files the generation has spilled.
func (g *Generation) Runs() int { return len(g.runs) }

// runReader reads one run file as a Sorted. Next returns the entry in
// place in r's buffer when it fits, else in key and val: either way valid
// until the next call, as Sorted says.
type runReader struct {
	path    string
	r       *bufio.Reader
	close   func() error // the codec's reader and the file
	entry   int          // entries read, for errors
	key     []byte       // an entry larger than r's buffer
	val     []byte
	prev    []byte // the previous key, to check the order
	maxVal  int    // the longest value accepted: maxRunValue (lowered by the fuzz test)
	damaged error  // the first error, returned again by every later call
}

// maxRunValue is the longest value a run file may hold: bbolt's limit, as
// a rebuild's rows all go into bbolt.
const maxRunValue = bolt.MaxValueSize

func openRun(path string, buf int) (*runReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	r, err := newRunReader(path, f, buf)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	closeCodec := r.close
	r.close = func() error {
		err := closeCodec()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	return r, nil
}

// newRunReader reads the header of the run file in src (named path in
// errors) and returns its reader, reading through a buffer of buf bytes.
func newRunReader(path string, src io.Reader, buf int) (*runReader, error) {
	var hdr [len(runMagic) + 1]byte
	if _, err := io.ReadFull(src, hdr[:]); err != nil {
		return nil, fmt.Errorf("read run file %s: header: %w: %w", path, errRunDamaged, noEOF(err))
	}
	if string(hdr[:len(runMagic)]) != runMagic {
		return nil, fmt.Errorf("read run file %s: header %q, want %q: %w", path, hdr[:len(runMagic)], runMagic, errRunDamaged)
	}
	r := &runReader{path: path, close: func() error { return nil }, maxVal: maxRunValue}
	switch codec := runCodec(hdr[len(runMagic)]); codec {
	case runPlain:
		r.r = bufio.NewReaderSize(src, buf)
	case runS2:
		zr := s2.NewReader(src, s2.ReaderMaxBlockSize(runCodecBlock))
		r.r = bufio.NewReaderSize(zr, buf)
	case runZstd:
		zr, err := zstd.NewReader(src, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(runCodecBlock))
		if err != nil {
			return nil, fmt.Errorf("read run file %s: %w", path, err)
		}
		r.r = bufio.NewReaderSize(zr, buf)
		r.close = func() error { zr.Close(); return nil }
	default:
		return nil, fmt.Errorf("read run file %s: unknown codec %d: %w", path, byte(codec), errRunDamaged)
	}
	return r, nil
}

func (r *runReader) Next() (key, value []byte, ok bool, err error) {
	if r.damaged != nil {
		return nil, nil, false, r.damaged
	}
	key, value, ok, err = r.next()
	if err != nil {
		// The file's own read errors are *fs.PathError; any other error
		// (a short entry, a bad length, a codec's CRC or framing) says
		// the bytes are not what SpillRun wrote.
		var pe *fs.PathError
		if !errors.As(err, &pe) && !errors.Is(err, errRunDamaged) {
			err = fmt.Errorf("%w: %w", errRunDamaged, err)
		}
		r.damaged = fmt.Errorf("read run file %s: entry %d: %w", r.path, r.entry+1, err)
		return nil, nil, false, r.damaged
	}
	if !ok {
		return nil, nil, false, nil
	}
	// The order is part of the format: a damaged file out of order is
	// reported here, naming the file (the merge's own check would not),
	// rather than at the codec's CRC at the end of a zstd frame.
	if r.entry > 0 && bytes.Compare(r.prev, key) >= 0 {
		r.damaged = fmt.Errorf("read run file %s: entry %d: key %q after %q: %w", r.path, r.entry+1, key, r.prev, errRunDamaged)
		return nil, nil, false, r.damaged
	}
	r.prev = append(r.prev[:0], key...)
	r.entry++
	return key, value, true, nil
}

func (r *runReader) next() (key, value []byte, ok bool, err error) {
	// Both lengths at once: Peek returns fewer bytes only at the end (or
	// past the buffer's size, which is at least 16 bytes: bufio's least).
	p, perr := r.r.Peek(min(2*binary.MaxVarintLen64, r.r.Size()))
	if len(p) == 0 {
		if errors.Is(perr, io.EOF) {
			return nil, nil, false, nil
		}
		return nil, nil, false, perr
	}
	kl, n := binary.Uvarint(p)
	if n <= 0 {
		return nil, nil, false, lengthErr("key", n, perr)
	}
	vl, m := binary.Uvarint(p[n:])
	if m <= 0 {
		return nil, nil, false, lengthErr("value", m, perr)
	}
	if kl > bolt.MaxKeySize {
		return nil, nil, false, fmt.Errorf("key length %d over the maximum %d: %w", kl, bolt.MaxKeySize, errRunDamaged)
	}
	if vl > uint64(r.maxVal)+1 {
		return nil, nil, false, fmt.Errorf("value length %d over the maximum %d: %w", vl-1, r.maxVal, errRunDamaged)
	}
	if _, err := r.r.Discard(n + m); err != nil {
		return nil, nil, false, err
	}
	size := int(kl) + max(int(vl)-1, 0)
	if size <= r.r.Size() {
		// In place: no copy. The slice stays valid until the next read
		// of r.r, which is the next call.
		b, err := r.r.Peek(size)
		if err != nil {
			return nil, nil, false, noEOF(err)
		}
		if _, err := r.r.Discard(size); err != nil {
			return nil, nil, false, err
		}
		if vl == 0 {
			return b[:kl:kl], nil, true, nil
		}
		return b[:kl:kl], b[kl:size:size], true, nil
	}
	if r.key, err = readN(r.r, r.key, int(kl)); err != nil {
		return nil, nil, false, err
	}
	if vl == 0 {
		return r.key, nil, true, nil
	}
	if r.val, err = readN(r.r, r.val, int(vl-1)); err != nil {
		return nil, nil, false, err
	}
	return r.key, r.val, true, nil
}

// lengthErr explains binary.Uvarint's result n <= 0 for a length.
func lengthErr(what string, n int, peekErr error) error {
	if n == 0 { // short: the file ends inside the varint
		if peekErr == nil {
			peekErr = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%s length: %w", what, noEOF(peekErr))
	}
	return fmt.Errorf("%s length overflows 64 bits: %w", what, errRunDamaged)
}

// readN reads n bytes from r into b (reused when large enough), non-nil
// (an empty value stays present). It grows b as the bytes arrive, so a
// damaged length costs at most the file's size in memory, not the length.
func readN(r io.Reader, b []byte, n int) ([]byte, error) {
	if cap(b) >= n && b != nil {
		b = b[:n]
		if _, err := io.ReadFull(r, b); err != nil {
			return b, noEOF(err)
		}
		return b, nil
	}
	b = b[:0]
	for len(b) < n {
		chunk := min(n-len(b), 1<<20)
		b = slices.Grow(b, chunk)
		if _, err := io.ReadFull(r, b[len(b):len(b)+chunk]); err != nil {
			return b, noEOF(err)
		}
		b = b[:len(b)+chunk]
	}
	if b == nil {
		b = []byte{}
	}
	return b, nil
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// openRuns opens the generation's run files, oldest first, as merge
// sources, sharing runReadBufferTotal between their readers; closeRuns
// closes them. On error none is left open and the error names the file.
func (g *Generation) openRuns() (runs []Sorted, closeRuns func(), err error) {
	buf := min(max(runReadBufferTotal/max(len(g.runs), 1), runReadBufferMin), runReadBuffer)
	opened := make([]*runReader, 0, len(g.runs))
	closeRuns = func() {
		for _, r := range opened {
			_ = r.close()
		}
	}
	runs = make([]Sorted, 0, len(g.runs))
	for _, path := range g.runs {
		r, err := openRun(path, buf)
		if err != nil {
			closeRuns()
			return nil, nil, fmt.Errorf("merge generation %d of table %q: open run file %s: %w", g.id, g.table, path, err)
		}
		opened = append(opened, r)
		runs = append(runs, r)
	}
	return runs, closeRuns, nil
}

// removeRuns removes the generation's run files, and the runs directory if
// that leaves it empty. Errors are ignored: a file left behind is removed by
// the next read-write Open.
func (g *Generation) removeRuns() {
	for _, p := range g.runs {
		_ = os.Remove(p)
	}
	if len(g.runs) > 0 {
		g.db.removeRunsDirIfEmpty()
	}
	g.runs = nil
}

// createRun creates a run file, and RunsDir first if needed. db.runsMu keeps
// another generation of this process from removing the directory between
// the two.
func (db *DB) createRun(path string) (*os.File, error) {
	db.runsMu.Lock()
	defer db.runsMu.Unlock()
	if err := os.Mkdir(RunsDir(db.path), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
}

func (db *DB) removeRunsDirIfEmpty() {
	db.runsMu.Lock()
	defer db.runsMu.Unlock()
	_ = os.Remove(RunsDir(db.path)) // fails, harmlessly, when not empty
}
