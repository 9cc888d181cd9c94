package store

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// migration turns a file of format version from into from+1, inside the
// read-write Open's transaction: a crash during it leaves the file at its
// old version, and the next read-write Open starts again.
type migration struct {
	from uint64
	// readable says a read-only Open of a file at version from can serve
	// every read of this build without migrating it (the change only adds
	// what reads do not need). A read-only Open of a file at an older,
	// unreadable version is refused with a hint to run a read-write command.
	readable bool
	what     string
	apply    func(tx *bolt.Tx) error
}

// migrations, in order; migrations[i].from == i+1. Adding a layout change:
// bump FormatVersion, append its step here, and test it against a fixture
// file made by the previous version (testdata/store/v<N>/).
var migrations = []migration{
	{from: 1, readable: true, what: "record each published generation's state and row count", apply: migrateV1},
	// v2 files have no kept generations: nothing to change but the
	// version, which keeps older builds (which would remove kept
	// generations as leftovers) from writing to the file.
	{from: 2, readable: true, what: "allow kept generations", apply: func(*bolt.Tx) error { return nil }},
}

// migrateV1 fills v2's state and keys of every published generation.
// Unpublished generations get no state: the same Open removes them.
func migrateV1(tx *bolt.Tx) error {
	tables := tx.Bucket(BucketTables)
	gens := tx.Bucket(BucketGenerations)
	return tables.ForEach(func(k, v []byte) error {
		m, err := decodeMeta(k, v)
		if err != nil {
			return err
		}
		gb := gens.Bucket(GenerationKey(m.Generation))
		if gb == nil {
			return fmt.Errorf("table %q: published generation %d is missing: %w", k, m.Generation, ErrCorrupt)
		}
		rows := gb.Bucket(BucketRows)
		if rows == nil {
			return fmt.Errorf("table %q: generation %d has no rows bucket: %w", k, m.Generation, ErrCorrupt)
		}
		return setGenerationState(gb, StatePublished, countKeys(rows))
	})
}

// countKeys counts a bucket's keys with a cursor: a walk of its leaf pages,
// under the caller's guard.
func countKeys(b *bolt.Bucket) uint64 {
	var n uint64
	c := b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		n++
	}
	return n
}

// migrate brings tx's file from version to FormatVersion.
func migrate(tx *bolt.Tx, version uint64) error {
	for v := version; v < FormatVersion; v++ {
		m := migrations[v-1]
		if err := m.apply(tx); err != nil {
			return fmt.Errorf("migrate format version %d to %d (%s): %w", v, v+1, m.what, err)
		}
	}
	return tx.Bucket(BucketMeta).Put(KeyFormatVersion, GenerationKey(FormatVersion))
}

// readableVersion reports whether this build can read a file of version
// without migrating it.
func readableVersion(version uint64) bool {
	for v := version; v < FormatVersion; v++ {
		if !migrations[v-1].readable {
			return false
		}
	}
	return true
}
