package fold

import "maps"

// Resuming a fold: an incremental update folds only the records a table's
// topic gained since its checkpoint, onto the table as published. The fold
// starts from the table's counters (and, for Count, its rows), so that
// Stats after the update are those of a full rebuild over the same records,
// and Count's rows carry on from the published counts. Count's identity
// index is on disk, in the table's generation (the Table given to Fold):
// duplicates and conflicts across increments are found there as within one
// rebuild.

// Resume sets l's counters to prev, the Stats of the published table, before
// the first Fold of an update.
func (l *Latest) Resume(prev Stats) {
	l.records = prev.Records
	l.skips.resume(prev)
}

// Resume sets c's counters to prev, the Stats of the published table, and
// its group counts to counts (group -> count, the published rows), before
// the first Fold of an update. The logical events are the sum of the counts:
// each distinct identity counts once toward one group.
func (c *Count) Resume(counts map[string]int64, prev Stats) {
	c.counts = make(map[string]int64, len(counts))
	c.logical = 0
	for g, n := range counts {
		c.counts[g] = n
		c.logical += n
	}
	c.records = prev.Records
	c.duplicates = prev.Extra["duplicates_folded"]
	c.conflicts = prev.Extra["conflicts"]
	c.skips.resume(prev)
}

func (s *skips) resume(prev Stats) {
	s.total = prev.Skipped
	s.byReason = maps.Clone(prev.SkippedByReason)
}
