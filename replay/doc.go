// Package replay reads each partition of a topic over [start, end) with the
// end captured once at the start; it never follows the live log.
//
// # Basics
//
// A replay discovers the topic's partitions from metadata (never creating
// the topic), captures each partition's retained low, high watermark (as a
// read_uncommitted ListOffsets reports it) and last stable offset once,
// resolves each partition's start (earliest, explicit offsets, a timestamp
// or a checkpoint), and then reads with isolation.level=read_committed until
// every partition's consumer position has reached its end mark.
//
// Completion is judged by position, never by record count: transaction
// markers, aborted records and compaction leave offset gaps, so a partition
// whose last offset is a commit marker is complete when the position (from a
// record past the end or from a partition-EOF event) reaches the end, even
// though no record at end-1 is ever delivered. An idle poll is "not yet".
//
// The replay consumer uses a fresh group.id, assigns partitions explicitly,
// disables auto commit and the offset store, and commits nothing: it never
// joins, commits to, resets or deletes any consumer group.
//
// # Caveats
//
// With EndHigh (the default), an open transaction that holds the last stable
// offset below the high mark makes the replay wait; if it neither commits nor
// aborts within the stall timeout, the replay fails with an *Error naming the
// partition, the LSO and the high mark. EndStable reads to the LSO captured at
// start instead and never waits, but leaves out records committed after the
// oldest open transaction.
//
// Records removed under the replay (retention, DeleteRecords) are an error,
// never a silent skip: the consumer runs with auto.offset.reset=error.
package replay
