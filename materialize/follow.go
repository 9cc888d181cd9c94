package materialize

import (
	"context"
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
	"golang.org/x/sync/semaphore"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/failpoint"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// DefaultFollowInterval is how long a followed table's records wait, at
// most, before they are applied while records keep coming.
const DefaultFollowInterval = 200 * time.Millisecond

// DefaultFollowCheck is FollowOptions.CheckInterval's default: while a
// table follows, its topic's configuration is read again, and the
// checkpoint's age compared with delete.retention.ms, every five minutes.
const DefaultFollowCheck = replay.DefaultConfigRefresh

// followMaxRecords bounds the records applied in one transaction: the
// batches waiting when the last transaction committed are applied
// together, up to this many.
const followMaxRecords = 100_000

// followMemorySplit is how a follower divides its table's memory M
// (Spec.Memory, default DefaultMemory) between the parts that hold
// records, so that it holds about M/2 however far behind the table is (the
// rest is headroom for the garbage collector, as memorySplit explains):
//
//   - the client's prefetch queue, M/8: librdkafka's
//     queued.max.messages.kbytes (C memory), unless the properties set it;
//   - the records read and not yet handed over (past the last stable
//     offset seen, replay.FollowConfig.MaxBytes), M/16;
//   - the batches handed over and not yet committed, the apply being
//     written included, M/16 (the in-flight semaphore); an apply takes at
//     most M/16 of them (MaxApplyBytes), and its transaction's dirty pages
//     are about as much again until it commits.
//
// Live: about 3M/16 of Go memory (3M/8 with garbage) plus M/8 of C.
type followMemorySplit struct {
	prefetchKiB int   // queued.max.messages.kbytes
	apply       int64 // MaxApplyBytes: held, in flight, one apply
}

func splitFollowMemory(m int64) followMemorySplit {
	if m <= 0 {
		m = DefaultMemory
	}
	return followMemorySplit{prefetchKiB: int(max(m/8/1024, 1)), apply: max(m/16, 1)}
}

// ErrNoCheckpoint is returned by Follow when the table has no checkpoint to
// follow from (it was never published by a rebuild).
var ErrNoCheckpoint = errors.New("table has no checkpoint")

// FollowOptions describe one follower of a published table.
type FollowOptions struct {
	DB *store.DB
	// Spec names the table (Spec.Name, or its topic) and gives the
	// follower's OnBadRecord, StallTimeout and Memory. The records are read and
	// folded by the definition stored with the published table (LoadSpec),
	// never by Spec's: a Spec whose definition differs (DefinitionChanges)
	// needs a rebuild, which the caller starts, and until it publishes the
	// table goes on as it was defined. Only a table stored without a
	// definition (built by an older kmaterialize) is followed by Spec's,
	// when its topic and fold agree with the table's.
	Spec Spec
	// Replay carries the connection (Brokers, Props), Log, StallTimeout,
	// BatchRecords; its Topic, End and Start are ignored.
	Replay replay.Config
	// Interval: see replay.FollowConfig.Interval. Default
	// DefaultFollowInterval.
	Interval time.Duration
	// Refresh is how often the live marks are asked for. Default 1s. It
	// bounds, too, how long records of a partition that never idles wait
	// for a stable offset to be applied at (see MaxApplyBytes).
	Refresh time.Duration
	// MaxApplyBytes is an apply's byte budget (records' keys and values).
	// An apply ends only before the first record at or above a last
	// stable offset the follower has seen (replay.FollowConfig's "Where a
	// batch ends"), so that a transaction becomes visible whole; when the
	// records read past the last such offset reach this budget first, the
	// apply ends where the reading stood, possibly inside a transaction,
	// and FollowSnapshot.UnstableCuts counts it. Default: from the table's
	// memory (Spec.Memory, see followMemorySplit), 16 MiB for the default
	// 256 MiB. Memory: about this much is held while reading, and about
	// this much more is in flight.
	MaxApplyBytes int64
	// CheckInterval is how often, while following, the topic's
	// configuration is read again (cleanup.policy and delete.retention.ms
	// can change) and the continuation check's retention rule applied to
	// the checkpoint's capture time. Default DefaultFollowCheck.
	CheckInterval time.Duration
	// Status, if set, is kept up to date: positions applied, live marks,
	// apply counters.
	Status *FollowStatus
	// Registry is the Schema Registry for a Spec whose key or value format
	// needs one (as Options.Decode.Registry for a rebuild).
	Registry decode.Registry
	Log      zerolog.Logger
}

// Follow keeps table opts.Spec's published generation current: it reads
// the topic with read_committed from the table's checkpoint (replay.Follow)
// and applies what it reads with store.DB.Apply, each transaction holding
// the rows and the checkpoint's new positions together, so a restart (clean
// or a kill) resumes where the last commit left off: no record lost, none
// applied twice. Readers see, per partition, a prefix of the log, and a
// transaction's records in one partition together: an apply ends only at
// a last stable offset the follower has seen, unless MaxApplyBytes is
// reached first (counted in FollowSnapshot.UnstableCuts), and unless
// another producer's transaction began inside it and was still open when
// it committed (see replay.FollowConfig's "Where a batch ends"). Nothing
// is promised across partitions: each partition's cut is its own.
//
// Every continuation passes Update's continuation check (checkContinues):
// at the start, before anything is read, the checkpoint is refused (a
// *StaleCheckpointError, ErrStaleCheckpoint) when the topic was recreated
// (its topic ID changed), records it has not read were deleted, or the
// topic is compacted and the checkpoint older than delete.retention.ms (or
// of unknown age: an import). While it runs, the topic ID is compared at
// every Refresh, and every CheckInterval the configuration is read again
// and the checkpoint's capture time (which moves only when the follower
// has caught up with live marks) compared with the retention: a follower
// that stayed behind longer than that stops the same way. A retried
// Follow (after a retriable error) checks again at its start.
//
// It returns nil when ctx ends, and otherwise the first error: a conflict or
// a bad record the fold refuses (the batch is not applied), records deleted
// below the checkpoint (replay.ErrRecordsRemoved), a rebuild that published
// another generation meanwhile (store.ErrGenerationChanged: follow again
// from the new checkpoint), another writer (an update, a second follower)
// that moved the checkpoint since this follower read it (ErrCheckpointMoved,
// nothing of the batch applied: follow again from the stored checkpoint), a
// client error. The table keeps its last applied state in every case.
func Follow(ctx context.Context, opts FollowOptions) error {
	table := opts.Spec.TableName()
	if err := opts.Spec.Validate(); err != nil {
		return err
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultFollowInterval
	}
	split := splitFollowMemory(opts.Spec.Memory)
	if opts.MaxApplyBytes <= 0 {
		opts.MaxApplyBytes = split.apply
	}
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = DefaultFollowCheck
	}
	var meta store.TableMeta
	var cp checkpoint.Checkpoint
	err := opts.DB.ReadTable(table, func(snap *store.Snapshot) error {
		meta = snap.Meta
		var ok bool
		var err error
		cp, ok, err = checkpoint.Load(snap.Tx, table)
		if err == nil && !ok {
			err = fmt.Errorf("follow table %q: %w: rebuild it first", table, ErrNoCheckpoint)
		}
		return err
	})
	if err != nil {
		return err
	}
	spec, err := followSpec(opts, meta)
	if err != nil {
		return err
	}
	if cp.Topic != spec.Topic {
		return fmt.Errorf("follow table %q: its checkpoint is of topic %q, its definition says %q: %w",
			table, cp.Topic, spec.Topic, &SpecError{Table: table, Field: FieldTopic, Value: spec.Topic, Reason: "differs from the published table's topic; rebuild it"})
	}
	if meta.Fold != spec.foldName() {
		return fmt.Errorf("follow table %q: %w", table,
			&SpecError{Table: table, Field: FieldFold, Value: spec.foldName(), Reason: fmt.Sprintf("the published table was built with fold %s; rebuild it", meta.Fold)})
	}
	from := make(map[int32]int64, len(cp.Partitions))
	for _, p := range cp.Partitions {
		from[p.Partition] = p.End
	}
	if opts.Status != nil {
		opts.Status.start(cp)
	}
	log := opts.Log.With().Str("table", table).Uint64("generation", meta.Generation).Logger()
	a := &applier{opts: opts, spec: spec, table: table, gen: meta.Generation, cp: cp, log: log}
	dc := decode.Config{Topic: spec.Topic, Key: spec.KeyFormat, Value: spec.ValueFormat,
		OnBadRecord: spec.OnBadRecord, Registry: opts.Registry}
	if dc.Active() {
		// Keys and values are decoded as a rebuild of the table decodes
		// them, so the fold sees the same canonical JSON.
		if a.dec, err = decode.New(dc); err != nil {
			return fmt.Errorf("follow table %q: %w", table, err)
		}
		defer a.dec.Close()
	}

	rc := opts.Replay
	rc.Topic = spec.Topic
	rc.Log = log
	if rc.StallTimeout <= 0 {
		rc.StallTimeout = spec.StallTimeout
	}
	if _, set := rc.Props[prefetchProp]; !set {
		props := make(map[string]string, len(rc.Props)+1)
		maps.Copy(props, rc.Props)
		props[prefetchProp] = strconv.Itoa(split.prefetchKiB)
		rc.Props = props
	}
	rc.TopicConfigs = []string{configCleanupPolicy, configDeleteRetention}
	rc.Check = a.checkStart
	fc := replay.FollowConfig{Config: rc, From: from, Interval: opts.Interval, Refresh: opts.Refresh, ConfigRefresh: opts.CheckInterval, MaxBytes: opts.MaxApplyBytes}
	// checkc asks the apply loop to run the running check: the refresh
	// read the configuration again, or saw another topic ID.
	checkc := make(chan struct{}, 1)
	fc.Live = func(m replay.LiveMarks) {
		if a.noteLive(m) {
			select {
			case checkc <- struct{}{}:
			default: // one is pending
			}
		}
		if opts.Status != nil {
			opts.Status.live(m)
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// In flight: a few batches, MaxApplyBytes of records at most (a
	// larger batch alone): the reader keeps polling while a transaction
	// commits, and memory stays bounded in bytes (about twice the budget
	// with what the reader holds), not by how far behind the table is.
	in := make(chan replay.FollowBatch, 8)
	room := semaphore.NewWeighted(opts.MaxApplyBytes)
	weight := func(b replay.FollowBatch) int64 { return min(max(b.Bytes, 1), opts.MaxApplyBytes) }
	done := make(chan struct{})
	var rerr error
	go func() {
		defer close(done)
		rerr = replay.Follow(rctx, fc, func(b replay.FollowBatch) error {
			if err := room.Acquire(rctx, weight(b)); err != nil {
				return err
			}
			select {
			case in <- b:
				return nil
			case <-rctx.Done():
				room.Release(weight(b))
				return rctx.Err()
			}
		})
	}()
	log.Info().Str("topic", spec.Topic).Interface("from", from).Msg("following")
	for {
		select {
		case <-done:
			if ctx.Err() != nil {
				return nil
			}
			if rerr == nil {
				rerr = errors.New("follower ended without an error")
			}
			return fmt.Errorf("follow table %q: %w", table, rerr)
		case b := <-in:
			// Every batch ends at a stable offset (or is Unstable), so
			// an apply may end after any of them: the waiting ones go
			// together, within the record bound and the byte budget.
			batches := []replay.FollowBatch{b}
			n, size := len(b.Records), b.Bytes
		more:
			for n < followMaxRecords && size < opts.MaxApplyBytes {
				select {
				case b := <-in:
					batches = append(batches, b)
					n, size = n+len(b.Records), size+b.Bytes
				default:
					break more
				}
			}
			err := a.apply(batches)
			for _, b := range batches {
				room.Release(weight(b))
			}
			if err != nil {
				cancel()
				<-done
				return err
			}
		case <-checkc:
			if err := a.checkRunning(); err != nil {
				cancel()
				<-done
				return err
			}
		case <-ctx.Done():
			cancel()
			<-done
			return nil
		}
	}
}

// WatchLive keeps opts.Status's live marks current without following:
// every opts.Refresh (default 1s) it asks for the marks of the topic the
// published table follows (its checkpoint's; opts.Spec's topic when it has
// none) and records them, until ctx ends (then it returns nil) or its
// client cannot be created. The positions are left as they are, so the
// status's lag grows with what the topic gains. A followed table's
// rebuild runs it while it has stopped the follower for its catch-up and
// publish, so that the table's readiness stays true to its lag.
// opts.Replay gives the connection; opts.Status is required.
func WatchLive(ctx context.Context, opts FollowOptions) error {
	if opts.Status == nil {
		return errors.New("materialize.WatchLive: no Status")
	}
	table := opts.Spec.TableName()
	topic := opts.Spec.Topic
	err := opts.DB.ReadTable(table, func(snap *store.Snapshot) error {
		cp, ok, err := checkpoint.Load(snap.Tx, table)
		if err == nil && ok {
			topic = cp.Topic
		}
		return err
	})
	if err != nil && !errors.Is(err, store.ErrTableNotFound) {
		return fmt.Errorf("watch the live marks of table %q: %w", table, err)
	}
	rc := opts.Replay
	rc.Topic = topic
	rc.Log = opts.Log.With().Str("table", table).Logger()
	if rc.StallTimeout <= 0 {
		rc.StallTimeout = opts.Spec.StallTimeout
	}
	return replay.WatchLive(ctx, rc, opts.Refresh, opts.Status.live)
}

// followSpec is the Spec a follower of the table published with meta
// reads and folds by: the stored definition, with the run's settings of
// opts.Spec (on_bad_record, stall_timeout); opts.Spec itself for a table
// stored without a definition.
func followSpec(opts FollowOptions, meta store.TableMeta) (Spec, error) {
	stored, err := specOf(opts.DB, meta)
	if errors.Is(err, ErrNoSpec) {
		return opts.Spec, nil
	}
	if err != nil {
		return Spec{}, fmt.Errorf("follow table %q: %w", meta.Name, err)
	}
	if ch := DefinitionChanges(stored, opts.Spec); ch != nil {
		opts.Log.Info().Str("table", meta.Name).Strs("changed", ch).
			Msg("the configured definition differs from the published table's: following by the published one until a rebuild publishes the new one")
	}
	stored.OnBadRecord, stored.StallTimeout, stored.Memory = opts.Spec.OnBadRecord, opts.Spec.StallTimeout, opts.Spec.Memory
	return stored, nil
}

// foldName is the fold's name as stored in a table's metadata.
func (s Spec) foldName() string {
	if s.Fold == "" {
		return FoldLatest
	}
	return s.Fold
}

// applier applies a follower's batches to the published generation. It
// owns the checkpoint as last committed.
type applier struct {
	opts  FollowOptions
	spec  Spec // the definition the records are folded by (followSpec)
	table string
	gen   uint64
	cp    checkpoint.Checkpoint
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
	return m.TopicConfig != nil || a.topicID.Differs(m.TopicID)
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
	liveID, tc := a.liveID, a.config
	a.liveMu.Unlock()
	if err := checkTopicID(OpFollow, a.table, checkpoint.Checkpoint{TopicID: known}, a.spec.Topic, liveID); err != nil {
		return err
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

// apply folds batches into the published generation in one transaction,
// with the metadata's counters and the checkpoint's positions.
func (a *applier) apply(batches []replay.FollowBatch) error {
	n := 0
	for _, b := range batches {
		n += len(b.Records)
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
	f, err := a.spec.NewFolder()
	if err != nil {
		return err
	}
	count, isCount := f.(*fold.Count)
	if l, ok := f.(*fold.Latest); ok {
		// One sorted write of the last value of each key at Finish, over
		// every batch (within the byte budget, see MaxApplyBytes).
		l.RetainRecords(math.MaxInt)
	}
	st, err := a.opts.DB.Apply(a.table, a.gen, func(r store.Rows) error {
		t := foldTable{r}
		if n == 0 {
			return nil
		}
		for _, b := range batches {
			if err := f.Fold(t, b.Records); err != nil {
				return err
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
	a.log.Debug().Int("records", n).Int64("added", st.Added).Int64("removed", st.Removed).Msg("applied")
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

// FollowStatus is a follower's state for the daemon's API and metrics:
// per partition the position applied and the live marks, and the apply
// counters. Its methods are safe for concurrent use.
type FollowStatus struct {
	mu      sync.Mutex
	parts   map[int32]*PartitionStatus
	records int64 // records applied
	applies int64 // transactions committed
	last    time.Time
	samples []rateSample
	liveAt  time.Time
	liveErr error
	// refreshed: this status's follower (or watcher) has refreshed the
	// live marks; liveAt may be older, inherited (NewFollowStatus).
	refreshed bool

	// unstable counts applies that ended where no stable offset was
	// seen (the byte budget reached), held the read rounds that kept
	// records back for one.
	unstable int64
	held     int64
}

// PartitionStatus is one followed partition.
type PartitionStatus struct {
	Partition int32 `json:"partition"`
	// End is the position applied (the checkpoint's end).
	End int64 `json:"end"`
	// LiveHigh is the partition's high watermark at the last refresh (at
	// least End); -1 before the first.
	LiveHigh int64 `json:"live_high"`
	// Lag is LiveHigh - End: records (and markers) not applied yet.
	Lag int64 `json:"lag"`
}

// FollowSnapshot is a copy of a FollowStatus.
type FollowSnapshot struct {
	Partitions []PartitionStatus // sorted by partition
	Records    int64             // records applied since the follower started
	Applies    int64             // transactions committed
	LastApply  time.Time         // zero before the first
	Rate       float64           // records applied per second, over the last 10s or so
	LiveAt     time.Time         // when the live marks were last refreshed
	LiveError  error             // the last refresh's error, nil when it worked
	// Refreshed reports that this status's own follower has refreshed
	// the live marks at least once (it got past its start); the marks
	// may be inherited before (NewFollowStatus).
	Refreshed bool

	// UnstableCuts counts applies that ended where the follower had seen
	// no stable offset, because FollowOptions.MaxApplyBytes was reached
	// first: such an apply may show part of a transaction.
	UnstableCuts int64
	// Held counts the read rounds that would have ended a batch (by
	// record count, a drained queue or the interval) but kept records
	// back to reach a stable offset: the cuts inside a transaction that
	// did not happen.
	Held int64
}

type rateSample struct {
	at      time.Time
	records int64
}

// MaxLag is the largest lag of any partition; -1 when the live marks were
// never read.
func (s FollowSnapshot) MaxLag() int64 {
	out := int64(-1)
	for _, p := range s.Partitions {
		if p.LiveHigh >= 0 {
			out = max(out, p.Lag)
		}
	}
	return out
}

// Snapshot returns a copy of the status.
func (s *FollowStatus) Snapshot() FollowSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := FollowSnapshot{Records: s.records, Applies: s.applies, UnstableCuts: s.unstable, Held: s.held,
		LastApply: s.last, LiveAt: s.liveAt, LiveError: s.liveErr, Refreshed: s.refreshed}
	for _, p := range s.parts {
		out.Partitions = append(out.Partitions, *p)
	}
	slices.SortFunc(out.Partitions, func(a, b PartitionStatus) int { return int(a.Partition) - int(b.Partition) })
	now := time.Now()
	if len(s.samples) > 0 {
		first := s.samples[0]
		if d := now.Sub(first.at).Seconds(); d > 0 {
			out.Rate = float64(s.records-first.records) / d
		}
	}
	return out
}

// NewFollowStatus returns a status for a follower that replaces prev's
// (nil: none): it starts with prev's live marks, so that the lag stays
// known, not "high watermarks not read yet", from the moment a follower
// restarts (after a rebuild's publish, a reload) until its own first
// refresh. The marks are of the topic, not of a generation: the lag is
// then the new checkpoint's ends against them. FollowSnapshot.Refreshed
// stays false until this status's own refresh.
func NewFollowStatus(prev *FollowStatus) *FollowStatus {
	s := &FollowStatus{}
	if prev == nil {
		return s
	}
	prev.mu.Lock()
	defer prev.mu.Unlock()
	s.parts = make(map[int32]*PartitionStatus, len(prev.parts))
	for p, ps := range prev.parts {
		c := *ps
		s.parts[p] = &c
	}
	s.liveAt, s.liveErr = prev.liveAt, prev.liveErr
	return s
}

// start sets the positions to the checkpoint's, keeping the live marks
// known (a retried follower's, or NewFollowStatus's).
func (s *FollowStatus) start(cp checkpoint.Checkpoint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.parts
	s.parts = map[int32]*PartitionStatus{}
	for _, p := range cp.Partitions {
		ps := &PartitionStatus{Partition: p.Partition, End: p.End, LiveHigh: -1}
		if o := old[p.Partition]; o != nil {
			ps.LiveHigh = o.LiveHigh
		}
		ps.update()
		s.parts[p.Partition] = ps
	}
	s.samples = []rateSample{{at: time.Now(), records: s.records}}
}

func (s *FollowStatus) applied(cp checkpoint.Checkpoint, n int64, unstable bool, held int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.records += n
	s.applies++
	s.held += held
	if unstable {
		s.unstable++
	}
	s.last = now
	for _, p := range cp.Partitions {
		ps := s.parts[p.Partition]
		if ps == nil {
			ps = &PartitionStatus{Partition: p.Partition, LiveHigh: -1}
			s.parts[p.Partition] = ps
		}
		ps.End = p.End
		ps.update()
	}
	s.sample(now)
}

// sample keeps about one sample a second over the last 10s.
func (s *FollowStatus) sample(now time.Time) {
	if n := len(s.samples); n > 0 && now.Sub(s.samples[n-1].at) < time.Second {
		return
	}
	s.samples = append(s.samples, rateSample{at: now, records: s.records})
	for len(s.samples) > 1 && now.Sub(s.samples[0].at) > 10*time.Second {
		s.samples = s.samples[1:]
	}
}

func (s *FollowStatus) live(m replay.LiveMarks) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.liveAt, s.liveErr, s.refreshed = m.At, m.Error, true
	if m.Error != nil {
		return
	}
	for p, high := range m.High {
		ps := s.parts[p]
		if ps == nil {
			// A partition added to the topic: nothing applied yet.
			ps = &PartitionStatus{Partition: p, End: m.Low[p]}
			s.parts[p] = ps
		}
		ps.LiveHigh = high
		ps.update()
	}
	s.sample(time.Now())
}

// update recomputes the lag; a live high older than the last apply may be
// below End.
func (p *PartitionStatus) update() {
	if p.LiveHigh < 0 {
		p.Lag = 0
		return
	}
	p.LiveHigh = max(p.LiveHigh, p.End)
	p.Lag = p.LiveHigh - p.End
}

// catchUp reads on, into the rebuild's generation (sink), from each
// partition's end in res up to the positions opts.CatchUp returns, and
// returns res with the plan's ends moved there: partitions the rebuild did
// not capture (added since) are read from their low. A position at or
// below the rebuild's end reads nothing (the rebuild is ahead there).
//
// The read continues the rebuild's own end positions, so it passes the
// continuation check (checkContinues, as OpCatchUp) with those positions,
// the rebuild's topic ID and capture time: a topic recreated during the
// rebuild, records deleted above the rebuild's end before the catch-up
// read them (a start below the retained low is refused, never clamped to
// it), or a compacted topic's delete.retention.ms passed since the capture
// fail it with a *StaleCheckpointError, and nothing is published.
func catchUp(ctx context.Context, opts Options, res replay.Result, sink replay.Sink) (replay.Result, error) {
	targets, err := opts.CatchUp(ctx)
	if err != nil {
		return res, fmt.Errorf("catch up with the follower: %w", err)
	}
	failpoint.Hit(failpoint.CatchUpPaused) // a crash here leaves the old table and its checkpoint; the next open removes the unpublished generation
	ends := res.Positions()
	start := map[int32]int64{}
	until := map[int32]int64{}
	for p, pos := range targets {
		end, ok := ends[p]
		if ok && pos <= end {
			continue
		}
		if ok {
			start[p] = end
		}
		until[p] = pos
	}
	if len(until) == 0 {
		return res, nil
	}
	c := opts.Replay
	c.Start = replay.Start{Offsets: start}
	c.Stop = until
	c.Progress = nil
	from := checkpoint.Checkpoint{Topic: res.Plan.Topic, CapturedAt: res.Plan.CapturedAt, TopicID: res.Plan.TopicID}
	for p, off := range start {
		from.Partitions = append(from.Partitions, checkpoint.Partition{Partition: p, High: off, End: off})
	}
	c.TopicConfigs = []string{configCleanupPolicy, configDeleteRetention}
	c.Check = func(plan replay.Plan) error { return checkContinues(OpCatchUp, opts.Table, from, plan, time.Now()) }
	more, err := replay.Run(ctx, c, sink)
	if err != nil {
		return res, fmt.Errorf("catch up with the follower: %w", err)
	}
	out := res
	out.Records += more.Records
	out.Plan.Partitions = slices.Clone(res.Plan.Partitions)
	idx := map[int32]int{}
	for i, p := range out.Plan.Partitions {
		idx[p.Partition] = i
	}
	for _, pb := range more.Plan.Partitions {
		if _, ok := until[pb.Partition]; !ok {
			continue
		}
		i, ok := idx[pb.Partition]
		if !ok {
			out.Plan.Partitions = append(out.Plan.Partitions, pb)
			continue
		}
		p := &out.Plan.Partitions[i]
		p.End = pb.End
		p.High = max(p.High, pb.End)
	}
	slices.SortFunc(out.Plan.Partitions, func(a, b replay.PartitionBounds) int { return int(a.Partition) - int(b.Partition) })
	opts.Log.Info().Str("table", opts.Table).Interface("until", until).Int64("records", more.Records).
		Msg("caught up with the follower before publishing")
	return out, nil
}

// FollowRetriable reports whether Follow's error may pass without a
// rebuild, so that following is worth retrying: Kafka unavailable, a
// client error, a rebuild that published another generation meanwhile,
// another writer that moved the checkpoint (ErrCheckpointMoved).
// A stale checkpoint (ErrStaleCheckpoint: the topic recreated, records
// deleted below the checkpoint, tombstones possibly compacted away), a
// conflict or a bad record, a deleted topic or a definition that no longer
// matches the table are not: they need a rebuild (or an operator).
func FollowRetriable(err error) bool {
	if errors.Is(err, ErrStaleCheckpoint) || errors.Is(err, replay.ErrRecordsRemoved) || errors.Is(err, replay.ErrTopicNotFound) || errors.Is(err, replay.ErrBadStart) {
		return false
	}
	return errors.Is(err, replay.ErrUnavailable) || errors.Is(err, replay.ErrKafka) || errors.Is(err, store.ErrGenerationChanged) ||
		errors.Is(err, ErrCheckpointMoved) || errors.Is(err, decode.ErrUnavailable)
}
