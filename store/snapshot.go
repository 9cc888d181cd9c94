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
	return s.RangeAfter(Range{Prefix: prefix}, after, limit, fn)
}

// Range selects rows by key. Its bounds combine: a row is in the range when
// its key starts with Prefix, is at or above From, and is below To. The
// zero Range is every row.
type Range struct {
	// Prefix keeps keys that start with it (nil or empty: any key).
	Prefix []byte
	// From is the inclusive lower bound (nil or empty: no lower bound).
	From []byte
	// To is the exclusive upper bound (nil or empty: no upper bound).
	To []byte
}

// Contains reports whether key is in r.
func (r Range) Contains(key []byte) bool {
	return bytes.HasPrefix(key, r.Prefix) &&
		(len(r.From) == 0 || bytes.Compare(key, r.From) >= 0) &&
		(len(r.To) == 0 || bytes.Compare(key, r.To) < 0)
}

// Empty reports whether no key can be in r: its lower bound is not below
// its upper bound.
func (r Range) Empty() bool {
	return len(r.To) > 0 && (bytes.Compare(r.From, r.To) >= 0 || bytes.Compare(r.Prefix, r.To) >= 0)
}

// RangeRows calls fn for each row in r in ascending key order, stopping
// after limit rows (limit <= 0: no limit), with the validity rules of Rows.
func (s *Snapshot) RangeRows(r Range, limit int, fn func(k, v []byte) error) error {
	return s.RangeAfter(r, nil, limit, fn)
}

// RangeAfter is RangeRows resuming after a key (nil or empty: from the
// start of r), for paging: the cursor seeks to the highest of r's lower
// bounds and after, so a deep page costs no more than the first.
func (s *Snapshot) RangeAfter(r Range, after []byte, limit int, fn func(k, v []byte) error) error {
	if r.Empty() {
		return nil
	}
	// The seek target is the highest lower bound: the prefix and From are
	// both at or below any key in r. A key equal to after is skipped.
	seek := r.Prefix
	if bytes.Compare(r.From, seek) > 0 {
		seek = r.From
	}
	skipAfter := false
	if len(after) > 0 && bytes.Compare(after, seek) >= 0 {
		seek, skipAfter = after, true
	}
	c := s.rows.Cursor()
	var k, v []byte
	if len(seek) == 0 {
		k, v = c.First()
	} else {
		k, v = c.Seek(seek)
	}
	if skipAfter && k != nil && bytes.Equal(k, after) {
		k, v = c.Next()
	}
	for n := 0; k != nil; k, v = c.Next() {
		// Keys ascend: the first key past the prefix or at To ends the range.
		if len(r.Prefix) > 0 && !bytes.HasPrefix(k, r.Prefix) {
			return nil
		}
		if len(r.To) > 0 && bytes.Compare(k, r.To) >= 0 {
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

// Count returns the number of rows in r.
func (s *Snapshot) Count(r Range) (int64, error) {
	var n int64
	err := s.RangeRows(r, 0, func(k, v []byte) error {
		n++
		return nil
	})
	return n, err
}

// Get returns the value of key, valid only during the function passed to
// ReadTable (copy it to keep it), and whether the key is present. A
// present empty value is a non-nil empty slice.
func (s *Snapshot) Get(key []byte) ([]byte, bool) {
	if len(key) == 0 {
		return nil, false
	}
	k, v := s.rows.Cursor().Seek(key)
	if k == nil || !bytes.Equal(k, key) {
		return nil, false
	}
	if v == nil {
		v = []byte{}
	}
	return v, true
}
