package feed

import "sync/atomic"

// Spool is a commit's changes kept in a file instead of memory: a
// publish's or rollback's, which may be every row of the table, far more
// than the feeds may hold in memory (Config.MaxBytes). Its writer (the
// database) fills it inside the commit's transaction and hands it over
// after the commit; from Append on, the feed owns it and removes it once
// its log no longer retains the commit and no watcher reads it.
type Spool interface {
	// Open starts a reader of the changes from the first. Its reads
	// are sequential and buffered: a change at a time is in memory.
	Open() (ChangeReader, error)
	// Count is the changes it holds, Size the bytes of its file.
	Count() int64
	Size() int64
	// Path names the file (for the log of a read error).
	Path() string
	// Remove deletes the file.
	Remove() error
}

// ChangeReader reads a Spool's changes in order, from one goroutine.
type ChangeReader interface {
	// Next returns the next change, io.EOF after the last. Its slices
	// are valid until the next call.
	Next() (Change, error)
	Close() error
}

// spoolRef counts the holders of a spooled commit: the log while it
// retains the commit, and each watcher from the Next that returned it to
// its next Next or Close. The last to let go removes the file, so that a
// watcher streaming a commit the log dropped meanwhile reads it to the
// end (and the disk it takes is the bound's plus what the watchers being
// sent a dropped commit hold, for at most their write timeout each).
type spoolRef struct {
	s    Spool
	refs atomic.Int32
}

func newSpoolRef(s Spool) *spoolRef {
	r := &spoolRef{s: s}
	r.refs.Store(1)
	return r
}

func (r *spoolRef) hold() { r.refs.Add(1) }

// release lets go of r; the last removes the file. A file that cannot be
// removed is left to the next read-write open of the database, which
// removes every spooled commit the previous process left.
func (r *spoolRef) release() {
	if r.refs.Add(-1) == 0 {
		_ = r.s.Remove()
	}
}
