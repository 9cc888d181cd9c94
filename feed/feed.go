package feed

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/kmaterialize/kmaterialize/api"
)

// Change is one key's state after a commit: its new value, or its
// deletion. For a count table the key is a group and the value its new
// count.
type Change struct {
	Key     []byte
	Value   []byte // nil when Deleted
	Deleted bool
}

// Commit is one atomic commit of a table as its feed sends it: the keys it
// changed and the table's state after it.
type Commit struct {
	// Epoch, Generation and Positions are the table's state after the
	// commit: Cursor names it.
	Epoch      uint64
	Generation uint64
	Positions  api.Positions
	// The keys it changed: in Changes, or, when Spool is not nil, in
	// the file Spool names (Changes nil). A Commit returned by
	// Watcher.Next keeps its Spool readable until the watcher's next
	// Next or Close.
	Changes []Change
	Spool   Spool
}

// Cursor names the state after c.
func (c Commit) Cursor() api.Cursor {
	return api.Cursor{Epoch: c.Epoch, Generation: c.Generation, Positions: c.Positions}
}

// size is what c holds in memory, for the bounds: its keys and values and
// a fixed cost per change and per partition (a spooled commit's changes
// are not in memory).
func (c Commit) size() int64 {
	n := int64(64 + 16*len(c.Positions))
	for _, ch := range c.Changes {
		n += int64(32 + len(ch.Key) + len(ch.Value))
	}
	return n
}

// spooled is the bytes of c's spool file, 0 without one.
func (c Commit) spooled() int64 {
	if c.Spool == nil {
		return 0
	}
	return c.Spool.Size()
}

// Defaults of Config.
const (
	DefaultRetainBytes int64 = 64 << 20
	DefaultRetainFor         = 5 * time.Minute
	DefaultSlowBytes   int64 = 16 << 20
	DefaultMaxWatchers       = 64
	// DefaultSpoolMaxBytes bounds the spooled commits on disk: room for
	// the publishes of a table of a few GiB, on the disk that holds the
	// database (which is at least as large as the table).
	DefaultSpoolMaxBytes int64 = 4 << 30
	// DefaultPendingWait is how long a watch from a cursor the feed has not
	// been handed yet waits for it (a list read just after a commit, before
	// its writer handed the commit over).
	DefaultPendingWait = 5 * time.Second
)

