// Package materialize owns one rebuild as a use case: replay a topic, fold
// its records into a fresh generation of a table, and publish the generation
// together with its checkpoint, or publish nothing; and likewise one
// incremental update from the checkpoint (Update, update.go) and one import
// of an export document (Import, import.go). KeepCurrent (follow.go) keeps a
// published table current: it applies what a follower reads in small
// transactions, each holding rows and checkpoint together.
//
// The CLI and the daemon both call Rebuild and Update; neither
// re-implements them. Every publish stores the table's definition (Spec)
// with it, so that Update needs only the table's name (LoadSpec).
//
// # Crash safety
//
// Rows are written into an unpublished generation while the replay reads.
// Only when every partition reached its end mark and the fold's Finish
// accepted the result does one bbolt transaction point the table at the new
// generation, save the checkpoint and drop the old generation. A failure, an
// interruption or a kill at any earlier point leaves readers on the previous
// generation; the unpublished one is removed by Abort, or by the next
// read-write open of the file after a kill.
//
// # Refusals
//
// A rebuild in which no record contributed a row is not published over a
// table that has such rows, unless Options.AllowEmpty (*EmptyTableError):
// a start past the last record must not wipe a table and succeed. Bad
// records are the fold's to refuse or skip (fold.OnBadRecord).
package materialize
