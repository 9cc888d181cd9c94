// Package copier owns the exactly-once topic copy: a transactional
// read-process-write loop that produces each source record to the
// destination and commits the consumer group's positions in the same Kafka
// transaction.
//
// # Basics
//
// Output and input progress commit atomically (send_offsets_to_transaction
// before commit_transaction), so after any crash the group's committed
// offsets say exactly which source records are in the destination's
// committed transactions. Readers of the destination must use
// isolation.level=read_committed; ordering is kept per partition (each record
// keeps its partition number) or, with Repartition, per key.
//
// A partition's committed offset moves past a record only when the record
// was produced in the committing transaction. Offsets that hold no record
// for a read_committed reader (transaction markers, aborted batches) are
// passed on a partition EOF, and only after a re-read from the last record
// reached an EOF again without a record: one EOF never suffices to commit
// past a record the consumer did not deliver.
//
// The transactional.id is used exactly as given: a restarted or duplicate
// copier with the same id fences the old one, whose next transactional call
// fails; the fenced copier stops with ErrFenced and never retries into
// duplicates. The consumer uses static group membership (group.instance.id
// derived from the transactional id) so a copier restarted after a crash
// gets its partitions back at once instead of waiting out the dead member's
// session timeout.
//
// # Errors
//
// Errors are classified with kafka.Error, never by message text: retriable
// errors are retried (a commit that timed out is retried as a commit, since
// its outcome is unknown); errors that require an abort abort the
// transaction and rewind the consumer to the last committed positions; fatal
// errors (fencing among them) stop the copy.
package copier
