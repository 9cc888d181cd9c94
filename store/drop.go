package store

import (
	"bytes"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// DropTable removes table from the file in one bbolt transaction that:
//
//  1. reads the table's entry in tables/ (none: a *TableNotFoundError);
//  2. deletes the entry, so no reader finds the table any more;
//  3. deletes the published generation's bucket and every other
//     generation bucket begun for the table (leftovers of a crashed
//     rebuild; a read-write Open removes them anyway);
//  4. calls hook(tx) if not nil: the caller removes what it keeps beside
//     the table there (its checkpoint), so that it goes with the rows.
//
// If any step fails, hook included, nothing is committed and the table
// stays whole. A crash before the commit leaves the table as it was; after
// it, gone with everything in the same transaction.
//
// The caller must not drop a table while a Generation of it is being
// written in this process: the generation would be deleted under it. (In
// another process it cannot be: a writer holds the file's lock.) DropTable
// returns the metadata of the table it dropped.
func (db *DB) DropTable(table string, hook func(tx *bolt.Tx) error) (TableMeta, error) {
	var m TableMeta
	if db.readOnly {
		return m, fmt.Errorf("drop table %q from %s: %w", table, db.path, ErrReadOnly)
	}
	err := db.bolt.Update(func(tx *bolt.Tx) error {
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
		gens := tx.Bucket(BucketGenerations)
		var drop [][]byte
		c := gens.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if v != nil {
				continue // not a bucket; nothing of ours
			}
			gen, ok := decodeUint64(k)
			gb := gens.Bucket(k)
			if ok && gen == m.Generation || bytes.Equal(gb.Get(KeyGenerationTable), []byte(table)) {
				drop = append(drop, bytes.Clone(k))
			}
		}
		// Deleting inside the cursor loop would disturb it.
		for _, k := range drop {
			if err := gens.DeleteBucket(k); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
				return fmt.Errorf("delete generation %x: %w", k, err)
			}
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
	return m, nil
}
