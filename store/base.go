package store

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// An incremental update whose new rows do not fit one transaction builds a
// new generation from the published one (its base): the base's rows merged
// with the update's (WriteMergedOver), and its fold indexes copied
// (CopyIndexes). The base is read in chunks, each in its own short read or
// write transaction: a read transaction held across the new generation's
// commits would stop bbolt from growing the file (its remap waits for every
// read transaction), and this process is the one waiting.

// baseChunkBytes is how many bytes of the base's rows or index entries one
// transaction reads.
const baseChunkBytes = 4 << 20

// baseRows reads the rows of generation gen as a Sorted, a chunk per read
// transaction. The generation must not change while it is read: the caller
// checks, when it publishes, that nothing was applied to it meanwhile.
type baseRows struct {
	db    *DB
	gen   uint64
	block rowBlock
	i     int
	next  []byte // the first key of the next chunk; nil before the first
	done  bool
}

func (b *baseRows) Next() (key, value []byte, ok bool, err error) {
	if b.i == len(b.block.ends) {
		if b.done {
			return nil, nil, false, nil
		}
		if err := b.fill(); err != nil {
			return nil, nil, false, err
		}
		if len(b.block.ends) == 0 {
			return nil, nil, false, nil
		}
	}
	k, v := b.block.row(b.i)
	b.i++
	return k, v, true, nil
}

func (b *baseRows) fill() error {
	b.block.reset()
	b.i = 0
	return b.db.boltView(func(tx *bolt.Tx) error {
		rows, err := generationBucket(tx, b.gen, BucketRows)
		if err != nil {
			return err
		}
		c := rows.Cursor()
		var k, v []byte
		if b.next == nil {
			k, v = c.First()
		} else {
			k, v = c.Seek(b.next)
		}
		for ; k != nil; k, v = c.Next() {
			if b.block.size() >= baseChunkBytes {
				b.next = append(b.next[:0], k...)
				return nil
			}
			b.block.add(k, v)
		}
		b.done = true
		return nil
	})
}

// generationBucket returns the named sub-bucket of generation gen in tx.
func generationBucket(tx *bolt.Tx, gen uint64, name []byte) (*bolt.Bucket, error) {
	if tx.Bucket(BucketGenerations) == nil {
		return nil, fmt.Errorf("%w: no generations bucket", ErrCorrupt)
	}
	gb := genBucket(tx, gen)
	if gb == nil {
		return nil, fmt.Errorf("base generation %d: %w", gen, ErrGenerationGone)
	}
	b := gb.Bucket(name)
	if b == nil {
		return nil, fmt.Errorf("%w: generation %d has no %s bucket", ErrCorrupt, gen, name)
	}
	return b, nil
}

// WriteMergedOver is WriteMerged with the rows of generation base (a
// published generation of the same table) as the oldest source: the new
// generation holds base's rows with the run files and mem applied over
// them, newest last, tombstones deleting. Like WriteMerged, it writes in key
// order, committed in blocks, and removes the run files whatever happens.
func (g *Generation) WriteMergedOver(ctx context.Context, base uint64, mem Sorted) error {
	return g.writeMerged(ctx, base, mem, nil, nil)
}

// CopyIndexes copies the fold indexes of generation base into the new
// generation g, whose indexes must be empty, in key order (so bbolt only
// appends), one transaction per chunk of about baseChunkBytes. A count
// fold's update then dedupes and detects conflicts against everything the
// base table counted.
func (g *Generation) CopyIndexes(ctx context.Context, base uint64) error {
	if g.done {
		return fmt.Errorf("copy indexes into generation %d of table %q: %w", g.id, g.table, ErrGenerationDone)
	}
	var names [][]byte
	err := g.db.boltView(func(tx *bolt.Tx) error {
		idx, err := generationBucket(tx, base, BucketIndex)
		if err != nil {
			return err
		}
		return idx.ForEachBucket(func(k []byte) error {
			names = append(names, bytes.Clone(k))
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("copy indexes of generation %d: %w", base, err)
	}
	for _, name := range names {
		var next []byte
		for first := true; first || next != nil; first = false {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("copy index %q of generation %d: %w", name, base, err)
			}
			err := g.db.update(func(tx *bolt.Tx) error {
				from, err := generationBucket(tx, base, BucketIndex)
				if err != nil {
					return err
				}
				src := from.Bucket(name)
				gb, _, err := g.rowsBucket(tx)
				if err != nil {
					return err
				}
				dst, err := gb.Bucket(BucketIndex).CreateBucketIfNotExists(name)
				if err != nil {
					return err
				}
				dst.FillPercent = rowsFillPercent
				c := src.Cursor()
				k, v := c.First()
				if next != nil {
					k, v = c.Seek(next)
				}
				size := 0
				for ; k != nil; k, v = c.Next() {
					if size >= baseChunkBytes {
						next = bytes.Clone(k)
						return nil
					}
					if v == nil {
						return fmt.Errorf("%w: index %q of generation %d holds a bucket", ErrCorrupt, name, base)
					}
					// The source pages stay valid until the commit: bbolt
					// keeps the slices, which live in the mmap.
					if err := dst.Put(k, v); err != nil {
						return err
					}
					size += len(k) + len(v)
				}
				next = nil
				return nil
			})
			if err != nil {
				return fmt.Errorf("copy index %q of generation %d into generation %d of table %q: %w", name, base, g.id, g.table, err)
			}
		}
	}
	return nil
}
