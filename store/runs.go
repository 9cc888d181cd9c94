package store

import (
	"bufio"
	"bytes"
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/internal/failpoint"
)

// Sorted is a stream of rows in strictly ascending key order, the way a
// rebuild hands rows to the store when it sorts them itself (fold.Latest's
// held rows, a run file). A nil value is a tombstone: the key is deleted;
// an empty, non-nil value is a present empty value. The key and value Next
// returns are only valid until the following call.
type Sorted interface {
	Next() (key, value []byte, ok bool, err error)
}

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

// errUnsorted is returned when rows handed to SpillRun or WriteMerged are
// not in strictly ascending key order: a bug of the caller.
var errUnsorted = errors.New("rows not in strictly ascending key order")

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

// Combine makes the one row written for a key from the rows the key has
// in the merged sources, values[0] from the oldest source (a nil value is
// a tombstone). It is called once per key, in ascending key order, from
// the merge's goroutine; the key and values are valid only during the
// call, and the value returned until the next call. A nil value leaves the
// key out; an error stops the merge.
type Combine func(key []byte, values [][]byte) ([]byte, error)

// merge is the k-way merge of sorted sources into one Sorted. Without a
// combine, for a key in several sources, the last source's row wins
// (sources are given oldest first), and a winning tombstone drops the key;
// with one, combine makes the key's row from all of them.
type merge struct {
	h       mergeHeap
	advance []*mergeCursor // the last key's cursors, advanced at the next call
	combine Combine
	vals    [][]byte // combine's argument, reused
}

type mergeCursor struct {
	src      Sorted
	idx      int // position in the source list: higher is newer
	key, val []byte
	prev     []byte // the previous key, to check the order (the source reuses key)
	started  bool
}

type mergeHeap []*mergeCursor

func (h mergeHeap) Len() int { return len(h) }
func (h mergeHeap) Less(i, j int) bool {
	if c := bytes.Compare(h[i].key, h[j].key); c != 0 {
		return c < 0
	}
	return h[i].idx > h[j].idx // the newest first among equal keys
}
func (h mergeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)   { *h = append(*h, x.(*mergeCursor)) }
func (h *mergeHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// newMerge returns the merge of sources, oldest first; combine may be
// nil (the newest row wins).
func newMerge(sources []Sorted, combine Combine) (*merge, error) {
	m := &merge{combine: combine}
	for i, s := range sources {
		c := &mergeCursor{src: s, idx: i}
		ok, err := c.next()
		if err != nil {
			return nil, err
		}
		if ok {
			m.h = append(m.h, c)
		}
	}
	heap.Init(&m.h)
	return m, nil
}

func (c *mergeCursor) next() (bool, error) {
	if c.started {
		c.prev = append(c.prev[:0], c.key...)
	}
	k, v, ok, err := c.src.Next()
	if err != nil || !ok {
		return false, err
	}
	if c.started && bytes.Compare(c.prev, k) >= 0 {
		return false, fmt.Errorf("merge source %d: %w: key %q after %q", c.idx, errUnsorted, k, c.prev)
	}
	c.started = true
	c.key, c.val = k, v
	return true, nil
}

func (m *merge) Next() (key, value []byte, ok bool, err error) {
	for {
		for _, c := range m.advance {
			more, err := c.next()
			if err != nil {
				return nil, nil, false, err
			}
			if more {
				heap.Push(&m.h, c)
			}
		}
		m.advance = m.advance[:0]
		if len(m.h) == 0 {
			return nil, nil, false, nil
		}
		w := heap.Pop(&m.h).(*mergeCursor)
		m.advance = append(m.advance, w)
		if m.combine != nil {
			// Every source's row of the key, oldest first (the heap pops
			// the newest first among equal keys).
			for len(m.h) > 0 && bytes.Equal(m.h[0].key, w.key) {
				m.advance = append(m.advance, heap.Pop(&m.h).(*mergeCursor))
			}
			m.vals = m.vals[:0]
			for i := len(m.advance) - 1; i >= 0; i-- {
				m.vals = append(m.vals, m.advance[i].val)
			}
			v, err := m.combine(w.key, m.vals)
			if err != nil {
				return nil, nil, false, fmt.Errorf("combine key %q: %w", w.key, err)
			}
			if v == nil {
				continue
			}
			return w.key, v, true, nil
		}
		// Older rows of the same key lose: skip them.
		for len(m.h) > 0 && bytes.Equal(m.h[0].key, w.key) {
			c := m.h[0]
			more, err := c.next()
			if err != nil {
				return nil, nil, false, err
			}
			if more {
				heap.Fix(&m.h, 0)
			} else {
				heap.Pop(&m.h)
			}
		}
		if w.val == nil {
			continue // a tombstone: the key is deleted
		}
		return w.key, w.val, true, nil
	}
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

// cleanFiles removes the run files and compaction temporaries a crashed
// process left beside the database, returning how many. Only a read-write
// Open calls it: it holds the exclusive lock, so no rebuild or compaction
// is using them. A FILE.runs that is not a directory is left alone.
func cleanFiles(path string) (int, error) {
	n := 0
	for _, d := range []struct{ dir, suffix, what string }{
		{RunsDir(path), runSuffix, "run"},
		{SpoolDir(path), SpoolSuffix, "spool"},
	} {
		dir := d.dir
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() {
			continue
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return n, fmt.Errorf("remove leftover %s files in %s: %w", d.what, dir, err)
		}
		for _, e := range ents {
			if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), d.suffix) {
				continue
			}
			p := dir + string(os.PathSeparator) + e.Name()
			if err := os.Remove(p); err != nil {
				return n, fmt.Errorf("remove leftover %s file %s: %w", d.what, p, err)
			}
			n++
		}
		_ = os.Remove(dir) // only if empty
	}
	parent, base := filepath.Dir(path), filepath.Base(path)
	ents, err := os.ReadDir(parent)
	if err != nil {
		return n, nil // a directory we cannot list holds nothing we made
	}
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasPrefix(e.Name(), base+CompactTempPrefix) {
			p := parent + string(os.PathSeparator) + e.Name()
			if err := os.Remove(p); err != nil {
				return n, fmt.Errorf("remove leftover compaction file %s: %w", p, err)
			}
			n++
		}
	}
	return n, nil
}

