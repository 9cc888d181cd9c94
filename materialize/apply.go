package materialize

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// applier applies a follower's batches to the published generation. It
// owns the checkpoint as last committed.
type applier struct {
	opts  FollowOptions
	spec  Spec // the definition the records are folded by (followSpec)
	table string
	gen   uint64
	cp    checkpoint.Checkpoint
	// shard is cp's Subset and PartitionsOfTopic, which no apply changes
	// for a shard: what the refresh goroutine compares its count with.
	shard checkpoint.Checkpoint
	dec   *decode.Decoder // nil for raw keys and values
	log   zerolog.Logger

	// Written by the reader's goroutines (Check at the start, the refresh
	// goroutine's Live), read by the apply loop; guarded by liveMu.
	liveMu sync.Mutex
	// live holds the recent successful refreshes of the live marks,
	// oldest first (at most liveKept), for the checkpoint's capture time.
	live []replay.LiveMarks
	// topicID is the topic's ID at the follower's start (zero: unknown),
	// recorded in the checkpoint at the next apply; liveID is the last
	// refresh's (zero: unknown).
	topicID, liveID replay.TopicID
	// config is the topic's configuration as last read (at the start, then
	// every CheckInterval).
	config *replay.TopicConfig
	// liveCount is the topic's partition count as the last refresh read
	// it (0: not yet); a shard's running check compares it with the
	// checkpoint's (Repartitioned).
	liveCount int32

	// pend is what was added and not yet committed (nil: nothing); owned
	// by the apply loop.
	pend *pendingApply
}

// liveKept bounds the live marks the applier keeps: at one refresh a
// second, a follower more than a minute behind claims an older capture
// time than it could, never a newer one.
const liveKept = 64

// endsOf is cp's position per partition.
func endsOf(cp checkpoint.Checkpoint) map[int32]int64 {
	out := make(map[int32]int64, len(cp.Partitions))
	for _, p := range cp.Partitions {
		out[p.Partition] = p.End
	}
	return out
}

// checkStart is the follower's replay.Config.Check: the continuation
// check of the checkpoint the follower starts from, against the marks,
// topic ID and configuration captured at its start. A configuration that
// could not be read for an outage is returned as that (retriable: the
// follower starts again); one denied is a stale checkpoint, as for an
// update.
func (a *applier) checkStart(plan replay.Plan) error {
	// A topic missing when its configuration is read was deleted after
	// its marks were: that (the deleted topic), not a configuration that
	// cannot be read.
	if tc := plan.TopicConfig; configOutage(tc) || (tc != nil && errors.Is(tc.Err, replay.ErrTopicNotFound)) {
		return fmt.Errorf("read the topic's configuration: %w", tc.Err)
	}
	if err := checkContinues(OpFollow, a.table, a.cp, plan, time.Now()); err != nil {
		return err
	}
	a.liveMu.Lock()
	a.topicID, a.config = plan.TopicID, plan.TopicConfig
	a.liveMu.Unlock()
	return nil
}

// configOutage reports whether tc could not be read for an outage (the
// brokers unavailable, a timeout), which may pass, as opposed to a denial
// (no DescribeConfigs ACL), which checkRetention refuses as a stale
// checkpoint. nil (not asked) is no outage.
func configOutage(tc *replay.TopicConfig) bool {
	return tc != nil && errors.Is(tc.Err, replay.ErrUnavailable) && !replay.NotAuthorized(tc.Err)
}

// noteLive keeps what refresh m learnt: its marks if they were read, the
// topic ID, the configuration if it was read again. It reports whether the
// running check should run: the configuration was read, or the topic ID is
// not the one at the start.
func (a *applier) noteLive(m replay.LiveMarks) bool {
	a.liveMu.Lock()
	defer a.liveMu.Unlock()
	if m.Error == nil {
		a.live = append(a.live, m)
		if len(a.live) > liveKept {
			a.live = slices.Delete(a.live, 0, len(a.live)-liveKept)
		}
	}
	if !m.TopicID.IsZero() {
		a.liveID = m.TopicID
	}
	if m.TopicConfig != nil {
		a.config = m.TopicConfig
	}
	if m.PartitionsOfTopic > 0 {
		a.liveCount = m.PartitionsOfTopic
	}
	return m.TopicConfig != nil || a.topicID.Differs(m.TopicID) || Repartitioned(a.shard, a.liveCount)
}