// Config bounds the feeds. Zero fields take the defaults.
type Config struct {
	// RetainBytes and RetainFor: each table's feed keeps at least this many
	// bytes of commits and at least the commits of this long, whichever
	// holds more...
	RetainBytes int64
	RetainFor   time.Duration
	// ... while the feeds of all tables together hold at most MaxBytes
	// (default 2 x RetainBytes): the bound of the daemon's memory the
	// feeds take. Past it, the oldest commits of the largest feed go.
	MaxBytes int64
	// SpoolMaxBytes bounds the files of the spooled commits (Commit.Spool)
	// the feeds of all tables retain: past it, the oldest spooled commits
	// of the feed that retains the most go. MaxBytes and RetainBytes count
	// only what a spooled commit holds in memory. Its writer should spool
	// no commit larger (MaxSpoolBytes).
	SpoolMaxBytes int64
	// SlowBytes: a watcher further behind its feed's head is cut off
	// (ErrTooSlow). Behind counts the bytes of the changes after it, in
	// memory or spooled.
	SlowBytes int64
	// MaxWatchers bounds the watchers of all tables at once
	// (ErrTooManyWatchers beyond it).
	MaxWatchers int
	// PendingWait: see DefaultPendingWait.
	PendingWait time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.RetainBytes <= 0 {
		c.RetainBytes = DefaultRetainBytes
	}
	if c.RetainFor <= 0 {
		c.RetainFor = DefaultRetainFor
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 2 * c.RetainBytes
	}
	c.MaxBytes = max(c.MaxBytes, c.RetainBytes)
	if c.SlowBytes <= 0 {
		c.SlowBytes = DefaultSlowBytes
	}
	if c.SpoolMaxBytes <= 0 {
		c.SpoolMaxBytes = DefaultSpoolMaxBytes
	}
	if c.MaxWatchers <= 0 {
		c.MaxWatchers = DefaultMaxWatchers
	}
	if c.PendingWait <= 0 {
		c.PendingWait = DefaultPendingWait
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Errors of Watch and Watcher.Next.
var (
	// ErrCursorGone: the cursor is older than what the feed retains, of an
	// earlier epoch, or names no state the table was in: list again.
	ErrCursorGone = errors.New("cursor gone")
	// ErrTooSlow: the watcher fell further behind than Config.SlowBytes.
	ErrTooSlow = errors.New("watcher too slow")
	// ErrTooManyWatchers: Config.MaxWatchers watch already.
	ErrTooManyWatchers = errors.New("too many watchers")
	// ErrClosed: the feeds were closed (the daemon shuts down).
	ErrClosed = errors.New("feed closed")
	// ErrNoFeed: the table has no feed (Start was not called for it).
	ErrNoFeed = errors.New("table has no feed")
)

// Feeds are the change feeds of a daemon's tables.
type Feeds struct {
	cfg Config

	mu       sync.Mutex // held across an Append: a log's mu is taken inside it, never the reverse
	tables   map[string]*log
	total    int64 // bytes the logs retain, at most cfg.MaxBytes after each Append
	spooled  int64 // bytes of the spool files they retain, at most cfg.SpoolMaxBytes after each Append
	watchers int
	closed   bool
}

// New returns the feeds bounded by cfg.
func New(cfg Config) *Feeds {
	return &Feeds{cfg: cfg.withDefaults(), tables: map[string]*log{}}
}

// entry is a commit in a log, with what the bounds need.
type entry struct {
	seq   uint64 // 1, 2, ...: the commit's place in the log
	at    time.Time
	start int64 // bytes (spans) appended before it
	size  int64 // in memory
	span  int64 // in memory and spooled: how far behind it puts a watcher
	c     Commit
	ref   *spoolRef // c.Spool's holders; nil when not spooled
}

// log is one table's feed: the retained commits, entries[0] the oldest
// (seq first), and the state before it (base).
type log struct {
	mu       sync.Mutex
	base     api.Cursor // the state before entries[0] (after the last dropped)
	entries  []entry
	first    uint64            // seq of entries[0]; next seq is first+len(entries)
	bytes    int64             // bytes of the retained entries in memory
	spooled  int64             // bytes of their spool files
	appended int64             // spans ever appended
	index    map[string]uint64 // cursor text -> seq after which it is; 0: base
	wake     chan struct{}     // closed by the next append (or Close)
	watching int               // watchers of this log now
	watchers map[*Watcher]struct{}
	watched  time.Time // when the last of them closed
	closed   error     // why the log ended: ErrClosed or ErrCursorGone; nil while it runs
}

// Start begins table's feed at the state c (the table as the daemon
// opened it, or after a change that cannot be sent as changes): earlier
// cursors of the table are gone. Watchers of an earlier start keep
// nothing: they end with ErrCursorGone at their next Next.
func (f *Feeds) Start(table string, c api.Cursor) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var watched time.Time
	if old := f.tables[table]; old != nil {
		old.close(fmt.Errorf("table %q: %w: its feed restarted", table, ErrCursorGone))
		f.forget(old)
		// The restart keeps the feed watched (Watched) as it was, and
		// counts the watchers it ends as watching until now: their
		// clients list and watch again, and the commits meanwhile must be
		// captured, or each would restart the feed again.
		old.mu.Lock()
		watched = old.watched
		if old.watching > 0 {
			watched = f.cfg.Now()
		}
		old.mu.Unlock()
	}
	c.Positions = maps.Clone(c.Positions)
	l := &log{base: c, first: 1, index: map[string]uint64{c.String(): 0}, wake: make(chan struct{}), watched: watched, watchers: map[*Watcher]struct{}{}}
	if f.closed {
		l.close(ErrClosed)
	}
	f.tables[table] = l
}

// Stop ends table's feed (a dropped table): its watchers end with
// ErrCursorGone.
func (f *Feeds) Stop(table string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l := f.tables[table]; l != nil {
		l.close(fmt.Errorf("table %q: %w: its feed stopped", table, ErrCursorGone))
		f.forget(l)
		delete(f.tables, table)
	}
}

// Close ends every feed: watchers end with ErrClosed, and Watch refuses.
func (f *Feeds) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for _, l := range f.tables {
		l.close(ErrClosed)
		f.forget(l)
	}
}

// forget takes what the closed log l retained off the totals.
func (f *Feeds) forget(l *log) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f.total -= l.bytes
	f.spooled -= l.spooled
	l.bytes, l.spooled = 0, 0
}

// close ends the log: its watchers' Next returns why, and its spooled
// commits go once no watcher reads them.
func (l *log) close(why error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed == nil {
		l.closed = why
		close(l.wake)
		for i := range l.entries {
			if r := l.entries[i].ref; r != nil {
				l.entries[i].ref = nil
				r.release()
			}
		}
	}
}