// A merge commits its rows in blocks that grow from mergeFirstCommit to
// mergeCommitBytes, doubling at each commit. Large blocks make commits
// (each fsynced twice, data then meta) few: on 5M distinct keys, 8 MiB
// commits took 1.1 s in all against 1.4 s for 2 MiB ones. But bbolt can
// only start on a block once the merge has filled it, and a table of 100k
// rows waited for its first 8 MiB and then committed in one long
// transaction (190 ms from the end of the replay to the last commit, 115 ms
// with 2 MiB blocks): a small first block starts bbolt at once. Memory is
// two blocks of mergeCommitBytes, and a transaction's dirty pages.
const (
	mergeFirstCommit = 1 << 20
	mergeCommitBytes = 8 << 20
)

// WriteMerged writes the rows of the generation's run files (oldest first)
// merged with mem (the newest rows, not yet spilled; may be nil) into its
// rows bucket, which must be empty: for a key in several sources the newest
// row wins, and a winning tombstone leaves the key out. Rows go in in key
// order, committed in blocks of up to mergeCommitBytes, so bbolt only ever
// appends to the tree, filling whole pages. The keys are counted as they
// are written, and Publish records that count instead of walking the tree.
// The run files are removed whatever happens. A canceled ctx stops the
// merge between two commits with ctx's error.
func (g *Generation) WriteMerged(ctx context.Context, mem Sorted) error {
	return g.writeMerged(ctx, mem, nil, nil)
}

// WriteMergedIndex is WriteMerged into the generation's private index
// name (the one Rows.Index returns), which must be empty, with
// combine making each key's row from all of its sources' rows: for an
// index whose entries accumulate (the count fold's identities) rather than
// replace each other. The index's keys are not rows and are not counted.
func (g *Generation) WriteMergedIndex(ctx context.Context, name string, mem Sorted, combine Combine) error {
	if name == "" || combine == nil {
		defer g.removeRuns()
		return fmt.Errorf("merge into generation %d of table %q: index name %q or no combine: %w", g.id, g.table, name, ErrInvalidName)
	}
	return g.writeMerged(ctx, mem, []byte(name), combine)
}

// writeMerged merges the run files and mem into the rows bucket (index
// nil) or the index bucket index.
func (g *Generation) writeMerged(ctx context.Context, mem Sorted, index []byte, combine Combine) error {
	defer g.removeRuns()
	if g.done {
		return fmt.Errorf("write generation %d of table %q: %w", g.id, g.table, ErrGenerationDone)
	}
	buf := min(max(runReadBufferTotal/max(len(g.runs), 1), runReadBufferMin), runReadBuffer)
	sources := make([]Sorted, 0, len(g.runs)+1)
	for _, p := range g.runs {
		r, err := openRun(p, buf)
		if err != nil {
			return fmt.Errorf("merge generation %d of table %q: open run file %s: %w", g.id, g.table, p, err)
		}
		defer r.f.Close()
		sources = append(sources, r)
	}
	if mem != nil {
		sources = append(sources, mem)
	}
	m, err := newMerge(sources, combine)
	if err != nil {
		return fmt.Errorf("merge generation %d of table %q: %w", g.id, g.table, err)
	}
	return g.writeSorted(ctx, m, index)
}

