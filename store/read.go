package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TableMeta describes a published table. It is stored as JSON in the tables
// bucket; Publish fills Generation and Keys.
type TableMeta struct {
	Name   string            `json:"name"`
	Topic  string            `json:"topic"`
	Fold   string            `json:"fold"`
	Params map[string]string `json:"params,omitempty"`
	// Generation is the published generation's number.
	Generation uint64 `json:"generation"`
	// Keys is the number of rows in the published generation.
	Keys int64 `json:"keys"`
	// BuiltAt is when the rebuild started (stored in UTC).
	BuiltAt time.Time `json:"built_at"`
	// Duration is how long the rebuild took.
	Duration time.Duration `json:"duration_ns"`
	Records  int64         `json:"records"`
	Skipped  int64         `json:"skipped"`
	// SkippedByReason splits Skipped by reason ("null_key",
	// "key_too_large", ...). Absent in tables built before it existed.
	SkippedByReason map[string]int64 `json:"skipped_by_reason,omitempty"`
	// Empty is true when no record contributed a row: no rows, or only
	// rows a fold writes without records (a count fold's catalog groups,
	// all 0). Tables built before it existed read as false.
	Empty bool             `json:"empty,omitempty"`
	Extra map[string]int64 `json:"extra,omitempty"`
	// Spec is the table's full definition as package materialize stores
	// it at every publish (materialize.Spec as JSON), opaque to this
	// package. Absent in tables built before it existed.
	Spec json.RawMessage `json:"spec,omitempty"`
}

func encodeMeta(m TableMeta) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode metadata of table %q: %w", m.Name, err)
	}
	return b, nil
}

func decodeMeta(name, v []byte) (TableMeta, error) {
	var m TableMeta
	if err := json.Unmarshal(v, &m); err != nil {
		return m, fmt.Errorf("%w: metadata of table %q: %v", ErrCorrupt, name, err)
	}
	return m, nil
}

// Tables returns the metadata of every published table, sorted by name.
func (db *DB) Tables() ([]TableMeta, error) {
	var out []TableMeta
	err := db.view(func(tx *bolt.Tx) error {
		tables := tx.Bucket(BucketTables)
		if tables == nil {
			return nil
		}
		return tables.ForEach(func(k, v []byte) error {
			m, err := decodeMeta(k, v)
			if err != nil {
				return err
			}
			out = append(out, m)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list tables in %s: %w", db.path, err)
	}
	return out, nil
}

// Table returns the metadata of one published table, or a
// *TableNotFoundError (ErrTableNotFound).
func (db *DB) Table(name string) (TableMeta, error) {
	var m TableMeta
	err := db.view(func(tx *bolt.Tx) error {
		var err error
		m, _, err = db.lookup(tx, name)
		return err
	})
	return m, err
}

// lookup returns the table's metadata and the rows bucket of its published
// generation, valid for the life of tx.
func (db *DB) lookup(tx *bolt.Tx, name string) (TableMeta, *bolt.Bucket, error) {
	var v []byte
	tables := tx.Bucket(BucketTables)
	if tables != nil {
		v = tables.Get([]byte(name))
	}
	if v == nil {
		nf := &TableNotFoundError{Path: db.path, Name: name}
		if tables != nil {
			_ = tables.ForEach(func(k, _ []byte) error {
				nf.Have = append(nf.Have, string(k))
				return nil
			})
		}
		return TableMeta{}, nil, nf
	}
	m, err := decodeMeta([]byte(name), v)
	if err != nil {
		return m, nil, fmt.Errorf("table %q in %s: %w", name, db.path, err)
	}
	var rows *bolt.Bucket
	if gens := tx.Bucket(BucketGenerations); gens != nil {
		if gb := gens.Bucket(GenerationKey(m.Generation)); gb != nil {
			rows = gb.Bucket(BucketRows)
		}
	}
	if rows == nil {
		return m, nil, fmt.Errorf("table %q in %s: published generation %d is missing: %w", name, db.path, m.Generation, ErrCorrupt)
	}
	return m, rows, nil
}

// Get returns a copy of the value stored under key in the published version
// of table. A missing row is a *KeyNotFoundError (ErrKeyNotFound); a missing
// table a *TableNotFoundError (ErrTableNotFound). A present empty value is
// returned as a non-nil empty slice.
func (db *DB) Get(table string, key []byte) ([]byte, error) {
	var out []byte
	err := db.view(func(tx *bolt.Tx) error {
		_, rows, err := db.lookup(tx, table)
		if err != nil {
			return err
		}
		if len(key) > 0 {
			k, v := rows.Cursor().Seek(key)
			if k != nil && bytes.Equal(k, key) {
				out = make([]byte, len(v))
				copy(out, v)
				return nil
			}
		}
		return &KeyNotFoundError{Table: table, Key: bytes.Clone(key)}
	})
	return out, err
}

// Scan calls fn for each row of the published version of table whose key
// starts with prefix (nil or empty: every row), in ascending byte order of
// keys, stopping after limit rows (limit <= 0: no limit). All rows come from
// one consistent snapshot, even if a publish happens meanwhile.
//
// k and v are only valid during the call to fn: copy them to keep them. fn
// must not write to the same DB (Begin, Write, Publish, Abort): the scan holds
// a read transaction, and a write that grows the file would wait for it
// forever. If fn returns an error, Scan stops and returns it unchanged.
func (db *DB) Scan(table string, prefix []byte, limit int, fn func(k, v []byte) error) error {
	return db.ReadTable(table, func(s *Snapshot) error { return s.Rows(prefix, limit, fn) })
}

// ScanRange is Scan over the rows in r (see Range: From inclusive, To
// exclusive, all of r's bounds at once), with Scan's rules.
func (db *DB) ScanRange(table string, r Range, limit int, fn func(k, v []byte) error) error {
	return db.ReadTable(table, func(s *Snapshot) error { return s.RangeRows(r, limit, fn) })
}

// GetMany returns copies of the values of keys in the published version of
// table, all from one read transaction, and the generation that answered:
// values[i] is nil when keys[i] is absent (a present empty value is a
// non-nil empty slice). A missing table is a *TableNotFoundError.
func (db *DB) GetMany(table string, keys [][]byte) (values [][]byte, gen uint64, err error) {
	values = make([][]byte, len(keys))
	err = db.ReadTable(table, func(s *Snapshot) error {
		gen = s.Meta.Generation
		for i, k := range keys {
			if v, ok := s.Get(k); ok {
				values[i] = bytes.Clone(v)
				if values[i] == nil {
					values[i] = []byte{}
				}
			}
		}
		return nil
	})
	return values, gen, err
}