// checkRunning is the continuation check while following: the topic ID
// the last refresh saw against the checkpoint's (or the start's), and the
// retention rule against the capture time the positions applied can
// claim, with the configuration as last read. A configuration that could
// not be read this time for an outage keeps following (the next read
// decides). A capture time that moved on is saved, so that a quiet,
// caught-up table's checkpoint does not age.
func (a *applier) checkRunning() error {
	a.liveMu.Lock()
	known := recordedID(a.cp.TopicID, a.topicID)
	liveID, tc, count := a.liveID, a.config, a.liveCount
	a.liveMu.Unlock()
	if err := checkTopicID(OpFollow, a.table, checkpoint.Checkpoint{TopicID: known}, a.spec.Topic, liveID); err != nil {
		return err
	}
	if Repartitioned(a.shard, count) {
		return &RepartitionedError{Op: OpFollow, Table: a.table, Topic: a.spec.Topic, Recorded: a.shard.PartitionsOfTopic, Now: count}
	}
	if tc == nil {
		return nil
	}
	if configOutage(tc) {
		a.log.Warn().Err(tc.Err).Msg("follow: the topic's configuration could not be read again; checking at the next read")
		return nil
	}
	captured := a.capturedAt(a.cp.CapturedAt, endsOf(a.cp))
	if err := checkRetention(OpFollow, a.table, a.spec.Topic, captured, tc, time.Now()); err != nil {
		return err
	}
	if captured.After(a.cp.CapturedAt) {
		return a.apply([]replay.FollowBatch{{Positions: endsOf(a.cp)}})
	}
	return nil
}

// capturedAt is the capture time a checkpoint at positions can claim: the
// time the newest live marks were asked for whose high watermarks every
// followed partition's position has reached (every record at or after a
// position was then written after that time, as for a rebuild's end
// marks); prev when there are none newer. The time of the apply would
// claim too much for a follower behind: a record it has not read may be
// older than the apply, and the tombstone-retention rule
// (delete.retention.ms) counts from the capture time. Marks older than the
// ones chosen are dropped.
func (a *applier) capturedAt(prev time.Time, positions map[int32]int64) time.Time {
	a.liveMu.Lock()
	defer a.liveMu.Unlock()
	if len(positions) == 0 {
		return prev
	}
	for i := len(a.live) - 1; i >= 0; i-- {
		live := a.live[i]
		if !live.At.After(prev) {
			return prev
		}
		if reached(live, positions) {
			a.live = slices.Delete(a.live, 0, i)
			return live.At.UTC()
		}
	}
	return prev
}

// reached reports whether positions cover exactly live's partitions, each
// at or past its high watermark then.
func reached(live replay.LiveMarks, positions map[int32]int64) bool {
	for p, pos := range positions {
		high, ok := live.High[p]
		if !ok || pos < high {
			return false
		}
	}
	for p := range live.High {
		if _, ok := positions[p]; !ok {
			return false // a partition the follower does not read yet
		}
	}
	return true
}

// pendingApply is what the applier has folded and not yet committed: the
// last record of each key of the batches added since the last commit (a
// latest fold in SortExternally mode, whose rows are copies: the batches'
// records are released once folded), or, for a fold that needs the table
// to fold (count: its identity index is on disk), the batches themselves.
// The batches are kept for their positions, lows and counters; a folded
// batch's Records are nil.
type pendingApply struct {
	f       fold.Folder
	latest  *fold.Latest // f, when the batches are folded before the commit
	batches []replay.FollowBatch
	n       int       // records
	skipped int64     // records the decoder left out
	since   time.Time // when the first batch was added
	last    time.Time // when the last batch was added
}

// apply folds batches into the published generation in one transaction,
// with the metadata's counters and the checkpoint's positions, together
// with what was added before and not yet committed.
func (a *applier) apply(batches []replay.FollowBatch) error {
	if err := a.add(batches); err != nil {
		return err
	}
	return a.flush()
}

