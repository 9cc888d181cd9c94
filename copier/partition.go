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
	// the last record it produced, or a partition EOF offset. -1 when
	// nothing has been read since the assignment or the last rewind.
	pos int64
	// inTxn says the open transaction holds records (or an advanced
	// position) of this partition.
	inTxn bool
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
func (p *partition) take(off int64) {
	if p.base < 0 {
		p.base = off
	}
	if p.first < 0 {
		p.first = off
	}
	p.pos = off + 1
	p.inTxn = true
}

// reachedEOF records a partition EOF at off: the position passed control
// records or aborted batches without delivering a record.
func (p *partition) reachedEOF(off int64) {
	if off <= p.pos {
		return
	}
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
	p.pos = p.committed
	if p.base < 0 {
		return 0, false
	}
	return p.base, true
}
