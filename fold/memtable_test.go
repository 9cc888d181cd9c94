package fold

import (
	"bytes"
	"errors"
	"maps"
	"slices"
)

// memKV is a map-backed KV for tests. Like bbolt, it copies what it is given
// and refuses an empty key.
type memKV struct {
	m map[string][]byte
	// With log set, writes logs the keys written (Put or Delete).
	log    bool
	writes [][]byte
}

func newMemKV() *memKV { return &memKV{m: make(map[string][]byte)} }

func (kv *memKV) Get(key []byte) ([]byte, error) {
	v, ok := kv.m[string(key)]
	if !ok {
		return nil, nil
	}
	return v, nil
}

func (kv *memKV) Put(key, value []byte) error {
	if len(key) == 0 {
		return errors.New("memKV: key required")
	}
	if value == nil {
		return errors.New("memKV: nil value")
	}
	kv.m[string(key)] = bytes.Clone(value)
	if kv.log {
		kv.writes = append(kv.writes, bytes.Clone(key))
	}
	return nil
}

func (kv *memKV) Delete(key []byte) error {
	if len(key) == 0 {
		return errors.New("memKV: key required")
	}
	delete(kv.m, string(key))
	if kv.log {
		kv.writes = append(kv.writes, bytes.Clone(key))
	}
	return nil
}

// rows returns a copy of the contents as strings.
func (kv *memKV) rows() map[string]string {
	out := make(map[string]string, len(kv.m))
	for k, v := range kv.m {
		out[k] = string(v)
	}
	return out
}

// memTable is a map-backed Table for tests: rows plus named indexes.
type memTable struct {
	*memKV
	indexes map[string]*memKV
}

func newMemTable() *memTable {
	return &memTable{memKV: newMemKV(), indexes: make(map[string]*memKV)}
}

func (t *memTable) Index(name string) (KV, error) {
	kv, ok := t.indexes[name]
	if !ok {
		kv = newMemKV()
		t.indexes[name] = kv
	}
	return kv, nil
}

func (t *memTable) indexNames() []string { return slices.Sorted(maps.Keys(t.indexes)) }

var _ Table = (*memTable)(nil)
