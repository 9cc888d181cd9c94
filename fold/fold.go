// Package fold owns the reducers that turn a partition-ordered stream of
// records into table rows; it knows neither Kafka nor bbolt.
//
// # Basics
//
// A Folder receives records in batches. Within one partition, records arrive
// in offset order; batches from different partitions interleave in any order.
// A Folder writes rows through a Table, which the caller backs with the new,
// unpublished generation of the table, so nothing a Folder does is visible to
// readers until the caller publishes.
//
// # Record bytes
//
// This is the one statement of who owns a record's bytes, from the client to
// the store; the other packages point here. A Record's Key, Value and
// header values are immutable once the Record is built: package replay
// builds each from the Kafka client's message (the client allocates fresh
// bytes per message) and never writes or reuses them, nor the batch slice,
// after handing a batch to its sink (replay.Sink). The sink (the rebuild's
// writer) owns the batch from then on: it may queue and buffer it (within
// its memory budget) until it has folded it, and drops it after. A Folder
// may read a record's bytes during Fold and must copy what it keeps beyond
// the call: Latest copies the last record of each key, and Count each
// identity and the digest of its content, into their own chunks (held.go).
// The store owns what it is handed to write: a write transaction copies
// the values it keeps (store.Generation.Write, store.DB.Apply), a spill
// copies rows into a run file (store.Generation.SpillRun), and a merge copies rows into its
// blocks (store.Generation.WriteMerged). So record bytes have one owner
// at a time: the replay until it sends the batch, then the writer until
// Fold returns, then garbage; copies have the fold or the store as their
// owner.
//
// # Caveats
//
// Slices returned by Table.Get and KV.Get are only valid until the next
// write: a Folder that keeps them must copy them.
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
