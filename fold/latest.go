package fold

import (
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
// Latest keeps the last record of each key in memory and writes the
// survivors to the Table in ascending key order, which is what a B+tree
// writes fastest: by default at the end of every Fold call; in retained mode
// (RetainRecords) across calls, until a byte budget is full and at Finish.
//
// Across partitions there is no order: if the same key appears in two
// partitions, the batch folded last wins. Kafka's default partitioner keeps
// a key in one partition, so this only matters for topics produced otherwise.
//
// A record whose key is empty (present, zero bytes) is skipped and counted
// like a null key: a table row needs a non-empty key (bbolt cannot store an
// empty one), and Kafka producers that mean "no key" sometimes send one.
//
// A record whose key is over MaxKeySize is a bad record: Fold returns a
// *DataError (ReasonKeyTooLarge) naming its position, or, with
// SkipBadRecords, counts it and leaves it out. A skipped record changes
// nothing: an older value of its key, which it cannot share, stays.
//
// A Latest is not safe for concurrent use.
type Latest struct {
	cfg     LatestConfig
	records int64
	skips   skips

	retained bool
	external bool // SortExternally: Fold never writes; the caller drains Sorted
	budget   int
	held     map[string]heldRecord // the last record per key; keys alias record key bytes
	heldLen  int                   // bytes accounted to held
}

// heldRecord is the last record seen for a key.
type heldRecord struct {
	value     []byte // nil: a tombstone
	partition int32
	offset    int64
}

// heldOverhead is the per-key bookkeeping counted against the budget.
const heldOverhead = 64

// LatestConfig configures a "latest" fold. The zero value is the default.
type LatestConfig struct {
	// Topic is used in error messages only.
	Topic string
	// OnBadRecord says what to do with a key over MaxKeySize. Default
	// FailOnBadRecord.
	OnBadRecord OnBadRecord
}

// NewLatest returns a "latest" fold with the default configuration.
func NewLatest() *Latest { return NewLatestWith(LatestConfig{}) }

// NewLatestWith returns a "latest" fold configured by cfg.
func NewLatestWith(cfg LatestConfig) *Latest {
	return &Latest{cfg: cfg, skips: skips{on: cfg.OnBadRecord}, held: make(map[string]heldRecord)}
}

// RetainRecords switches l to retained mode: l keeps the last record per key
// across Fold calls and writes the survivors in key order only when they
// hold budget bytes (keys, values and bookkeeping) and at Finish, so a key
// updated many times is written once per flush instead of once per batch,
// and a table that fits the budget is written in one sorted pass. Memory is
// bounded by budget, not by the number of records.
//
// The caller promises that the Key and Value bytes of every record handed to
// Fold stay unchanged until Finish returns (the replay never reuses them):
// retained mode keeps references instead of copies. Call it before the
// first Fold.
func (l *Latest) RetainRecords(budget int) {
	l.retained = true
	l.budget = budget
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
	if l.held == nil {
		l.held = make(map[string]heldRecord)
	}
	l.records += int64(len(batch))
	for i := range batch {
		r := &batch[i]
		switch {
		case r.Key == nil:
			l.skips.skip(ReasonNullKey)
			continue
		case len(r.Key) == 0:
			l.skips.skip(ReasonEmptyKey)
			continue
		case len(r.Key) > MaxKeySize:
			err := l.skips.bad(&DataError{Topic: l.cfg.Topic, Partition: r.Partition, Offset: r.Offset,
				Kind: ReasonKeyTooLarge, Reason: keyTooLarge("key", len(r.Key))})
			if err != nil {
				return err
			}
			continue
		}
		// The key aliases the record's bytes: valid until the end of this
		// call, or until Finish in retained mode (RetainRecords); held is
		// flushed and emptied before either ends.
		k := unsafe.String(unsafe.SliceData(r.Key), len(r.Key))
		if old, ok := l.held[k]; ok {
			l.heldLen += len(r.Value) - len(old.value)
		} else {
			l.heldLen += len(k) + len(r.Value) + heldOverhead
		}
		l.held[k] = heldRecord{value: r.Value, partition: r.Partition, offset: r.Offset}
	}
	if !l.retained || (l.heldLen >= l.budget && !l.external) {
		return l.flushHeld(t)
	}
	return nil
}

// SortExternally is retained mode (see RetainRecords, whose promise about
// record bytes the caller makes too) for a caller that sorts and stores the
// rows itself: Fold keeps the last record per key and never writes to the
// Table (which may be nil). When Full reports that the held rows reach
// budget bytes, the caller writes Sorted somewhere (a run file) and calls
// Reset; at the end it merges what it wrote with Sorted, newest last.
// Finish still writes what is held, for a caller that does not merge.
func (l *Latest) SortExternally(budget int) {
	l.RetainRecords(budget)
	l.external = true
}

// Full reports whether the held rows (keys, values and bookkeeping) reach
// the budget given to SortExternally or RetainRecords.
func (l *Latest) Full() bool { return l.heldLen >= l.budget }

// Sorted returns the held rows in ascending key order, one per key: the
// last record's value, nil for a tombstone (which deletes the key). The
// rows stay held until Reset; do not call Fold while reading them.
func (l *Latest) Sorted() *LatestRows {
	keys := make([]string, 0, len(l.held))
	for k := range l.held {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return &LatestRows{keys: keys, held: l.held}
}

// Reset forgets the held rows, after the caller has stored them.
func (l *Latest) Reset() {
	clear(l.held)
	l.heldLen = 0
}

// LatestRows iterates over Latest's held rows in key order (Sorted).
type LatestRows struct {
	keys []string
	held map[string]heldRecord
	i    int
}

// Next returns the next row: key, and value (nil for a tombstone); ok is
// false after the last. The slices are the records' own bytes. err is
// always nil (the method has store.Sorted's shape).
func (r *LatestRows) Next() (key, value []byte, ok bool, err error) {
	if r.i == len(r.keys) {
		return nil, nil, false, nil
	}
	k := r.keys[r.i]
	r.i++
	return unsafe.Slice(unsafe.StringData(k), len(k)), r.held[k].value, true, nil
}

// Len returns how many rows the iterator holds in all.
func (r *LatestRows) Len() int { return len(r.keys) }

// flushHeld writes the held records in key order and forgets them.
func (l *Latest) flushHeld(t Table) error {
	keys := make([]string, 0, len(l.held))
	for k := range l.held {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		h := l.held[k]
		key := unsafe.Slice(unsafe.StringData(k), len(k))
		if h.value == nil {
			if err := t.Delete(key); err != nil {
				return fmt.Errorf("fold latest: delete key of %d@%d: %w", h.partition, h.offset, err)
			}
			continue
		}
		if err := t.Put(key, h.value); err != nil {
			return fmt.Errorf("fold latest: put key of %d@%d: %w", h.partition, h.offset, err)
		}
	}
	clear(l.held)
	l.heldLen = 0
	return nil
}

// Finish writes what retained mode still holds; without it every Fold call
// has left the table complete.
func (l *Latest) Finish(t Table) error {
	if len(l.held) == 0 {
		return nil
	}
	return l.flushHeld(t)
}

// Stats reports Records (every record handed in), Skipped (records with a
// null or empty key, and bad records skipped) and SkippedByReason. Latest has
// no Extra counters: they would depend on how the records were cut into
// batches.
func (l *Latest) Stats() Stats {
	return Stats{Records: l.records, Skipped: l.skips.total, SkippedByReason: l.skips.reasons()}
}

var _ Folder = (*Latest)(nil)
