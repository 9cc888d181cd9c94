// The k-way merge: Sorted streams (run files, the fold's held rows, a base
// generation's rows) merged into one, newest row winning or a Combine making
// each key's row, and WriteMerged, which writes that merge into an empty
// generation through the sorted writer (sortedwrite.go).

package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
)

// Sorted is a stream of rows in strictly ascending key order, the way a
// rebuild hands rows to the store when it sorts them itself (fold.Latest's
// held rows, a run file). A nil value is a tombstone: the key is deleted;
// an empty, non-nil value is a present empty value. The key and value Next
// returns are only valid until the following call.
type Sorted interface {
	Next() (key, value []byte, ok bool, err error)
}

// errUnsorted is returned when rows handed to SpillRun or WriteMerged are
// not in strictly ascending key order: a bug of the caller.
var errUnsorted = errors.New("rows not in strictly ascending key order")

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
	advance []*mergeCursor // with combine: the last key's cursors, advanced at the next call
	combine Combine
	vals    [][]byte // combine's argument, reused
	// Without combine, the row returned last is the heap's top, left in
	// place (top) to be advanced at the next call and sifted down once,
	// rather than popped and pushed back; last is its key, copied, to skip
	// the key's older rows then.
	top  bool
	last []byte
}

type mergeCursor struct {
	src      Sorted
	idx      int // position in the source list: higher is newer
	key, val []byte
	prev     []byte // the previous key, to check the order (the source reuses key)
	started  bool
	ordered  bool // the source checks its own order (a run file): prev is not kept
}

// mergeHeap is a binary min-heap of cursors by key, the newest source
// first among equal keys. It is written out rather than container/heap's,
// whose Push and Pop pass each cursor through an any and whose every Less
// and Swap is a call through heap.Interface: the merge moves every row
// through the heap. (The any never allocated, a cursor being a pointer:
// this saves calls, not allocations.)
type mergeHeap []*mergeCursor

func (h mergeHeap) less(i, j int) bool {
	if c := bytes.Compare(h[i].key, h[j].key); c != 0 {
		return c < 0
	}
	return h[i].idx > h[j].idx // the newest first among equal keys
}

func (h mergeHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// down moves h[i] down to its place.
func (h mergeHeap) down(i int) {
	for {
		j := 2*i + 1
		if j >= len(h) {
			return
		}
		if r := j + 1; r < len(h) && h.less(r, j) {
			j = r
		}
		if !h.less(j, i) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

func (h *mergeHeap) push(c *mergeCursor) {
	*h = append(*h, c)
	for j := len(*h) - 1; j > 0; {
		i := (j - 1) / 2
		if !h.less(j, i) {
			return
		}
		(*h)[i], (*h)[j] = (*h)[j], (*h)[i]
		j = i
	}
}

// pop removes and returns the least cursor.
func (h *mergeHeap) pop() *mergeCursor {
	old := *h
	c := old[0]
	n := len(old) - 1
	old[0] = old[n]
	old[n] = nil
	*h = old[:n]
	h.down(0)
	return c
}

// newMerge returns the merge of sources, oldest first; combine may be
// nil (the newest row wins).
func newMerge(sources []Sorted, combine Combine) (*merge, error) {
	m := &merge{combine: combine}
	for i, s := range sources {
		_, ordered := s.(*runReader)
		c := &mergeCursor{src: s, idx: i, ordered: ordered}
		ok, err := c.next()
		if err != nil {
			return nil, err
		}
		if ok {
			m.h = append(m.h, c)
		}
	}
	m.h.init()
	return m, nil
}

func (c *mergeCursor) next() (bool, error) {
	check := c.started && !c.ordered
	if check {
		c.prev = append(c.prev[:0], c.key...)
	}
	k, v, ok, err := c.src.Next()
	if err != nil || !ok {
		return false, err
	}
	if check && bytes.Compare(c.prev, k) >= 0 {
		return false, fmt.Errorf("merge source %d: %w: key %q after %q", c.idx, errUnsorted, k, c.prev)
	}
	c.started = true
	c.key, c.val = k, v
	return true, nil
}

func (m *merge) Next() (key, value []byte, ok bool, err error) {
	if m.combine == nil {
		return m.nextNewest()
	}
	for {
		for _, c := range m.advance {
			more, err := c.next()
			if err != nil {
				return nil, nil, false, err
			}
			if more {
				m.h.push(c)
			}
		}
		m.advance = m.advance[:0]
		if len(m.h) == 0 {
			return nil, nil, false, nil
		}
		w := m.h.pop()
		m.advance = append(m.advance, w)
		// Every source's row of the key, oldest first (the heap pops the
		// newest first among equal keys).
		for len(m.h) > 0 && bytes.Equal(m.h[0].key, w.key) {
			m.advance = append(m.advance, m.h.pop())
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
}

// nextNewest is Next without combine: the newest row of each key, a
// tombstone leaving the key out.
func (m *merge) nextNewest() (key, value []byte, ok bool, err error) {
	for {
		if m.top {
			m.top = false
			if err := m.advanceTop(); err != nil {
				return nil, nil, false, err
			}
			// Older rows of the key returned last lose: skip them.
			for len(m.h) > 0 && bytes.Equal(m.h[0].key, m.last) {
				if err := m.advanceTop(); err != nil {
					return nil, nil, false, err
				}
			}
		}
		if len(m.h) == 0 {
			return nil, nil, false, nil
		}
		w := m.h[0]
		m.last = append(m.last[:0], w.key...)
		m.top = true
		if w.val == nil {
			continue // a tombstone: the key is deleted
		}
		return w.key, w.val, true, nil
	}
}

// advanceTop moves the heap's top cursor to its next row, or out of the
// heap at its end.
func (m *merge) advanceTop() error {
	more, err := m.h[0].next()
	if err != nil {
		return err
	}
	if more {
		m.h.down(0)
	} else {
		m.h.pop()
	}
	return nil
}

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
	return g.writeMerged(ctx, 0, mem, nil, nil)
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
	return g.writeMerged(ctx, 0, mem, []byte(name), combine)
}

// writeMerged merges the rows of generation base (0: none; WriteMergedOver),
// the run files and mem, oldest first, into the rows bucket (index nil) or
// the index bucket index.
func (g *Generation) writeMerged(ctx context.Context, base uint64, mem Sorted, index []byte, combine Combine) error {
	defer g.removeRuns()
	if g.done {
		return fmt.Errorf("write generation %d of table %q: %w", g.id, g.table, ErrGenerationDone)
	}
	runs, closeRuns, err := g.openRuns()
	if err != nil {
		return err
	}
	defer closeRuns()
	sources := make([]Sorted, 0, len(runs)+2) // a base, the runs, mem
	over := ""
	if base != 0 {
		sources = append(sources, &baseRows{db: g.db, gen: base})
		over = fmt.Sprintf(" over generation %d", base)
	}
	sources = append(sources, runs...)
	if mem != nil {
		sources = append(sources, mem)
	}
	m, err := newMerge(sources, combine)
	if err != nil {
		return fmt.Errorf("merge generation %d of table %q%s: %w", g.id, g.table, over, err)
	}
	return g.writeSorted(ctx, m, index)
}
