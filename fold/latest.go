package fold

import (
	"fmt"
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
	held     *held // the last record per key, copied (held.go)
}

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
	return &Latest{cfg: cfg, skips: skips{on: cfg.OnBadRecord}, held: newHeld()}
}

// RetainRecords switches l to retained mode: l keeps the last record per key
// across Fold calls and writes the survivors in key order only when they
// hold budget bytes (keys, values and bookkeeping) and at Finish, so a key
// updated many times is written once per flush instead of once per batch,
// and a table that fits the budget is written in one sorted pass. Memory is
// bounded by budget, not by the number of records. Call it before the first
// Fold.
func (l *Latest) RetainRecords(budget int) {
	l.retained = true
	l.budget = budget
}

// Name returns "latest".
func (l *Latest) Name() string { return "latest" }

// Params returns an empty map: the latest fold has no parameters.
func (l *Latest) Params() map[string]string { return map[string]string{} }

// Fold applies batch to t. Records must come in offset order within their
// partition, as Folder requires. On a Table error, Fold returns it wrapped
// with the key being written; the table is then partly written and must not
// be published.
func (l *Latest) Fold(t Table, batch []Record) error {
	if l.held == nil {
		l.held = newHeld()
	}
	l.records += int64(len(batch))
	var err error
	// Copied: the record's bytes are not kept (held.go).
	l.held.putAll(batch, func(r *Record) bool {
		switch {
		case err != nil:
			return true
		case r.Key == nil:
			l.skips.skip(ReasonNullKey)
			return true
		case len(r.Key) == 0:
			l.skips.skip(ReasonEmptyKey)
			return true
		case len(r.Key) > MaxKeySize:
			err = l.skips.bad(&DataError{Topic: l.cfg.Topic, Partition: r.Partition, Offset: r.Offset,
				Kind: ReasonKeyTooLarge, Reason: keyTooLarge("key", len(r.Key))})
			return true
		}
		return false
	})
	if err != nil {
		return err
	}
	if !l.retained || (l.held.bytes >= l.budget && !l.external) {
		return l.flushHeld(t)
	}
	return nil
}

// SortExternally is retained mode (see RetainRecords) for a caller that
// sorts and stores the rows itself: Fold keeps the last record per key and never writes to the
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
func (l *Latest) Full() bool { return l.held.bytes >= l.budget }

// Held returns the bytes of the held rows (keys, values and bookkeeping),
// as Full counts them, and how many keys they are.
func (l *Latest) Held() (bytes int64, keys int) { return int64(l.held.bytes), l.held.n }

// Sorted returns the held rows in ascending key order, one per key: the
// last record's value, nil for a tombstone (which deletes the key). The
// rows stay held until Reset; do not call Fold while reading them.
func (l *Latest) Sorted() *SortedRows {
	return &SortedRows{es: l.held.sorted(), held: l.held}
}

// Reset forgets the held rows, after the caller has stored them; the bytes
// Sorted returned are reused.
func (l *Latest) Reset() { l.held.reset() }

// SortedRows iterates over a fold's held rows in key order (Latest.Sorted,
// Count.Sorted).
type SortedRows struct {
	es   []sortEntry
	held *held
	i    int
}

// Next returns the next row: key, and value (nil for a tombstone); ok is
// false after the last. The slices are valid until Reset. err is always
// nil (the method has store.Sorted's shape).
func (r *SortedRows) Next() (key, value []byte, ok bool, err error) {
	if r.i == len(r.es) {
		return nil, nil, false, nil
	}
	e := r.es[r.i]
	r.i++
	key, value = r.held.entry(e.chunk, e.off)
	return key, value, true, nil
}

// Len returns how many rows the iterator holds in all.
func (r *SortedRows) Len() int { return len(r.es) }

// flushHeld writes the held records in key order and forgets them. The
// Table copies what it keeps (the held bytes are reused after this call).
func (l *Latest) flushHeld(t Table) error {
	rows := l.Sorted()
	for {
		key, value, ok, _ := rows.Next()
		if !ok {
			break
		}
		if value == nil {
			if err := t.Delete(key); err != nil {
				return fmt.Errorf("fold latest: delete key %q: %w", key, err)
			}
			continue
		}
		if err := t.Put(key, value); err != nil {
			return fmt.Errorf("fold latest: put key %q: %w", key, err)
		}
	}
	l.Reset()
	return nil
}

// Finish writes what retained mode still holds; without it every Fold call
// has left the table complete.
func (l *Latest) Finish(t Table) error {
	if l.held.n == 0 {
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
