package feed

// A watcher that stops reading is cut off at the commit that puts it
// further behind than its bound, not at its next read: its stream's write
// may block for minutes (the socket full), holding a place among
// MaxWatchers and the commit it was writing, which the log may have
// dropped since. The log checks its watchers at each append and closes
// Cut of those over their bound; the stream's writer then gives up its
// blocked write (serve: the write deadline), and the watcher's next read,
// if it ever reads, ends with ErrTooSlow as before.

// Cut is closed once the watcher falls further behind than its bound
// while it is not reading (a blocked write): its stream should stop.
func (w *Watcher) Cut() <-chan struct{} { return w.cut }

// behind is how many bytes of commits l holds after the one w reads next,
// as take counts them (so one commit larger than SlowBytes cuts nobody),
// and false when l dropped commits w has not read. Called with l.mu held.
func (l *log) behind(w *Watcher) (int64, bool) {
	if w.next < l.first {
		return 0, false
	}
	i := w.next - l.first
	if i >= uint64(len(l.entries)) {
		return 0, true
	}
	e := l.entries[i]
	return l.appended - (e.start + e.span), true
}

// cutSlow closes Cut of every watcher of l further behind than its bound
// (a pending one, still skipping commits its client listed, is not).
// Called with l.mu held, after an append.
func (l *log) cutSlow() {
	for w := range l.watchers {
		if w.pending != "" || !w.limited {
			continue
		}
		if n, ok := l.behind(w); !ok || n > w.limit {
			w.cutOnce.Do(func() { close(w.cut) })
		}
	}
}
