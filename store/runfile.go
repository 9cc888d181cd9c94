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

	"github.com/kmaterialize/kmaterialize/internal/failpoint"
)

// A run file is a sorted, deduplicated batch of rows a rebuild spilled
// because it no longer fit its memory budget (see Generation.SpillRun). It
// lives in RunsDir beside the database only while its rebuild runs; nothing
// reads it after a crash, so it is neither checksummed nor fsynced. Each
// entry is
//
//	uvarint len(key) | uvarint len(value)+1, or 0 for a tombstone | key | value
//
// in strictly ascending key order.

// runWriteBuffer and runReadBuffer bound the memory of one run file's
// writer and of each reader during the merge.
const (
	runWriteBuffer = 1 << 20
	runReadBuffer  = 256 << 10
	// runReadBufferMin is the smallest reader buffer when a merge opens many
	// runs: runReadBufferTotal is shared between them.
	runReadBufferMin   = 16 << 10
	runReadBufferTotal = 16 << 20
)

// SpillRun writes src, which must be in strictly ascending key order, as
// the generation's next run file (RunPath), for WriteMerged to merge later.
// On error the file is removed and the error names it.
func (g *Generation) SpillRun(src Sorted) error {
	if g.done {
		return fmt.Errorf("spill generation %d of table %q: %w", g.id, g.table, ErrGenerationDone)
	}
	path := RunPath(g.db.path, g.id, len(g.runs)+1)
	f, err := g.db.createRun(path)
	if err != nil {
		return fmt.Errorf("spill generation %d of table %q: create run file %s: %w", g.id, g.table, path, err)
	}
	g.runs = append(g.runs, path)
	if err := writeRun(f, src); err != nil {
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

func writeRun(f *os.File, src Sorted) error {
	w := bufio.NewWriterSize(f, runWriteBuffer)
	var hdr [2 * binary.MaxVarintLen64]byte
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
		n := binary.PutUvarint(hdr[:], uint64(len(k)))
		vl := uint64(0)
		if v != nil {
			vl = uint64(len(v)) + 1
		}
		n += binary.PutUvarint(hdr[n:], vl)
		if _, err := w.Write(hdr[:n]); err != nil {
			return err
		}
		if _, err := w.Write(k); err != nil {
			return err
		}
		if _, err := w.Write(v); err != nil {
			return err
		}
	}
	return w.Flush()
}

// Runs returns how many run files the generation has spilled.
func (g *Generation) Runs() int { return len(g.runs) }

// runReader reads one run file as a Sorted.
type runReader struct {
	path string
	f    *os.File
	r    *bufio.Reader
	key  []byte
	val  []byte
}

func openRun(path string, buf int) (*runReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return &runReader{path: path, f: f, r: bufio.NewReaderSize(f, buf), val: make([]byte, 0, 64)}, nil
}

func (r *runReader) Next() (key, value []byte, ok bool, err error) {
	kl, err := binary.ReadUvarint(r.r)
	if errors.Is(err, io.EOF) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("read run file %s: %w", r.path, err)
	}
	vl, err := binary.ReadUvarint(r.r)
	if err != nil {
		return nil, nil, false, fmt.Errorf("read run file %s: %w", r.path, noEOF(err))
	}
	r.key = grow(r.key, int(kl))
	if _, err := io.ReadFull(r.r, r.key); err != nil {
		return nil, nil, false, fmt.Errorf("read run file %s: %w", r.path, noEOF(err))
	}
	if vl == 0 {
		return r.key, nil, true, nil
	}
	r.val = grow(r.val, int(vl-1))
	if _, err := io.ReadFull(r.r, r.val); err != nil {
		return nil, nil, false, fmt.Errorf("read run file %s: %w", r.path, noEOF(err))
	}
	return r.key, r.val, true, nil
}

// grow returns b resliced to n bytes, non-nil (an empty value stays
// present).
func grow(b []byte, n int) []byte {
	if cap(b) < n || b == nil {
		return make([]byte, n, max(n, 2*cap(b), 64))
	}
	return b[:n]
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
			_ = r.f.Close()
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
