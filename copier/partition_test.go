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
		p.reachedEOF(9) // a marker and an aborted batch at 7, 8
		check(t, p, "take 6, EOF 9", want{pos: 9, ahead: true, rewindTo: 5})
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
		p.reachedEOF(5)
		check(t, p, "stale EOF", want{pos: 11, ahead: true, rewindTo: 10})
	})

	t.Run("EOF only (markers) before any record", func(t *testing.T) {
		p := newPartition(0, -1)
		p.reachedEOF(2) // a commit marker and an abort marker
		check(t, p, "EOF 2", want{pos: 2, ahead: true, rewindTo: 2})
	})
}
