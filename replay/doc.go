// Package replay reads each partition of a topic over [start, end) with the
// end captured once at the start; a follower (Tail, follow.go) is a
// separate, unbounded reader that starts from a checkpoint's positions.
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
//
// # Broker faults
//
// Transient errors while capturing (LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER,
// timeouts, a lost connection, on metadata or any start-time ListOffsets)
// are retried with a backoff for up to the stall timeout; only an error that
// persists that long is ErrUnavailable, and its message says for how long and
// how many attempts. A topic that metadata says does not exist is
// ErrTopicNotFound at once. During the read the client retries on its own;
// a stall then asks for the last stable offsets, and if that fails too the
// brokers are unreachable (ErrUnavailable, naming them and for how long none
// answered): an LSO that could not be read is never reported as an open
// transaction. A topic deleted under the replay is ErrTopicNotFound with
// ErrTopicDeleted. Partitions added during a replay are not read (the
// partition set, like the end marks, is captured once); the replay logs a
// warning naming them and adds it to Result.Plan.Warnings.
package replay
