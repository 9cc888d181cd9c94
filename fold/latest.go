package fold

import (
	"bytes"
	"fmt"
	"slices"
)

// Latest is the "latest" fold: the table holds, for every record key, the
// value of the record with that key that came last in its partition's offset
// order. A record with a nil Key (a null key) is skipped and counted in
// Stats.Skipped; a record with a nil Value (a tombstone) deletes its key.
// Keys and values are the record bytes, unchanged.
//
// Within one Fold call, Latest first keeps only the last record of each key
// (in memory, without copying the bytes), then writes the survivors to the
// Table in ascending key order, which is what a B+tree writes fastest.
//
// Across partitions there is no order: if the same key appears in two
// partitions, the batch folded last wins. Kafka's default partitioner keeps
// a key in one partition, so this only matters for topics produced otherwise.
//
// An empty, non-nil key is a present key and is passed to the Table as is.
//
// A Latest is not safe for concurrent use.
type Latest struct {
	records int64
	skipped int64
	slotOf  map[string]int // key -> index into last; emptied after each call
	last    []int          // per distinct key: index of its last record in the batch
}

// NewLatest returns a "latest" fold.
func NewLatest() *Latest {
	return &Latest{slotOf: make(map[string]int)}
}

// Name returns "latest".
func (l *Latest) Name() string { return "latest" }

// Params returns an empty map: the latest fold has no parameters.
func (l *Latest) Params() map[string]string { return map[string]string{} }

// Fold applies batch to t. Records must come in offset order within their
// partition, as Folder requires. On a Table error, Fold returns it wrapped
// with the position of the record being written; the table is then partly
// written and must not be published.
func (l *Latest) Fold(t Table, batch []Record) error {
	l.records += int64(len(batch))
	if l.slotOf == nil {
		l.slotOf = make(map[string]int)
	}
	last := l.last[:0]
	for i := range batch {
		k := batch[i].Key
		if k == nil {
			l.skipped++
			continue
		}
		// The lookup with string(k) does not allocate; only a new key does.
		if s, ok := l.slotOf[string(k)]; ok {
			last[s] = i
			continue
		}
		l.slotOf[string(k)] = len(last)
		last = append(last, i)
	}
	clear(l.slotOf)
	l.last = last

	if !slices.IsSortedFunc(last, func(a, b int) int { return bytes.Compare(batch[a].Key, batch[b].Key) }) {
		slices.SortFunc(last, func(a, b int) int { return bytes.Compare(batch[a].Key, batch[b].Key) })
	}
	for _, i := range last {
		r := &batch[i]
		if r.Value == nil {
			if err := t.Delete(r.Key); err != nil {
				return fmt.Errorf("fold latest: delete key of %d@%d: %w", r.Partition, r.Offset, err)
			}
			continue
		}
		if err := t.Put(r.Key, r.Value); err != nil {
			return fmt.Errorf("fold latest: put key of %d@%d: %w", r.Partition, r.Offset, err)
		}
	}
	return nil
}

// Finish does nothing: every Fold call leaves the table complete.
func (l *Latest) Finish(t Table) error { return nil }

// Stats reports Records (every record handed in) and Skipped (records with a
// null key). Latest has no Extra counters: they would depend on how the
// records were cut into batches.
func (l *Latest) Stats() Stats {
	return Stats{Records: l.records, Skipped: l.skipped}
}

var _ Folder = (*Latest)(nil)
