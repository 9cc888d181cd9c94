// Package feed owns the daemon's change feeds: for each table, the commits
// it applied (the keys each changed, with their new values, and the
// positions and generation after it), kept in memory for a bounded time and
// size, and the watchers reading them from a cursor.
//
// A table's feed is a log of commits in commit order. Each commit is
// absolute: a key's new value or its deletion, never a delta, so a watcher
// that applies a commit twice holds the same table. A cursor
// (api.Cursor: epoch, generation, positions) names the state after one
// commit; a watcher from it receives every later commit, in order, and a
// copy that held the table at the cursor holds, after each commit, exactly
// the table at that commit's positions.
//
// What the feed retains is bounded: it keeps at least Config.RetainBytes
// and at least Config.RetainFor of commits, whichever holds more, and
// never more than Config.MaxBytes. A cursor older than what it retains, or
// of an earlier epoch (a rollback, an import, a daemon restart: positions
// may have gone back), is ErrCursorGone, and the client lists the table
// again. A watcher further behind the head than Config.SlowBytes is cut off
// with ErrTooSlow and resumes from its last commit's cursor: it never holds
// the daemon's memory, which the retained log bounds alone. Watchers are
// counted across tables (Config.MaxWatchers).
//
// A commit's changes are in memory, or in a file (Commit.Spool): a
// publish's or rollback's, which may be every row of the table, spooled by
// the database during the transaction. A spooled commit counts in the
// memory bounds only its fixed cost, and its file's bytes in
// Config.SpoolMaxBytes, the bound of the spool files all feeds retain
// (past it, the oldest spooled commits of the feed that retains the most
// go). The feed owns a spool from Append on: the file goes when the log no
// longer retains its commit and no watcher handed it reads it (a watcher
// holds the commit Next returned until its next Next or Close), so a
// watcher streaming a commit the log dropped reads it to its end.
//
// The feed never reads the database: its writers (the follower's applies,
// in-place updates, publishes) hand it each commit after the commit
// succeeded, so a watcher is never served from a long read transaction.
package feed