// add decodes batches, checks their topic ID and adds them to what the
// next flush commits: a latest fold folds them now, outside the
// transaction (so that the batches of a follower catching up go into one
// commit, and a key updated in each of them is written once); a count
// fold keeps them for the flush. An error leaves nothing of batches
// added, and what was added before stays (the caller may flush it).
func (a *applier) add(batches []replay.FollowBatch) error {
	if len(batches) == 0 {
		return nil
	}
	// Decoded before the transaction: a registry lookup must not hold
	// the database's writer.
	var skipped int64
	if a.dec != nil {
		before := a.dec.Skipped()
		decoded := make([]replay.FollowBatch, len(batches))
		for i, b := range batches {
			out, err := a.dec.Decode(b.Records)
			if err != nil {
				return fmt.Errorf("follow table %q: %w", a.table, err)
			}
			decoded[i] = b
			decoded[i].Records = out
		}
		batches, skipped = decoded, a.dec.Skipped()-before
	}
	// A batch fetched after the topic was recreated holds the new log's
	// records at the old positions (the refresh may not have seen it
	// yet): refused before the transaction, so nothing of it is applied.
	a.liveMu.Lock()
	known := recordedID(a.cp.TopicID, a.topicID)
	a.liveMu.Unlock()
	for _, b := range batches {
		if err := checkTopicID(OpFollow, a.table, checkpoint.Checkpoint{TopicID: known}, a.spec.Topic, b.TopicID); err != nil {
			return err
		}
	}
	if a.pend != nil && a.pend.latest != nil && !foldable(batches) {
		// A key the fold may refuse: what was folded before commits
		// first, and these batches are folded in their own
		// transaction, so that a refusal leaves the table as it was
		// after the last good batch and nothing of these.
		if err := a.flush(); err != nil {
			return err
		}
	}
	if a.pend == nil {
		f, err := a.spec.NewFolder()
		if err != nil {
			return err
		}
		a.pend = &pendingApply{f: f, since: time.Now()}
		if l, ok := f.(*fold.Latest); ok && foldable(batches) {
			// Held across the adds, within the byte budget (the caller
			// flushes when it is full), written in key order at Finish.
			l.SortExternally(int(a.pendingBudget()))
			a.pend.latest = l
		} else if ok {
			// One sorted write of the last value of each key at Finish.
			l.RetainRecords(math.MaxInt)
		}
	}
	p := a.pend
	p.last = time.Now()
	for _, b := range batches {
		p.n += len(b.Records)
		if p.latest != nil {
			// Cannot fail: foldable checked the only record Latest
			// refuses, and SortExternally never writes to the table.
			if err := p.latest.Fold(nil, b.Records); err != nil {
				a.pend = nil // part of a batch: nothing of it may commit
				return fmt.Errorf("follow table %q: %w", a.table, err)
			}
			b.Records = nil // copied into the fold: the batch's bytes are released
		}
		p.batches = append(p.batches, b)
	}
	p.skipped += skipped
	return nil
}

// foldable reports whether a latest fold folds every record of batches
// without an error: none has a key over fold.MaxKeySize (a bad record,
// refused or skipped by OnBadRecord).
func foldable(batches []replay.FollowBatch) bool {
	for _, b := range batches {
		for i := range b.Records {
			if len(b.Records[i].Key) > fold.MaxKeySize {
				return false
			}
		}
	}
	return true
}

// pendingBudget bounds the rows a latest fold holds across adds (keys,
// values and the fold's bookkeeping): twice the apply's byte budget, what
// one apply of MaxApplyBytes of records held before in its fold's copy of
// them with its bookkeeping (about 1.8 times their bytes for 100-byte
// values). Full is checked after each add, so one add's rows may go over
// it (see followMemorySplit).
func (a *applier) pendingBudget() int64 {
	return 2 * max(a.opts.MaxApplyBytes, 1)
}

// flushDue reports whether what was added should be committed now: a
// fold that folds in the transaction (count), the fold's budget full, the
// first batch added waiting since limit or the last since idle, or no
// batch waiting (waiting false) and the positions at the last stable
// offsets the last refresh read (caught up: a record applied now is
// visible now). While the follower is behind, the next batch is near and
// goes into the same commit.
func (a *applier) flushDue(waiting bool, limit, idle time.Duration) bool {
	p := a.pend
	switch {
	case p == nil:
		return false
	case p.latest == nil || p.latest.Full() || time.Since(p.since) >= limit || time.Since(p.last) >= idle:
		return true
	case waiting:
		return false
	}
	return !a.behind(p.batches[len(p.batches)-1].Positions)
}

// behind reports whether some partition's position is below the last
// stable offset the newest live marks read: records that can be read now.
func (a *applier) behind(positions map[int32]int64) bool {
	a.liveMu.Lock()
	defer a.liveMu.Unlock()
	if len(a.live) == 0 {
		return false
	}
	for p, lso := range a.live[len(a.live)-1].LSO {
		if pos, ok := positions[p]; ok && pos < lso {
			return true
		}
	}
	return false
}

// pendingDue is when what was added is due at the latest: limit after the
// first batch added or idle after the last, whichever comes first; ok
// false when nothing was added.
func (a *applier) pendingDue(limit, idle time.Duration) (time.Time, bool) {
	if a.pend == nil {
		return time.Time{}, false
	}
	first, last := a.pend.since.Add(limit), a.pend.last.Add(idle)
	if last.Before(first) {
		return last, true
	}
	return first, true
}

