// Package failpoint parks or faults the process at named points inside the
// commits of a rebuild (and at a followed table's catch-up), so that tests
// can kill it exactly there, or act on it while it waits (like etcd's
// gofail). It exists only in builds with the failpoints tag: in the normal
// build Hit is an empty function the compiler removes, and nothing of this
// package ships.
//
// A binary built with -tags failpoints reads two environment variables:
//
//	KMATERIALIZE_FAILPOINT=NAME[@N][=ACTION]
//	KMATERIALIZE_FAILPOINT_FILE=PATH
//
// The point NAME acts at its Nth hit (default the first). ACTION is:
//
//   - park (the default): write "failpoint NAME parked" to stderr and to
//     PATH (created, fsynced, closed), then block the calling goroutine
//     forever, so the test can SIGKILL the process at that point;
//   - nowrite: write "failpoint NAME nowrite" to stderr and PATH, then set
//     the process's RLIMIT_FSIZE to 0 and return, so every later write to a
//     regular file fails with EFBIG, as on a full disk (see NoWrite);
//   - wait: write "failpoint NAME waiting" to stderr and PATH (which must be
//     set), then block the calling goroutine until the test removes PATH,
//     then write "failpoint NAME released" to stderr and return: the rest of
//     the process runs meanwhile, so the test can act on it (send a signal,
//     call its API) with the point provably reached and not yet passed.
//
// The points, and what a crash at each leaves, are the constants below;
// each call site repeats the outcome in a comment.
package failpoint

// Names of the points.
const (
	// FoldCommitBefore is in store.Generation's write transaction, after
	// the fold wrote its rows, before the commit. A crash leaves the old
	// table; the next read-write open removes the unpublished generation.
	FoldCommitBefore = "fold-commit-before"
	// FoldCommitAfter is just after a fold's write transaction committed.
	// A crash leaves the old table and an unpublished generation holding
	// the rows committed so far, removed by the next read-write open.
	FoldCommitAfter = "fold-commit-after"
	// RunWritten is just after a rebuild closed a run file it spilled (the
	// latest fold's rows beyond its memory budget, store.Generation.SpillRun).
	// A crash leaves the old table, an empty unpublished generation and the
	// run files written so far; the next read-write open removes all of it.
	RunWritten = "run-written"
	// PublishCommitBefore is in the publish transaction, after the table
	// points at the new generation and the checkpoint is written, before
	// the old generation is dropped and before the commit. A crash leaves
	// the old table and its checkpoint; the next open removes the new,
	// unpublished generation.
	PublishCommitBefore = "publish-commit-before"
	// PublishDropOld is in the publish transaction, just after the old
	// generation's bucket was deleted (with store.Generation.Keep: just
	// after the old generation was kept and the kept ones beyond the limit
	// deleted), before the commit: bbolt drops the old generation in the
	// publish transaction, so "during the deletion" is this point. A crash leaves the old table and its generation whole
	// (nothing of the transaction is on disk); the next open removes the
	// new, unpublished generation.
	PublishDropOld = "publish-drop-old"
	// PublishCommitAfter is just after the publish transaction committed.
	// A crash leaves the new table, its checkpoint, and no old generation:
	// nothing to clean.
	PublishCommitAfter = "publish-commit-after"
	// CatchUpPaused is in a followed table's rebuild, just after its
	// catch-up paused the follower and read the positions it applied,
	// before the rebuild reads on to them. A crash leaves the old table
	// with its checkpoint at the follower's last commit; the next
	// read-write open removes the unpublished generation.
	CatchUpPaused = "catch-up-paused"

	// The copier's transaction points (package copier, endTxn). None
	// touches a file: a crash at each leaves Kafka's state, which the
	// next copier with the same transactional id resolves.
	//
	// CopyProduced is when a transaction holding records ends, after
	// its records were handed to the producer (librdkafka sends them on
	// its own threads meanwhile), before the group's positions are sent
	// to the transaction. A crash leaves an open transaction in the
	// destination and the group at the last commit; the next copier's
	// InitTransactions aborts it (or the transaction timeout does) and
	// copies those records again.
	CopyProduced = "copy-produced"
	// CopyCommitBefore is after the positions were sent to the
	// transaction (TxnOffsetCommit, pending), before CommitTransaction.
	// A crash leaves the same as CopyProduced: the pending offsets are
	// aborted with the records.
	CopyCommitBefore = "copy-commit-before"
	// CopyCommitAfter is just after CommitTransaction returned. A crash
	// leaves the transaction committed: its records visible and the
	// group at its positions; the next copier goes on from there.
	CopyCommitAfter = "copy-commit-after"
)

// Environment variables read by the failpoints build.
const (
	EnvPoint = "KMATERIALIZE_FAILPOINT"
	EnvFile  = "KMATERIALIZE_FAILPOINT_FILE"
)
