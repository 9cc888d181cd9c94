package copier

import "testing"

// TestPartitionTransitions walks one partition through the transitions the
// loop makes and checks, after each, where an abort would rewind it and
// whether a commit would send its position: the two things a lost or
// doubled record would come from.
func TestPartitionTransitions(t *testing.T) {
	type want struct {
		pos      int64
		ahead    bool
		rewindTo int64 // -1: no seek
	}
	check := func(t *testing.T, p *partition, step string, w want) {
		t.Helper()
		c := *p // rewind mutates: look at a copy
		to, ok := c.rewind()
		if !ok {
			to = -1
		}
		if p.pos != w.pos || p.ahead() != w.ahead || to != w.rewindTo {
			t.Fatalf("after %s: pos %d ahead %v rewind %d, want pos %d ahead %v rewind %d",
				step, p.pos, p.ahead(), to, w.pos, w.ahead, w.rewindTo)
		}
	}

	t.Run("nothing committed: the first record read is the rewind target", func(t *testing.T) {
		p := newPartition(1, -1)
		check(t, p, "assignment", want{pos: -1, ahead: false, rewindTo: -1})
		// Taken before its produce: if the produce fails, the abort must
		// rewind to it (the lost-record bug of issue 7).
		p.take(5)
		check(t, p, "take 5", want{pos: 6, ahead: true, rewindTo: 5})
		p.take(6)
		// A marker and an aborted batch at 7, 8: the EOF at 9 is taken
		// only after a re-read from 7 reaches it again.
		eof(t, p, 9, 7, true)
		check(t, p, "take 6, EOF 9", want{pos: 7, ahead: true, rewindTo: 5})
		eof(t, p, 9, 0, false)
		check(t, p, "take 6, EOF 9 twice", want{pos: 9, ahead: true, rewindTo: 5})
		p.committedTo(9)
		check(t, p, "commit 9", want{pos: 9, ahead: false, rewindTo: 9})
	})

	t.Run("committed offset known: rewinds go there", func(t *testing.T) {
		p := newPartition(0, 40)
		check(t, p, "assignment", want{pos: -1, ahead: false, rewindTo: 40})
		if p.expected() != 40 {
			t.Fatalf("expected offset %d, want 40", p.expected())
		}
		p.take(40)
		p.take(41)
		to, ok := p.rewind()
		if !ok || to != 40 {
			t.Fatalf("rewind to %d (%v), want 40", to, ok)
		}
		// After a rewind nothing is taken: no offsets-only commit of the
		// aborted position, and the re-read starts at the committed offset.
		check(t, p, "rewind", want{pos: 40, ahead: false, rewindTo: 40})
		p.take(40)
		check(t, p, "re-read 40", want{pos: 41, ahead: true, rewindTo: 40})
	})

	t.Run("rewind before anything is committed forgets the position", func(t *testing.T) {
		p := newPartition(2, -1)
		p.take(3)
		if to, ok := p.rewind(); !ok || to != 3 {
			t.Fatalf("rewind to %d (%v), want 3", to, ok)
		}
		check(t, p, "rewind", want{pos: -1, ahead: false, rewindTo: 3})
	})

	t.Run("an EOF below the position changes nothing", func(t *testing.T) {
		p := newPartition(0, 10)
		p.take(10)
		eof(t, p, 5, 0, false)
		check(t, p, "stale EOF", want{pos: 11, ahead: true, rewindTo: 10})
	})

	t.Run("EOF only (markers) before any record", func(t *testing.T) {
		p := newPartition(0, -1)
		// A commit marker and an abort marker; nothing read and nothing
		// committed, so the re-read goes back to the beginning (-1).
		eof(t, p, 2, -1, true)
		check(t, p, "EOF 2", want{pos: -1, ahead: false, rewindTo: -1})
		eof(t, p, 2, 0, false)
		check(t, p, "EOF 2 twice", want{pos: 2, ahead: true, rewindTo: 2})
	})

	t.Run("an EOF at the expected offset is taken at once", func(t *testing.T) {
		p := newPartition(0, 20)
		eof(t, p, 20, 0, false) // nothing new since the commit
		check(t, p, "EOF 20", want{pos: 20, ahead: false, rewindTo: 20})
		p.take(20)
		eof(t, p, 21, 0, false)
		check(t, p, "take 20, EOF 21", want{pos: 21, ahead: true, rewindTo: 20})
	})

	t.Run("an EOF past the committed offset is re-read from it", func(t *testing.T) {
		p := newPartition(0, 30)
		eof(t, p, 32, 30, true)
		check(t, p, "EOF 32", want{pos: -1, ahead: false, rewindTo: 30})
		eof(t, p, 32, 0, false)
		check(t, p, "EOF 32 twice", want{pos: 32, ahead: true, rewindTo: 30})
	})

	t.Run("the re-read delivers the record the EOF passed", func(t *testing.T) {
		p := newPartition(0, 0)
		p.take(0)
		eof(t, p, 3, 1, true) // the record at 1 was not delivered
		if passed := p.take(1); passed != 3 {
			t.Fatalf("take 1 during the re-read: passed by %d, want the EOF at 3", passed)
		}
		check(t, p, "re-read 1", want{pos: 2, ahead: true, rewindTo: 0})
		// The EOF at 3 again: it passed offset 2 (the marker) without a
		// record, so it is verified afresh from 2, not taken on the
		// strength of the first one.
		eof(t, p, 3, 2, true)
		eof(t, p, 3, 0, false)
		check(t, p, "EOF 3 twice from 2", want{pos: 3, ahead: true, rewindTo: 0})
		if passed := p.take(3); passed != -1 {
			t.Fatalf("take 3 after a verified EOF: passed by %d, want -1", passed)
		}
	})

	t.Run("an abort ends a verification", func(t *testing.T) {
		p := newPartition(0, 5)
		p.take(5)
		eof(t, p, 8, 6, true)
		if to, ok := p.rewind(); !ok || to != 5 {
			t.Fatalf("rewind to %d (%v), want 5", to, ok)
		}
		// After the rewind the next EOF is judged from the committed
		// offset, with nothing carried over from before the abort.
		eof(t, p, 8, 5, true)
		check(t, p, "rewind, EOF 8", want{pos: 5, ahead: false, rewindTo: 5})
	})
}

// eof feeds a partition EOF at off and checks whether it asks for a re-read
// and from where.
func eof(t *testing.T, p *partition, off, wantFrom int64, wantVerify bool) {
	t.Helper()
	from, verify := p.reachedEOF(off)
	if verify != wantVerify || (verify && from != wantFrom) {
		t.Fatalf("EOF %d: re-read %v from %d, want re-read %v from %d", off, verify, from, wantVerify, wantFrom)
	}
}
