// The sorted writer: rows in strictly ascending key order appended to an
// empty bucket of a new generation (its rows, or one of its indexes) in
// growing blocks, each block its own transaction, so that bbolt only ever
// appends and fills whole pages. WriteMerged (merge.go) and
// WriteMergedOver (base.go) write through it.

package store

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/internal/failpoint"
)

// A merge commits its rows in blocks that grow from mergeFirstCommit to
// mergeCommitBytes, doubling at each commit. Large blocks make commits
// (each fsynced twice, data then meta) few; but bbolt can only start on a
// block once the merge has filled it, so a large first block would hold
// a small table's whole write in one late transaction: a small first block
// starts bbolt at once. Memory is two blocks of mergeCommitBytes, and a
// transaction's dirty pages. The measurements behind both sizes are in
// bench/RESULTS.md ("Where the time went: the tail after the replay").
const (
	mergeFirstCommit = 1 << 20
	mergeCommitBytes = 8 << 20
	// minRowGuess sizes a block's row index: the rows of the bench's
	// tables are 112 bytes (12-byte keys, 100-byte values).
	minRowGuess = 64
)

// Pacer shares the CPU that a generation's merge takes with the rest of
// the process (the daemon's read path; internal/cpushare.Share is one):
// each unit of the merge, a block built and a block committed, runs
// between Acquire and Release, and Acquire is called outside any
// transaction and without a block held back from the other goroutine, so
// that a pacer with one slot cannot deadlock the two.
type Pacer interface {
	Acquire(ctx context.Context) error
	Release()
}

// Pace makes the generation's merges (WriteMerged, WriteMergedIndex,
// WriteMergedOver) take turns on p; nil (the default) runs them unpaced.
func (g *Generation) Pace(p Pacer) { g.pacer = p }

// acquire and release are the pacer's, when there is one.
func (g *Generation) acquire(ctx context.Context) error {
	if g.pacer == nil {
		return nil
	}
	return g.pacer.Acquire(ctx)
}

func (g *Generation) release() {
	if g.pacer != nil {
		g.pacer.Release()
	}
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
			if err := g.acquire(ctx); err != nil {
				srcErr = err
				return
			}
			b.reset()
			if cap(b.data) < limit {
				// A row may end past the limit: room for one more. The
				// ends are sized for rows of minRowGuess bytes, so that
				// rows as small or larger never grow them.
				b.data = make([]byte, 0, limit+64<<10)
				b.ends = make([]struct{ k, v int }, 0, limit/minRowGuess)
			}
			for b.size() < limit {
				k, v, ok, err := src.Next()
				if err != nil {
					g.release()
					srcErr = err
					return
				}
				if !ok {
					b.last = true
					break
				}
				b.add(k, v)
			}
			g.release()
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
		if err := g.acquire(ctx); err != nil {
			return fmt.Errorf("merge generation %d of table %q: %w", g.id, g.table, err)
		}
		err := g.db.update(func(tx *bolt.Tx) error {
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
		g.release()
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
