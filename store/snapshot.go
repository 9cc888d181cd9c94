package store

import (
	"bytes"

	bolt "go.etcd.io/bbolt"
)

// Snapshot is one consistent read view of a published table: its metadata,
// its rows and, through Tx, anything else committed with it (for example its
// checkpoint). It is valid only during the function passed to ReadTable.
type Snapshot struct {
	Meta TableMeta
	Tx   *bolt.Tx
	rows *bolt.Bucket
}

// ReadTable calls fn with a snapshot of table, all in one read transaction,
// so metadata, rows and checkpoint agree even if a publish happens meanwhile.
func (db *DB) ReadTable(table string, fn func(s *Snapshot) error) error {
	return db.view(func(tx *bolt.Tx) error {
		m, rows, err := db.lookup(tx, table)
		if err != nil {
			return err
		}
		return fn(&Snapshot{Meta: m, Tx: tx, rows: rows})
	})
}

// Rows calls fn for each row in ascending key order, as Scan does, with the
// same validity rules for k and v.
func (s *Snapshot) Rows(prefix []byte, limit int, fn func(k, v []byte) error) error {
	return s.RowsAfter(prefix, nil, limit, fn)
}

// RowsAfter is Rows resuming after a key: only rows whose key sorts above
// after (nil or empty: from the first row) are passed to fn. The cursor seeks
// to after, so a page deep into a large table costs no more than the first.
func (s *Snapshot) RowsAfter(prefix, after []byte, limit int, fn func(k, v []byte) error) error {
	c := s.rows.Cursor()
	var k, v []byte
	switch {
	case len(after) > 0 && bytes.Compare(after, prefix) >= 0:
		k, v = c.Seek(after)
		if k != nil && bytes.Equal(k, after) {
			k, v = c.Next()
		}
	case len(prefix) == 0:
		k, v = c.First()
	default:
		k, v = c.Seek(prefix)
	}
	for n := 0; k != nil; k, v = c.Next() {
		if len(prefix) > 0 && !bytes.HasPrefix(k, prefix) {
			return nil
		}
		if limit > 0 && n >= limit {
			return nil
		}
		if v == nil {
			v = []byte{}
		}
		if err := fn(k, v); err != nil {
			return err
		}
		n++
	}
	return nil
}
