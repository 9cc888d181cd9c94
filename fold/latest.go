package fold

import (
	"bytes"
	"fmt"
	"slices"
	"unsafe"
)

// Latest is the "latest" fold: the table holds, for every record key, the
// value of the record with that key that came last in its partition's offset
// order. A record with a nil Key (a null key) is skipped and counted in
// Stats.Skipped; a record with a nil Value (a tombstone) deletes its key.
// Keys and values are the record bytes, unchanged.
//
// Within one Fold call, Latest first keeps only the last record of each key
// (in memory, copying each distinct key once), then writes the survivors to the
// Table in ascending key order, which is what a B+tree writes fastest.
//
// Across partitions there is no order: if the same key appears in two
// partitions, the batch folded last wins. Kafka's default partitioner keeps
// a key in one partition, so this only matters for topics produced otherwise.
//
// A record whose key is empty (present, zero bytes) is skipped and counted
// like a null key: a table row needs a non-empty key (bbolt cannot store an
// empty one), and Kafka producers that mean "no key" sometimes send one.
//
// A Latest is not safe for concurrent use.
type Latest struct {
	records int64
	skipped int64
	slotOf  map[string]int // key -> index into last; emptied after each call
	last    []latestSlot   // per distinct key: its last record in the batch
	keys    []byte         // the batch's distinct keys, back to back
}

// maxKeptKeys bounds the key scratch a Latest keeps between calls.
const maxKeptKeys = 8 << 20

// latestSlot is one distinct key of a batch and the index of its last
// record. The key is a copy in Latest.keys: the distinct keys then sit
// together in memory, so the map lookups and the sort's comparisons read a
// few contiguous megabytes instead of one scattered allocation per record.
type latestSlot struct {
	key []byte
	i   int
}

// NewLatest returns a "latest" fold.
func NewLatest() *Latest {
	return &Latest{slotOf: make(map[string]int)}
}

// PutsRecordValuesOnly reports that every value Latest writes is a record's
// Value slice, unchanged and not copied: a caller whose record bytes outlive
// the write transaction may let the store skip copying them.
func (l *Latest) PutsRecordValuesOnly() bool { return true }

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
	need := 0
	for i := range batch {
		need += len(batch[i].Key)
	}
	keys := l.keys[:0]
	if cap(keys) < need {
		keys = make([]byte, 0, need) // never grows below: no copy moves
	}
	last := l.last[:0]
	for i := range batch {
		k := batch[i].Key
		if len(k) == 0 {
			l.skipped++
			continue
		}
		// The map's keys alias the copies in keys, which are not modified
		// until the map is emptied, before Fold returns.
		if s, ok := l.slotOf[unsafe.String(unsafe.SliceData(k), len(k))]; ok {
			last[s].i = i
			continue
		}
		if len(k) > 0 {
			start := len(keys)
			keys = append(keys, k...)
			k = keys[start:len(keys):len(keys)]
		}
		l.slotOf[unsafe.String(unsafe.SliceData(k), len(k))] = len(last)
		last = append(last, latestSlot{key: k, i: i})
	}
	clear(l.slotOf)
	defer func() {
		// Keep the arrays for the next call, not the record positions.
		clear(last)
		l.last = last[:0]
		if cap(keys) <= maxKeptKeys {
			l.keys = keys[:0]
		} else {
			l.keys = nil
		}
	}()

	cmpKeys := func(a, b latestSlot) int { return bytes.Compare(a.key, b.key) }
	if !slices.IsSortedFunc(last, cmpKeys) {
		slices.SortFunc(last, cmpKeys)
	}
	for _, sl := range last {
		r := &batch[sl.i]
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
// null or empty key). Latest has no Extra counters: they would depend on how the
// records were cut into batches.
func (l *Latest) Stats() Stats {
	return Stats{Records: l.records, Skipped: l.skipped}
}

var _ Folder = (*Latest)(nil)
