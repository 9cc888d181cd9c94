// The checkpoints kept with a table's earlier generations: when a publish
// or a rollback keeps the published generation (store.Generation.Keep,
// store.DB.Rollback), the table's checkpoint goes with it, and a rollback
// brings it back. Package store finds the generation's bucket and calls
// these in its own transaction; what is copied, where in the generation's
// bucket, and how, is this package's.

package checkpoint

import (
	"bytes"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// KeptBucket is the name, inside a kept generation's bucket, of the copy of
// the table's checkpoint bucket as it was while the generation was
// published (format version 3 of the file, store/schema.go).
var KeptBucket = []byte("checkpoint")

// Keep copies table's checkpoint, as it is in tx, into gen, the bucket of
// the generation a publish or a rollback is about to keep, replacing any
// copy gen holds. A table without a checkpoint leaves an empty copy.
//
// The bucket is copied key by key rather than loaded and saved again: a key
// this build does not know (one a newer build wrote) survives the keep and
// a later rollback, and a checkpoint that does not decode is kept as it is,
// for Check to report, instead of failing the publish.
func Keep(tx *bolt.Tx, table string, gen *bolt.Bucket) error {
	if err := Drop(gen); err != nil {
		return err
	}
	dst, err := gen.CreateBucket(KeptBucket)
	if err != nil {
		return fmt.Errorf("keep the checkpoint of table %q: %w", table, err)
	}
	if root := tx.Bucket(Bucket); root != nil {
		if src := root.Bucket([]byte(table)); src != nil {
			if err := copyBucket(dst, src); err != nil {
				return fmt.Errorf("keep the checkpoint of table %q: copy it: %w", table, err)
			}
		}
	}
	return nil
}

// Restore replaces table's checkpoint in tx with the copy kept in gen (a
// kept generation's bucket that a rollback publishes again); a generation
// that keeps no copy leaves the table without a checkpoint. The copy stays
// in gen: Drop removes it once the generation is published again.
func Restore(tx *bolt.Tx, table string, gen *bolt.Bucket) error {
	root, err := tx.CreateBucketIfNotExists(Bucket)
	if err != nil {
		return fmt.Errorf("restore the checkpoint of table %q: %w", table, err)
	}
	if err := root.DeleteBucket([]byte(table)); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
		return fmt.Errorf("restore the checkpoint of table %q: replace the checkpoint: %w", table, err)
	}
	src := gen.Bucket(KeptBucket)
	if src == nil {
		return nil
	}
	dst, err := root.CreateBucket([]byte(table))
	if err != nil {
		return fmt.Errorf("restore the checkpoint of table %q: %w", table, err)
	}
	if err := copyBucket(dst, src); err != nil {
		return fmt.Errorf("restore the checkpoint of table %q: copy it: %w", table, err)
	}
	return nil
}

// Drop removes the copy of the checkpoint kept in gen, if it holds one: a
// published generation holds none (its checkpoint is the table's).
func Drop(gen *bolt.Bucket) error {
	if err := gen.DeleteBucket(KeptBucket); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
		return fmt.Errorf("drop the kept checkpoint: %w", err)
	}
	return nil
}

// HasKept reports whether gen holds a kept copy of a checkpoint: every kept
// generation must (store's Check).
func HasKept(gen *bolt.Bucket) bool { return gen.Bucket(KeptBucket) != nil }

// LoadKept returns the checkpoint of table kept in gen (a kept generation's
// bucket, or nil), as it was while the generation was published; ok is false
// if gen is nil or keeps none. store.KeptCheckpoint finds gen by number.
func LoadKept(gen *bolt.Bucket, table string) (cp Checkpoint, ok bool, err error) {
	if gen == nil {
		return Checkpoint{}, false, nil
	}
	tb := gen.Bucket(KeptBucket)
	if tb == nil {
		return Checkpoint{}, false, nil
	}
	return decode(tb, table)
}

// copyBucket copies every key and nested bucket of src into dst, cloning
// the values (src may be deleted in the same transaction).
func copyBucket(dst, src *bolt.Bucket) error {
	return src.ForEach(func(k, v []byte) error {
		if v != nil {
			return dst.Put(bytes.Clone(k), bytes.Clone(v))
		}
		sub, err := dst.CreateBucket(bytes.Clone(k))
		if err != nil {
			return err
		}
		return copyBucket(sub, src.Bucket(k))
	})
}
