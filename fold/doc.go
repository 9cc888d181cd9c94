// Package fold owns the reducers that turn a partition-ordered stream of
// records into table rows; it knows neither Kafka nor bbolt.
//
// # Contract
//
// A fold's table is a function of the records it was given and of nothing
// else: no clock, no randomness, no dependence on batch sizes or on how
// partitions interleave except where a fold's doc says so (Latest across
// partitions). In detail:
//
//   - Latest: for every non-empty key, the value of the record with that key
//     that came last in its partition; a tombstone deletes its key; null and
//     empty keys are skipped and counted.
//   - Count: for every group, the number of distinct identities whose
//     record names that group; the same identity with the same content again
//     is a duplicate (counted, not counted twice); the same identity with
//     another content is a conflict, and Finish refuses publication.
//   - A bad record (*DataError, ErrInvalidData) stops the fold with its
//     position, or with SkipBadRecords is counted in Stats.SkippedByReason
//     and changes nothing.
//   - Nothing a Folder writes is visible before the caller publishes; an
//     error from Fold or Finish means the generation must not be published.
//   - Resume (resume.go) continues a published table from its counters, so
//     that an update's table and Stats equal a full rebuild's over the same
//     records.
//   - Sorting externally (SortExternally, Full, Sorted, Reset) changes where
//     the rows are sorted, never which rows the table ends with.
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
// headers are immutable once the Record is built: package replay copies a
// batch of the client's messages at a time into one arena of the batch's own
// (replay's batch.go) and builds each Record's slices over it, or, read one
// message at a time, from the bytes the client allocates per message; it
// never writes or reuses an arena, its bytes, nor the batch slice, after
// handing a batch to its sink (replay.Sink). A record's bytes therefore stay
// valid as long as anything refers to them, and keeping one record keeps its
// whole arena alive: whoever holds records past the batch (the follower, for
// a transaction) copies them out (replay's followPart.own). The sink (the
// rebuild's writer) owns the batch from then on: it may queue and buffer it
// (within its memory budget) until it has folded it, and drops it after. A
// Folder may read a record's bytes during Fold and must copy what it keeps
// beyond the call: Latest copies the last record of each key, and Count each
// identity and the digest of its content, into their own chunks (held.go).
// The store owns what it is handed to write: a write transaction copies the
// values it keeps (store.Generation.Write, store.DB.Apply), a spill copies
// rows into a run file (store.Generation.SpillRun), and a merge copies rows
// into its blocks (store.Generation.WriteMerged). So record bytes have one
// owner at a time: the replay until it sends the batch, then the writer
// until Fold returns, then garbage; copies have the fold or the store as
// their owner.
//
// # Caveats
//
// Slices returned by Table.Get and KV.Get are only valid until the next
// write: a Folder that keeps them must copy them.
package fold