// writeSorted appends src, in strictly ascending key order and without
// tombstones, to the empty rows bucket, and counts the rows; or, index not
// nil, to the empty index bucket index.
//
// Two goroutines share the work: one reads src (the merge: run files, the
// heap, the fold's rows) and copies the rows into a block (the first of
// mergeFirstCommit bytes, each next one twice as large up to
// mergeCommitBytes), while this one puts the previous block into bbolt and
// commits it. Two blocks circulate, so memory is two blocks.
func (g *Generation) writeSorted(ctx context.Context, src Sorted, index []byte) error {
	full := make(chan *rowBlock, 1)
	free := make(chan *rowBlock, 2)
	free <- &rowBlock{}
	free <- &rowBlock{}
	stop := make(chan struct{})
	var srcErr error
	go func() {
		defer close(full)
		limit := mergeFirstCommit
		for {
			var b *rowBlock
			select {
			case b = <-free:
			case <-stop:
				return
			}
			b.reset()
			if cap(b.data) < limit {
				// A row may end past the limit: room for one more.
				b.data = make([]byte, 0, limit+64<<10)
			}
			for b.size() < limit {
				k, v, ok, err := src.Next()
				if err != nil {
					srcErr = err
					return
				}
				if !ok {
					b.last = true
					break
				}
				b.add(k, v)
			}
			select {
			case full <- b:
			case <-stop:
				return
			}
			if b.last {
				return
			}
			limit = min(2*limit, mergeCommitBytes)
		}
	}()
	err := g.putBlocks(ctx, full, free, index)
	close(stop)
	for range full { // let the reader end
	}
	if srcErr != nil {
		return fmt.Errorf("merge generation %d of table %q: %w", g.id, g.table, srcErr)
	}
	return err
}

// putBlocks commits each block from full in one transaction, returning it
// to free, until full closes.
func (g *Generation) putBlocks(ctx context.Context, full <-chan *rowBlock, free chan<- *rowBlock, index []byte) error {
	var n int64
	first := true
	for b := range full {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("merge generation %d of table %q: %w", g.id, g.table, err)
		}
		err := g.db.bolt.Update(func(tx *bolt.Tx) error {
			gb, rows, err := g.rowsBucket(tx)
			if err != nil {
				return err
			}
			what := "rows bucket"
			if index != nil {
				what = fmt.Sprintf("index %q", index)
				ib := gb.Bucket(BucketIndex)
				if ib == nil {
					return fmt.Errorf("%w: generation %d has no index bucket", ErrCorrupt, g.id)
				}
				if rows, err = ib.CreateBucketIfNotExists(index); err != nil {
					return fmt.Errorf("index %q: %w", index, err)
				}
			}
			if first {
				if k, _ := rows.Cursor().First(); k != nil {
					return fmt.Errorf("merge into generation %d: its %s is not empty", g.id, what)
				}
				first = false
			}
			// Keys only ever grow: every page but the last fills up.
			rows.FillPercent = rowsFillPercent
			// bbolt keeps the key and value slices until the commit: the
			// block is not reused before.
			for i := range b.ends {
				k, v := b.row(i)
				if err := rows.Put(k, v); err != nil {
					return fmt.Errorf("put a row: %w", err)
				}
			}
			n += int64(len(b.ends))
			failpoint.Hit(failpoint.FoldCommitBefore) // a crash here leaves the old table; the next open removes the unpublished generation
			return nil
		})
		if err != nil {
			return fmt.Errorf("write generation %d of table %q to %s: %w", g.id, g.table, g.db.path, err)
		}
		failpoint.Hit(failpoint.FoldCommitAfter) // a crash here leaves the old table; the next open removes the unpublished generation and its committed rows
		free <- b
	}
	if index == nil {
		g.keys += n // the bucket was empty: g.keys was 0
	}
	return nil
}

// rowBlock is a batch of rows copied out of a merge: keys and values back
// to back in data, row i's key ending at ends[i].k and value at ends[i].v.
type rowBlock struct {
	data []byte
	ends []struct{ k, v int }
	last bool // the merge ended with this block
}

func (b *rowBlock) reset() {
	b.data, b.ends, b.last = b.data[:0], b.ends[:0], false
}

func (b *rowBlock) size() int { return len(b.data) }

func (b *rowBlock) add(k, v []byte) {
	b.data = append(b.data, k...)
	ke := len(b.data)
	b.data = append(b.data, v...)
	b.ends = append(b.ends, struct{ k, v int }{ke, len(b.data)})
}

func (b *rowBlock) row(i int) (k, v []byte) {
	start := 0
	if i > 0 {
		start = b.ends[i-1].v
	}
	e := b.ends[i]
	return b.data[start:e.k:e.k], b.data[e.k:e.v:e.v]
}
