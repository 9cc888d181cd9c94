package serve

import (
	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/feed"
	"github.com/kmaterialize/kmaterialize/store"
)

// The change feeds (package feed): the daemon starts each table's feed at
// the table as it opens the file, and the database's observer hands every
// later commit to it (observe), so that GET .../changes serves a table's
// commits from memory or from the spool files of the publishes and
// rollbacks (store.FeedDir), never from a read transaction.

// feedConfig is the feeds' bounds from the settings.
func (s *Server) feedConfig() feed.Config {
	return feed.Config{
		RetainBytes:   s.cfg.FeedRetainBytes,
		RetainFor:     s.cfg.FeedRetainFor,
		MaxBytes:      s.cfg.FeedMaxBytes,
		SlowBytes:     s.cfg.FeedSlowBytes,
		MaxWatchers:   s.cfg.MaxWatchers,
		SpoolMaxBytes: s.cfg.FeedSpoolMaxBytes,
	}
}

// startFeeds starts every table's feed at its state in db and sets the
// observer that hands the feeds db's commits. Call it before anything
// writes to db.
func (s *Server) startFeeds(db *store.DB) error {
	metas, err := db.Tables()
	if err != nil {
		return err
	}
	for _, m := range metas {
		var rs readState
		if err := db.ReadTable(m.Name, func(snap *store.Snapshot) error { return rs.load(snap) }); err != nil {
			return err
		}
		s.feeds.Start(m.Name, s.cursorOf(m.Name, rs))
	}
	db.SetObserver(s.observe, s.captureBound)
	return nil
}

// captureBound is how much of a commit's changes the database captures for
// the feeds: what they can hold (more would be dropped at once: the feed
// restarts instead, and its watchers list again), and only for a feed
// watched now or within its retention (feed.Feeds.Watched): the others
// restart at every commit, so that a daemon nobody watches spends neither
// memory nor time on feeds. A client's first watch makes the feed watched
// even when it is refused (410 after a commit it missed): its next list
// and watch then meet.
//
// An apply's changes are captured in memory. A publish's or rollback's,
// which may be every row of the table, are in memory up to
// feedSpillBytes, and past it spooled to a file (store.FeedDir), up to
// the spool's bound: a publish of a large table neither takes the feeds'
// memory from the other tables nor restarts its feed.
func (s *Server) captureBound(kind store.CommitKind, table string) store.CaptureBound {
	if !s.feeds.Watched(table) {
		return store.CaptureBound{}
	}
	if kind == store.CommitApply {
		return store.CaptureBound{Memory: s.feeds.MaxCommitBytes()}
	}
	return store.CaptureBound{Memory: min(s.feeds.MaxCommitBytes(), feedSpillBytes), Spool: s.feeds.MaxSpoolBytes()}
}

// feedSpillBytes is how much of a publish's changes are captured in memory
// before they go to a spool file: below it, a file is not worth its
// creation; above it, memory costs more than the file does (a capture in
// memory allocates what a file writes through one reused buffer, and
// holds it: store/observe_bench_test.go).
const feedSpillBytes = 1 << 20

// cursorOf is the cursor of table's state rs in the current epoch.
func (s *Server) cursorOf(table string, rs readState) api.Cursor {
	return api.Cursor{Generation: rs.gen, Epoch: s.epochs.of(table), Positions: rs.positions}
}

// observe hands a commit of the database to its table's feed. A commit
// whose changes were not captured (over the bound) restarts the feed at
// the state after it: its watchers end with cursor_gone and list again. A
// rollback, or a publish whose positions went back (a rebuild of a
// recreated topic), starts a new epoch first: cursors read before it
// cannot be resumed.
func (s *Server) observe(c store.Commit) {
	if c.Kind == store.CommitDrop {
		s.feeds.Stop(c.Table)
		return
	}
	positions := api.Positions(c.Positions)
	if c.Kind == store.CommitRollback {
		s.epochs.bump(c.Table)
	} else if head, err := s.feeds.Head(c.Table); err == nil && !wentForward(head.Positions, positions) {
		s.epochs.bump(c.Table)
	}
	cur := api.Cursor{Generation: c.Generation, Epoch: s.epochs.of(c.Table), Positions: positions}
	if !c.Complete {
		s.feeds.Start(c.Table, cur)
		return
	}
	fc := feed.Commit{Epoch: cur.Epoch, Generation: c.Generation, Positions: positions}
	if c.Spool != nil {
		fc.Spool = feedSpool{c.Spool}
	} else {
		fc.Changes = make([]feed.Change, len(c.Changes))
		for i, ch := range c.Changes {
			fc.Changes[i] = feed.Change{Key: ch.Key, Value: ch.Value, Deleted: ch.Deleted}
		}
	}
	if !s.feeds.Append(c.Table, fc) {
		// A table's first publish: its feed starts after it, which the
		// lists read from then name.
		s.feeds.Start(c.Table, cur)
	}
}

// wentForward reports whether positions are at or past prev in every
// partition of prev: no partition went back or disappeared.
func wentForward(prev, positions api.Positions) bool {
	for p, v := range prev {
		if now, ok := positions[p]; !ok || now < v {
			return false
		}
	}
	return true
}

// feedSpool is a commit's changes spooled by the database, as the feed
// reads them: the feed owns it from Append on, and removes it.
type feedSpool struct{ s *store.Spool }

func (f feedSpool) Open() (feed.ChangeReader, error) {
	r, err := f.s.Open()
	if err != nil {
		return nil, err
	}
	return feedSpoolReader{r}, nil
}

func (f feedSpool) Count() int64  { return f.s.Count }
func (f feedSpool) Size() int64   { return f.s.Bytes }
func (f feedSpool) Path() string  { return f.s.Path }
func (f feedSpool) Remove() error { return f.s.Remove() }

type feedSpoolReader struct{ r *store.SpoolReader }

func (r feedSpoolReader) Next() (feed.Change, error) {
	ch, err := r.r.Next()
	return feed.Change{Key: ch.Key, Value: ch.Value, Deleted: ch.Deleted}, err
}

func (r feedSpoolReader) Close() error { return r.r.Close() }
