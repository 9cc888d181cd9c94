package copier

// partition is the copy state of one assigned source partition. The copy's
// loop owns every partition (the rebalance callback runs inside its Poll);
// each change of state is one method here, so that no transition can update
// one field and forget another.
//
// Offsets are Kafka positions: the offset of the next record to copy. -1
// means "not known".
type partition struct {
	id int32
	// committed is the group's committed offset for the partition as far
	// as this copier knows it: read at assignment, then set by each
	// commit. -1 when the group has none (or it could not be read).
	committed int64
	// base is where a rewind goes: committed when it is known, otherwise
	// the first position this copier took since the assignment (the group
	// had nothing committed, so that is where consumption began). -1 when
	// nothing has been read: there is nothing to rewind.
	base int64
	// pos is the position this copier has taken the partition to: one past
	// the last record it produced, or a verified partition EOF offset (see
	// reachedEOF). -1 when nothing has been read since the assignment or
	// the last rewind.
	pos int64
	// inTxn says the open transaction holds records (or an advanced
	// position) of this partition.
	inTxn bool
	// verifying is set while a partition EOF that passed offsets without
	// a record is being checked by a re-read (see reachedEOF): the
	// consumer was sent back to verifyFrom, and the EOF at eofSeen is
	// trusted only if the re-read reaches an EOF again without a record.
	verifying  bool
	verifyFrom int64 // expected() when the re-read began
	eofSeen    int64
	// first is where this copier began on the partition, for progress:
	// the committed offset at assignment, else the first position taken.
	// -1 while neither is known. Never moved back by a rewind.
	first int64
}

func newPartition(id int32, committed int64) *partition {
	if committed < 0 {
		committed = -1
	}
	return &partition{id: id, committed: committed, base: committed, pos: -1, first: committed}
}

// position is where the partition stands for progress: the position
// taken, else the committed offset; -1 when neither is known.
func (p *partition) position() int64 {
	if p.pos >= 0 {
		return p.pos
	}
	return p.committed
}

// expected is the offset the next record of the partition should have if
// nothing between was removed: the position, or the committed offset before
// anything was read. -1 when neither is known.
func (p *partition) expected() int64 {
	if p.pos >= 0 {
		return p.pos
	}
	return p.committed
}

// take records that the record at off is being copied in the open
// transaction. It must be called before the record is produced: if the
// produce fails, the abort that follows has to rewind this partition too,
// even though it has no record in the transaction yet.
//
// It returns the offset of a partition EOF being verified that this record
// lies below (-1 if none): that EOF had passed a record the consumer had
// not delivered, and trusting it would have skipped the record.
func (p *partition) take(off int64) (passedBy int64) {
	passedBy = -1
	if p.verifying && off < p.eofSeen {
		passedBy = p.eofSeen
	}
	p.verifying = false
	if p.base < 0 {
		p.base = off
	}
	if p.first < 0 {
		p.first = off
	}
	p.pos = off + 1
	p.inTxn = true
	return passedBy
}

// reachedEOF handles a partition EOF at off, the offset the consumer says
// it reached. An EOF at the expected offset (one past the last record
// taken, or the committed offset) passed nothing and is taken as it is.
// An EOF further on says that every offset in between holds a control
// record or an aborted batch; the position only moves there once that was
// seen twice: the first time, reachedEOF returns verify and the caller must
// seek the consumer back to from (a negative from: to the beginning, as
// auto.offset.reset=earliest began there) before anything else of the
// partition is read; if the re-read comes to an EOF again without a record,
// that EOF is taken. A record the first EOF passed is delivered by the
// re-read and copied (take). So the committed position never moves past an
// offset on the word of a single EOF: a record that was not delivered
// before an EOF (whatever lost it) cannot be committed past.
func (p *partition) reachedEOF(off int64) (from int64, verify bool) {
	want := p.expected()
	if off <= p.pos || (want >= 0 && off < want) {
		return 0, false // behind the position: nothing to move
	}
	if off != want && !(p.verifying && p.verifyFrom == want && off >= p.eofSeen) {
		p.verifying, p.verifyFrom, p.eofSeen = true, want, off
		return want, true
	}
	p.verifying = false
	if p.base < 0 {
		// Nothing was read and nothing committed: the consumer started at
		// or below off with no records between, so off is a safe rewind
		// target.
		p.base = off
	}
	if p.first < 0 {
		p.first = off
	}
	p.pos = off
	p.inTxn = true
	return 0, false
}

// ahead reports whether the position passed the group's committed offset:
// the next commit must send it.
func (p *partition) ahead() bool { return p.pos >= 0 && p.pos > p.committed }

// committedTo records a successful commit of the partition's offset.
func (p *partition) committedTo(off int64) {
	p.committed, p.base = off, off
	p.inTxn = false
}

// endTxn records that the open transaction ended without committing this
// partition's offset (nothing of it was in the commit).
func (p *partition) endTxn() { p.inTxn = false }

// rewind records an abort: the caller must seek the consumer to the
// returned offset before anything else of the partition is read. ok is
// false when nothing was read and nothing is committed (no seek needed).
// The position goes back to the committed offset; with none, to "nothing
// taken", so that no offsets-only commit follows the abort.
func (p *partition) rewind() (to int64, ok bool) {
	p.inTxn = false
	p.verifying = false
	p.pos = p.committed
	if p.base < 0 {
		return 0, false
	}
	return p.base, true
}