// flush commits what was added in one transaction, with the metadata's
// counters and the checkpoint's positions of the last batch added. An
// error commits nothing and forgets what was added (the follower stops;
// the next one reads it again from the checkpoint).
func (a *applier) flush() error {
	p := a.pend
	if p == nil {
		return nil
	}
	a.pend = nil
	batches, n, skipped, f := p.batches, p.n, p.skipped, p.f
	last := batches[len(batches)-1]
	lows := map[int32]int64{}
	for _, b := range batches {
		maps.Copy(lows, b.Lows)
	}
	cp := followCheckpoint(a.cp, last.Positions, lows)
	cp.CapturedAt = a.capturedAt(a.cp.CapturedAt, endsOf(cp))
	a.liveMu.Lock()
	// A checkpoint without a topic ID (saved by a build without them) gets
	// the one the follower started with.
	cp.TopicID = recordedID(cp.TopicID, a.topicID)
	a.liveMu.Unlock()
	count, isCount := f.(*fold.Count)
	st, err := a.opts.DB.Apply(a.table, a.gen, func(r store.Rows) error {
		t := foldTable{r}
		if n == 0 {
			return nil
		}
		if p.latest == nil {
			for _, b := range batches {
				if err := f.Fold(t, b.Records); err != nil {
					return err
				}
			}
		}
		if isCount {
			// Finish writes each group's count of this batch's new
			// events: added to the row, not replacing it.
			return count.Finish(addTable{t})
		}
		return f.Finish(t)
	}, func(m *store.TableMeta) error {
		addStats(m, withDecodeSkips(f.Stats(), skipped))
		if isCount {
			m.Empty = m.Empty && count.Empty()
		} else {
			m.Empty = m.Keys == 0
		}
		return nil
	}, func(tx *bolt.Tx) error {
		// Only if the checkpoint is still the one this follower last
		// committed (or started from): another follower or an update that
		// committed meanwhile read the same records, and this batch on top
		// would apply them twice and move positions back.
		return saveCheckpointFrom(tx, a.table, writerFollower, a.cp, cp)
	})
	if err != nil {
		return fmt.Errorf("follow table %q: %w", a.table, err)
	}
	a.cp = cp
	if a.opts.Status != nil {
		var held int64
		for _, b := range batches {
			held += b.Held
		}
		// Only the last batch's end is the apply's: an Unstable
		// batch followed by a stable one was not a visible cut.
		a.opts.Status.applied(cp, int64(n), last.Unstable, held)
	}
	a.log.Debug().Int("records", n).Int("batches", len(batches)).Int64("added", st.Added).Int64("removed", st.Removed).Msg("applied")
	return nil
}

// followCheckpoint is cp with each partition's end at positions (partitions
// added since start at their low).
func followCheckpoint(cp checkpoint.Checkpoint, positions, lows map[int32]int64) checkpoint.Checkpoint {
	out := cp
	out.Partitions = slices.Clone(cp.Partitions)
	idx := map[int32]int{}
	for i, p := range out.Partitions {
		idx[p.Partition] = i
	}
	for p, pos := range positions {
		i, ok := idx[p]
		if !ok {
			low := lows[p]
			out.Partitions = append(out.Partitions, checkpoint.Partition{Partition: p, Low: low, Start: low, High: pos, End: pos})
			continue
		}
		cpp := &out.Partitions[i]
		if pos < cpp.End {
			continue // never backwards
		}
		cpp.End = pos
		cpp.High = max(cpp.High, pos)
	}
	slices.SortFunc(out.Partitions, func(a, b checkpoint.Partition) int { return int(a.Partition) - int(b.Partition) })
	if n := len(out.Partitions); !out.Subset && n > 0 {
		// A table over all partitions counts those it reads now; a
		// shard keeps the count it was built at (Repartitioned).
		out.PartitionsOfTopic = max(out.PartitionsOfTopic, out.Partitions[n-1].Partition+1)
	}
	return out
}

// addStats adds one batch's fold counters to the table's.
func addStats(m *store.TableMeta, s fold.Stats) {
	m.Records += s.Records
	m.Skipped += s.Skipped
	for k, v := range s.SkippedByReason {
		if m.SkippedByReason == nil {
			m.SkippedByReason = map[string]int64{}
		}
		m.SkippedByReason[k] += v
	}
	for k, v := range s.Extra {
		if m.Extra == nil {
			m.Extra = map[string]int64{}
		}
		m.Extra[k] += v
	}
}

// addTable is the count fold's Table for an increment: Put(group, n) adds
// n to the group's row (the fold's Finish writes the counts of the new
// events only); reads, deletes and indexes are the table's.
type addTable struct{ fold.Table }

func (t addTable) Put(key, value []byte) error {
	n, err := strconv.ParseInt(string(value), 10, 64)
	if err != nil {
		return fmt.Errorf("count row %q: the fold wrote %q, not a count: %w", key, value, err)
	}
	old, err := t.Table.Get(key)
	if err != nil {
		return err
	}
	if old != nil {
		o, err := strconv.ParseInt(string(old), 10, 64)
		if err != nil {
			return fmt.Errorf("count row %q holds %q, not a count: %w", key, old, err)
		}
		n += o
	}
	return t.Table.Put(key, strconv.AppendInt(nil, n, 10))
}
