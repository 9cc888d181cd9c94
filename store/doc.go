// Package store owns the bbolt file that holds the materialized tables: their
// generations, atomic publication, reads (get, ordered scan, prefix) and the
// cleanup of generations a crashed rebuild left unpublished. It knows nothing
// of Kafka.
//
// # Basics
//
// A table is a name that points at one published generation: a bucket of
// rows (key -> value, ordered by key bytes) plus fold-private indexes. A
// rebuild never touches the published generation. It calls Begin to create a
// new one, fills it through Write (one bbolt transaction per batch), and
// calls Publish, which in one transaction points the table at the new
// generation, runs the caller's hook (the checkpoint is saved there, so rows
// and positions commit together) and drops the old generation. Readers
// (Get, Scan, Table, Tables) see either the old version or the new one,
// never a mix.
//
//	g, err := db.Begin("balances")
//	if err != nil { ... }
//	defer g.Abort() // no-op once published
//	for batch := range batches {
//		err := g.Write(func(r store.Rows) error {
//			for _, row := range batch {
//				if err := r.Put(row.Key, row.Value); err != nil {
//					return err
//				}
//			}
//			return nil
//		})
//		if err != nil { ... }
//	}
//	err = g.Publish(meta, func(tx *bolt.Tx) error { return checkpoint.Save(tx, "balances", cp) })
//
// An incremental update or a followed table changes the published
// generation in place instead (Apply): one transaction holds the new rows,
// the adjusted metadata and the caller's checkpoint, and refuses to run if a
// rebuild published another generation since the caller read its positions.
//
// A reader that must wait for a table to change (the daemon's reads with
// min_positions) takes Changed(table) before it reads, and waits on it
// without a transaction: it is closed after the next commit of Apply,
// Publish, Rollback or DropTable of the table (notify.go). Snapshot.Positions
// reads the positions committed with the rows a snapshot sees.
//
// Every on-disk name and the format version are in schema.go, including the
// files beside the database.
//
// A rebuild that sorts its rows itself (the latest fold beyond its memory
// budget) writes them as sorted run files beside the database (SpillRun) and
// merges them into the generation in key order at the end (WriteMerged),
// committing every few MiB: bbolt then only appends to the tree. Run files
// are removed when the merge ends, at Abort, and by the next read-write Open
// after a crash. Compact rewrites a file without its free pages, atomically.
//
// # Caveats
//
// bbolt allows one read-write open of a file at a time, across processes: a
// read-write Open takes an exclusive lock, a read-only Open a shared one, and
// each waits at most Options.LockTimeout before returning a *LockedError. A
// read-write holder writes a holder record beside the file (Holder, removed
// on Close, ignored once its process is gone) so that a *LockedError can name
// it. An Open that waited checks, once it holds the lock, that the path still
// names the file it locked, and starts over if not (MoveAside renames a
// corrupt file under its lock).
//
// # Damage
//
// bbolt trusts its file: a damaged page is a panic, a page past the end of a
// truncated file a memory fault. Open checks the meta pages and the file size
// first (preflight.go), reads run under a guard that turns bbolt's panics
// and memory faults into a *CorruptError and any other panic (a caller's
// callback, a bug) into a *PanicError, ErrInternal (guard.go), and the
// whole-file walks that bbolt runs in
// goroutines of its own (a read-write open's freelist scan, Tx.Check) run in
// a child process (PageCheck). Check reports every problem, bbolt's and the
// schema's.
//
// # Format version
//
// schema.go's FormatVersion: a read-write Open migrates an older file in one
// transaction (migrate.go), a newer file is refused (ErrFormat), and a
// read-only Open reads an older file as it is when the migrations since only
// add what reads do not need.
//
// A crash or kill at any point leaves either the previous published state or
// the new one. Unpublished generations survive a crash as orphan buckets; the
// next read-write Open removes them (see DB.Cleaned). A read-only Open never
// does.
//
// Rows must have non-empty keys of at most bolt.MaxKeySize bytes (bbolt cannot
// store an empty key); Put returns ErrEmptyKey for an empty key.
//
// Slices passed to Scan's callback, and those returned by the Rows of a
// Write or an Apply, are only valid during the callback or transaction. Get returns
// a copy.
package store