// Append hands table's feed a commit that succeeded, after it. A commit
// of another epoch than the last one's starts that epoch: cursors of the
// earlier epochs are gone, while the watchers reading go on into it. A
// table without a feed (Start not called) ignores it and returns false.
// Append owns c.Spool: it removes the file of a commit it does not keep.
func (f *Feeds) Append(table string, c Commit) bool {
	var ref *spoolRef
	if c.Spool != nil {
		ref = newSpoolRef(c.Spool)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.tables[table]
	if l == nil {
		if ref != nil {
			ref.release()
		}
		return false
	}
	c.Positions = maps.Clone(c.Positions)
	mem, disk := l.append(c, ref, f.cfg)
	f.total += mem
	f.spooled += disk
	// All tables' feeds within MaxBytes, and their spool files within
	// SpoolMaxBytes: the largest gives up its oldest.
	for f.total > f.cfg.MaxBytes {
		if !f.shrink(func(l *log) int64 { return l.bytes }, func(*log) int { return 1 }) {
			break
		}
	}
	for f.spooled > f.cfg.SpoolMaxBytes {
		if !f.shrink(func(l *log) int64 { return l.spooled }, (*log).throughSpooled) {
			break
		}
	}
	return true
}

// shrink drops n(l) of the oldest commits of the log l with the most by
// (under l.mu); false when no log has any.
func (f *Feeds) shrink(by func(*log) int64, n func(*log) int) bool {
	var big *log
	var most int64
	for _, o := range f.tables {
		o.mu.Lock()
		if v := by(o); v > most {
			big, most = o, v
		}
		o.mu.Unlock()
	}
	if big == nil {
		return false
	}
	big.mu.Lock()
	defer big.mu.Unlock()
	drop := n(big)
	if drop == 0 {
		return false
	}
	mem, disk := big.drop(drop)
	f.total -= mem
	f.spooled -= disk
	big.cutSlow()
	return true
}

// throughSpooled is how many of l's oldest commits go to drop its oldest
// spooled one (under l.mu).
func (l *log) throughSpooled() int {
	for i, e := range l.entries {
		if e.ref != nil {
			return i + 1
		}
	}
	return 0
}

// append adds c (whose spool ref holds, nil if none) to l, drops what
// retention lets go, wakes the watchers, and returns how many bytes l's
// retained commits grew by in memory and on disk (negative when they
// shrank).
func (l *log) append(c Commit, ref *spoolRef, cfg Config) (mem, disk int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed != nil {
		if ref != nil {
			ref.release()
		}
		return 0, 0
	}
	before, beforeDisk := l.bytes, l.spooled
	if c.Epoch != l.head().Epoch {
		clear(l.index)
	}
	e := entry{seq: l.first + uint64(len(l.entries)), at: cfg.Now(), start: l.appended, size: c.size(), c: c, ref: ref}
	e.span = e.size + c.spooled()
	l.entries = append(l.entries, e)
	l.bytes += e.size
	l.spooled += c.spooled()
	l.appended += e.span
	l.index[c.Cursor().String()] = e.seq
	l.trim(cfg)
	l.cutSlow()
	close(l.wake)
	l.wake = make(chan struct{})
	return l.bytes - before, l.spooled - beforeDisk
}

// MaxCommitBytes is the most of one commit's changes the feeds can keep
// in memory (Config.MaxBytes): a writer need not capture more there.
func (f *Feeds) MaxCommitBytes() int64 { return f.cfg.MaxBytes }

// MaxSpoolBytes is the most of one commit's changes the feeds can keep
// spooled (Config.SpoolMaxBytes): a writer need not spool more.
func (f *Feeds) MaxSpoolBytes() int64 { return f.cfg.SpoolMaxBytes }

// head is the state after the last commit.
func (l *log) head() api.Cursor {
	if n := len(l.entries); n > 0 {
		return l.entries[n-1].c.Cursor()
	}
	return l.base
}

// trim drops the oldest commits while what stays holds at least
// RetainBytes and the oldest is older than RetainFor. The last commit
// stays.
func (l *log) trim(cfg Config) {
	now := cfg.Now()
	drop := 0
	bytes := l.bytes
	for drop < len(l.entries)-1 {
		e := l.entries[drop]
		if bytes-e.size < cfg.RetainBytes || now.Sub(e.at) <= cfg.RetainFor {
			break
		}
		bytes -= e.size
		drop++
	}
	l.drop(drop)
}

// drop drops l's oldest n commits (at most all) and returns their bytes
// in memory and on disk: the state after the last of them becomes l's
// base. Their spool files go once no watcher reads them.
func (l *log) drop(n int) (mem, disk int64) {
	drop := min(n, len(l.entries))
	if drop == 0 {
		return 0, 0
	}
	var bytes, spooled int64
	for _, e := range l.entries[:drop] {
		bytes += e.size
		spooled += e.c.spooled()
		if e.ref != nil {
			e.ref.release()
		}
	}
	for _, e := range l.entries[:drop] {
		if k := e.c.Cursor().String(); l.index[k] == e.seq {
			delete(l.index, k) // not a later commit's of the same state
		}
	}
	if k := l.base.String(); l.index[k] == 0 {
		delete(l.index, k)
	}
	l.base = l.entries[drop-1].c.Cursor()
	if l.base.Epoch == l.head().Epoch {
		l.index[l.base.String()] = 0
	}
	// Move the kept ones down so the array does not grow without bound.
	kept := copy(l.entries, l.entries[drop:])
	clear(l.entries[kept:])
	l.entries = l.entries[:kept]
	l.first += uint64(drop)
	l.bytes -= bytes
	l.spooled -= spooled
	return bytes, spooled
}

// Head returns table's state after its last commit handed to the feed.
func (f *Feeds) Head(table string) (api.Cursor, error) {
	f.mu.Lock()
	l := f.tables[table]
	f.mu.Unlock()
	if l == nil {
		return api.Cursor{}, fmt.Errorf("table %q: %w", table, ErrNoFeed)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.head(), nil
}

// Watch starts a watcher of table's commits after the state from names.
// Close it when done. A from that the log does not retain is
// ErrCursorGone, unless it is of the head's epoch and at or past the head
// in every partition: a state whose commit the writer has not handed over
// yet, which the watcher then waits for (Config.PendingWait) and skips to.
func (f *Feeds) Watch(table string, from api.Cursor) (*Watcher, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	l := f.tables[table]
	if l == nil {
		return nil, fmt.Errorf("table %q: %w", table, ErrNoFeed)
	}
	if f.watchers >= f.cfg.MaxWatchers {
		return nil, fmt.Errorf("%w: %d watch already (max_watchers)", ErrTooManyWatchers, f.watchers)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// A watch, even one refused below, makes the feed watched (Watched):
	// its writers capture from now on, so that the client's next list
	// then watch finds its cursor.
	l.watched = f.cfg.Now()
	w := &Watcher{f: f, l: l, table: table, cut: make(chan struct{})}
	key := from.String()
	if seq, ok := l.index[key]; ok {
		if seq == 0 {
			w.next = l.first
		} else {
			w.next = seq + 1
		}
	} else if head := l.head(); from.Epoch == head.Epoch && ahead(from.Positions, head.Positions) {
		w.next = l.first + uint64(len(l.entries))
		w.pending = key
		w.pendingUntil = f.cfg.Now().Add(f.cfg.PendingWait)
	} else {
		return nil, fmt.Errorf("table %q: %w: the feed keeps commits from positions %s (epoch %d)", table, ErrCursorGone, l.base.Positions, head.Epoch)
	}
	// Its bound from the start: one that never reads is cut off too.
	if n, ok := l.behind(w); ok && w.pending == "" {
		w.limit, w.limited = n+f.cfg.SlowBytes, true
	}
	f.watchers++
	l.watching++
	l.watchers[w] = struct{}{}
	return w, nil
}

// Watched reports whether table's feed has a watcher, or had one (or was
// asked for one) within RetainFor: a writer captures a commit's changes
// only for a feed somebody reads, or may come back to read without a 410;
// the others restart at each commit, and cost nothing.
func (f *Feeds) Watched(table string) bool {
	f.mu.Lock()
	l := f.tables[table]
	f.mu.Unlock()
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.watching > 0 || (!l.watched.IsZero() && f.cfg.Now().Sub(l.watched) <= f.cfg.RetainFor)
}

// ahead reports whether a is at or past b in every partition of either.
func ahead(a, b api.Positions) bool {
	for p, bv := range b {
		if a[p] < bv {
			return false
		}
	}
	for p := range a {
		if _, ok := b[p]; !ok {
			return false
		}
	}
	return true
}

// Watchers returns how many watchers watch.
func (f *Feeds) Watchers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watchers
}

// Watcher reads one table's commits in order, from one goroutine.
type Watcher struct {
	f     *Feeds
	l     *log
	table string
	next  uint64 // seq of the next commit to send

	pending      string // the cursor text a pending watch waits for
	pendingUntil time.Time

	// limit is how far behind the head (bytes) the watcher may be: the
	// least it has been plus SlowBytes (set at its first read).
	limit   int64
	limited bool

	// held is the spooled commit the last Next returned, held readable
	// until the next Next or Close.
	held *spoolRef

	closeOnce sync.Once
	cut       chan struct{} // closed by cutSlow (Cut)
	cutOnce   sync.Once
}

// Next returns the next commit: at once if the feed has it, else when it
// comes. With heartbeat > 0, it returns ok false after heartbeat without a
// commit, and head is the table's state then. It ends with ErrTooSlow,
// ErrCursorGone (the feed restarted or stopped), ErrClosed or ctx's error.
func (w *Watcher) Next(ctx context.Context, heartbeat time.Duration) (c Commit, ok bool, head api.Cursor, err error) {
	w.letGo()
	var timer <-chan time.Time
	if heartbeat > 0 {
		t := time.NewTimer(heartbeat)
		defer t.Stop()
		timer = t.C
	}
	for {
		c, ok, head, wake, err := w.take()
		if err != nil || ok {
			return c, ok, head, err
		}
		var pending <-chan time.Time
		if w.pending != "" {
			t := time.NewTimer(max(w.pendingUntil.Sub(w.f.cfg.Now()), 0))
			pending = t.C
			defer t.Stop()
		}
		select {
		case <-ctx.Done():
			return Commit{}, false, head, ctx.Err()
		case <-timer:
			return Commit{}, false, head, nil
		case <-pending:
			return Commit{}, false, head, fmt.Errorf("table %q: %w: its cursor was never reached", w.table, ErrCursorGone)
		case <-wake:
		}
	}
}

// take returns the next commit if the log has it, or the channel its next
// append closes.
func (w *Watcher) take() (c Commit, ok bool, head api.Cursor, wake <-chan struct{}, err error) {
	l := w.l
	l.mu.Lock()
	defer l.mu.Unlock()
	head = l.head()
	if l.closed != nil {
		return Commit{}, false, head, nil, l.closed
	}
	for {
		if w.next < l.first {
			return Commit{}, false, head, nil, fmt.Errorf("table %q: %w: the feed no longer keeps the commits after its position", w.table, ErrTooSlow)
		}
		i := w.next - l.first
		if i >= uint64(len(l.entries)) {
			return Commit{}, false, head, l.wake, nil
		}
		e := l.entries[i]
		// Behind: the bytes of the commits after the one it is to read. A
		// watcher may be as far behind as it ever was closest plus
		// SlowBytes: one resumed from an old cursor catches up from there,
		// one that falls further behind than that is cut off.
		behind := l.appended - (e.start + e.span)
		if !w.limited {
			w.limit, w.limited = behind+w.f.cfg.SlowBytes, true
		}
		w.limit = min(w.limit, behind+w.f.cfg.SlowBytes)
		if behind > w.limit && w.pending == "" {
			return Commit{}, false, head, nil, fmt.Errorf("table %q: %w: %d bytes behind, %d more than it was (at most %d)", w.table, ErrTooSlow, behind, behind-(w.limit-w.f.cfg.SlowBytes), w.f.cfg.SlowBytes)
		}
		w.next++
		if w.pending != "" {
			// Commits up to the pending cursor's are in the caller's list.
			if e.c.Cursor().String() == w.pending {
				w.pending = ""
			}
			continue
		}
		if e.ref != nil {
			e.ref.hold()
			w.held = e.ref
		}
		return e.c, true, head, nil, nil
	}
}

// letGo releases the spooled commit the last Next returned.
func (w *Watcher) letGo() {
	if w.held != nil {
		w.held.release()
		w.held = nil
	}
}

// Close ends the watcher and frees its place among Config.MaxWatchers
// (and the spool file of the commit it was sent last, if the feed let
// that go).
func (w *Watcher) Close() {
	w.closeOnce.Do(func() {
		w.letGo()
		w.f.mu.Lock()
		w.f.watchers--
		w.f.mu.Unlock()
		w.l.mu.Lock()
		w.l.watching--
		delete(w.l.watchers, w)
		w.l.watched = w.f.cfg.Now()
		w.l.mu.Unlock()
	})
}
