package store

import (
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// DropTable removes table from the file in one bbolt transaction that:
//
//  1. reads the table's entry in tables/ (none: a *TableNotFoundError);
//  2. deletes the entry, so no reader finds the table any more;
//  3. deletes the published generation's bucket, and the generations
//     kept for rollback (DropKept); unpublished ones are not the table's
//     yet: a read-write Open removed every leftover of a crash, so any
//     other is a rebuild running in this process;
//  4. calls hook(tx) if not nil: the caller removes what it keeps beside
//     the table there (its checkpoint), so that it goes with the rows.
//
// If any step fails, hook included, nothing is committed and the table
// stays whole. A crash before the commit leaves the table as it was; after
// it, gone with everything in the same transaction.
//
// A rebuild of the table running in this process meanwhile is not stopped:
// its publish writes the table anew. (In another process none can run: a
// writer holds the file's lock.) DropTable returns the metadata of the
// table it dropped.
func (db *DB) DropTable(table string, hook func(tx *bolt.Tx) error) (TableMeta, error) {
	var m TableMeta
	if db.readOnly {
		return m, fmt.Errorf("drop table %q from %s: %w", table, db.path, ErrReadOnly)
	}
	err := db.update(func(tx *bolt.Tx) error {
		var err error
		m, _, err = db.lookup(tx, table)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return err
		}
		if err != nil {
			// A table whose published generation is missing can still
			// be dropped: that is how to get rid of it. Its metadata
			// must be readable.
			v := tx.Bucket(BucketTables).Get([]byte(table))
			if m, err = decodeMeta([]byte(table), v); err != nil {
				return err
			}
		}
		if err := tx.Bucket(BucketTables).Delete([]byte(table)); err != nil {
			return fmt.Errorf("delete entry: %w", err)
		}
		// The published generation only: an unpublished one is a rebuild's
		// in this process (a read-write Open removed every leftover of a
		// crash), which fails at its publish or writes the table anew.
		err = tx.Bucket(BucketGenerations).DeleteBucket(GenerationKey(m.Generation))
		if err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
			return fmt.Errorf("delete generation %d: %w", m.Generation, err)
		}
		// Its history goes with it (a read-write Open would remove kept
		// generations of a table that is gone anyway).
		if _, err := DropKept(tx, table); err != nil {
			return err
		}
		if hook != nil {
			if err := hook(tx); err != nil {
				return fmt.Errorf("hook: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return m, fmt.Errorf("drop table %q from %s: %w", table, db.path, err)
	}
	db.changed(table)
	db.observed(CommitDrop, table, 0, nil, nil)
	return m, nil
}
