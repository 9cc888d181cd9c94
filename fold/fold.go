package fold

import "github.com/kmaterialize/kmaterialize/record"

// Record is one Kafka record as a fold sees it (package record owns the
// type, so that the reader hands records out without importing fold).
type Record = record.Record

// Header is one record header.
type Header = record.Header

// KV is an ordered byte key-value namespace inside the generation being built.
type KV interface {
	// Get returns the value for key, or nil if the key is absent.
	Get(key []byte) ([]byte, error)
	Put(key, value []byte) error
	Delete(key []byte) error
}

// Table is the generation being built: its rows, plus private on-disk
// indexes that a fold may use (for example the identity index of the count
// fold). Indexes live inside the generation and are dropped with it; they are
// never visible as rows.
type Table interface {
	KV
	// Index returns the fold-private namespace called name, creating it.
	Index(name string) (KV, error)
}

// Folder is one reducer instance for one rebuild. It is not safe for
// concurrent use.
type Folder interface {
	// Name is the fold's name as the CLI spells it ("latest", "count").
	Name() string
	// Params describes the fold's parameters, for table metadata and export.
	Params() map[string]string
	// Fold applies a batch of records to t.
	Fold(t Table, batch []Record) error
	// Finish is called once, after every partition reached its end and
	// before publication; an error refuses publication.
	Finish(t Table) error
	// Stats reports counters for table metadata ("records", "skipped", ...).
	Stats() Stats
}

// Stats are a fold's counters, reported in `tables` and export.
type Stats struct {
	Records int64 // records handed to the fold
	Skipped int64 // records ignored (for example a null key)
	// SkippedByReason splits Skipped by reason (ReasonNullKey, ...); nil
	// when nothing was skipped.
	SkippedByReason map[string]int64
	Extra           map[string]int64 // fold-specific counters, e.g. "logical_events"
}

// EmptyReporter is implemented by folds whose table has rows even when no
// record contributed one (Count with a catalog writes every catalog group,
// 0 when nothing counted toward it). For a fold without it, a table is
// empty when it has no rows.
type EmptyReporter interface {
	// Empty reports, after Finish, whether no record contributed a row.
	Empty() bool
}
