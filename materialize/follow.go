package materialize

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/semaphore"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/internal/cpushare"
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

// followBehindCommit bounds how long a follower that is behind (its
// positions below the last stable offsets the last refresh read) folds
// batches into one commit before it commits them: a catch-up commits in
// steps of at most this long (or of the fold's byte budget), rather than
// once per batch, and its readers see it move on at least that often.
const followBehindCommit = time.Second

// followMemorySplit is how a follower divides its table's memory M
// (Spec.Memory, default DefaultMemory) between the parts that hold
// records, so that it holds about M/2 however far behind the table is (the
// rest is headroom for the garbage collector, as memorySplit explains):
//
//   - the client's prefetch queue, M/8: librdkafka's
//     queued.max.messages.kbytes (C memory), unless the properties set it,
//     divided among the readers (Spec.Readers, replay.Config.Readers);
//   - the records read and not yet handed over (past the last stable
//     offset seen, replay.FollowConfig.MaxBytes), M/16, divided among
//     them too;
//   - the batches handed over and not yet folded or committed, M/16 (the
//     in-flight semaphore);
//   - a latest table's rows folded and not yet committed (the last
//     record of each key of the batches a follower behind commits
//     together, see followBehindCommit), M/8 (twice MaxApplyBytes, keys,
//     values and the fold's bookkeeping), overshot by at most one
//     handing-over's rows (not at all for rows of a page or more, which
//     commit first: largeRow); this replaces the copy an apply's fold made of
//     its own batches (up to about 1.8 times their M/16 for 100-byte
//     values). A count table's apply folds in its transaction, from its
//     batches, as before. The transaction's dirty pages are about the
//     size of the rows written until it commits.
//
// Live: about M/4 of Go memory plus M/8 of C, and far behind with keys
// that do not repeat, one handing-over's rows more (the overshoot, about
// M/9 for 100-byte values). A table whose rows fit in their M/8 is folded
// once per followBehindCommit however far behind it is.
type followMemorySplit struct {
	prefetchKiB int   // queued.max.messages.kbytes
	apply       int64 // MaxApplyBytes: held, in flight; twice it folded
}

func splitFollowMemory(m int64) followMemorySplit {
	if m <= 0 {
		m = DefaultMemory
	}
	return followMemorySplit{prefetchKiB: int(max(m/8/1024, 1)), apply: max(m/16, 1)}
}

// DefaultFollowReaders is how many consumers a follower reads its
// partitions with when the table's definition does not say (Spec.Readers
// 0): one, unlike a rebuild (DefaultReaders). A second one did not make a
// catch-up faster on two cores (1M records: 0.91 s with one, 1.00 s with
// two, medians of 5; bench/RESULTS.md, 2026-12-06): a follower's catch-up
// waits on its fetches and its commit, not on its read loop, and each
// consumer keeps its connections, threads and idle fetches for as long as
// the table is followed.
const DefaultFollowReaders = 1

// ErrNoCheckpoint is returned by KeepCurrent when the table has no checkpoint to
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
	// DefaultFollowInterval. A follower that is behind (its positions
	// below the last stable offsets the last refresh read) folds the
	// batches of a latest table together and commits them when caught
	// up, when their rows fill twice MaxApplyBytes, an Interval after the
	// last if no other came, or followBehindCommit (1s) after the first:
	// its readers see a catch-up move on in those steps.
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
	// CPU, if set, is the share of the process's cores the follower's
	// applies take turns on (as Options.CPU for a rebuild): each apply
	// (decode, fold, commit) runs in a slot taken before its transaction
	// begins. nil: unlimited.
	CPU *cpushare.Share
	Log zerolog.Logger
}

// KeepCurrent keeps table opts.Spec's published generation current: it reads
// the topic with read_committed from the table's checkpoint (replay.Tail)
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
// KeepCurrent (after a retriable error) checks again at its start.
//
// It returns nil when ctx ends, and otherwise the first error: a conflict or
// a bad record the fold refuses (the batch is not applied), records deleted
// below the checkpoint (replay.ErrRecordsRemoved), a rebuild that published
// another generation meanwhile (store.ErrGenerationChanged: follow again
// from the new checkpoint), another writer (an update, a second follower)
// that moved the checkpoint since this follower read it (ErrCheckpointMoved,
// nothing of the batch applied: follow again from the stored checkpoint), a
// client error. The table keeps its last applied state in every case.
func KeepCurrent(ctx context.Context, opts FollowOptions) error {
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
	a := &applier{opts: opts, spec: spec, table: table, gen: meta.Generation, cp: cp, log: log,
		shard: checkpoint.Checkpoint{Subset: cp.Subset, PartitionsOfTopic: cp.PartitionsOfTopic}}
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
	rc.Partitions = spec.Partitions
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
	// The partitions are read by Spec.Readers consumers (replay's
	// "Parallel followers"), the others' loops at the priority of this
	// one; by one unless the table says (DefaultFollowReaders).
	rc.Readers = DefaultFollowReaders
	if spec.Readers > 0 {
		rc.Readers = spec.Readers
	}
	rc.Lower = opts.CPU.Run
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
		// At a lower CPU priority in the daemon, as a rebuild's read. The
		// batches' Go work takes no slot of the share (fc.CPU stays nil),
		// unlike a rebuild's: the read loop runs on a thread at nice 10,
		// which the kernel runs after the reads, the daemon has spare Ps
		// (cpushare.SpareProcs), and the apply, which holds a slot, would
		// otherwise take turns with its own reader on a two-core host's one
		// slot (a catch-up of 1M records: 0.81 to 0.84 s with the turns,
		// 0.64 to 0.76 s without; bench/RESULTS.md, 2026-12-04).
		opts.CPU.Run(func() {
			rerr = replay.Tail(rctx, fc, func(b replay.FollowBatch) error {
				if err := room.Acquire(rctx, weight(b)); err != nil {
					return err
				}
				select {
				case in <- b:
					opts.CPU.Yield() // a waiting read before the next poll
					return nil
				case <-rctx.Done():
					room.Release(weight(b))
					return rctx.Err()
				}
			})
		})
	}()
	log.Info().Str("topic", spec.Topic).Interface("from", from).Msg("following")
	// due fires when what was added and not committed is due (nil:
	// nothing waits): followBehindCommit after the first batch, or an
	// Interval after the last if no other came (a refresh that read new
	// stable offsets just after a cut makes a caught-up follower look
	// behind until the next batch).
	var due <-chan time.Time
	var dueAt time.Time
	for {
		if at, ok := a.pendingDue(followBehindCommit, opts.Interval); !ok {
			due, dueAt = nil, time.Time{}
		} else if !at.Equal(dueAt) {
			due, dueAt = time.After(time.Until(at)), at
		}
		select {
		case <-done:
			if ctx.Err() != nil {
				return nil
			}
			if rerr == nil {
				rerr = errors.New("follower ended without an error")
			}
			// What was read before the error is committed first: the
			// next follower starts after it.
			if err := a.flushNow(ctx); err != nil {
				log.Warn().Err(err).Msg("follow: the records read before the follower's error were not applied")
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
			// The apply in a slot of the share; ctx ending while it waits
			// for one is the end of following, as below.
			if err := opts.CPU.Acquire(ctx); err != nil {
				cancel()
				<-done
				return nil
			}
			// A latest fold folds the batches now and commits them with
			// the next ones while the follower is behind (flushDue); their
			// records are then released at once. When the folded rows
			// are large (a page or more each: bbolt writes each to pages
			// of its own, allocated for the commit) and the batches would
			// take them past their budget, what was folded commits
			// first: such a commit costs its rows again in dirty pages,
			// and one past the budget took a follower of 1 MB values
			// 25 MiB past its memory. Small rows share their pages.
			adding := inFlight(batches, weight)
			if p := a.pend; p != nil && p.latest != nil {
				if held, keys := p.latest.Held(); keys > 0 && held+adding > a.pendingBudget() && held/int64(keys) >= largeRow {
					if err := a.flush(); err != nil {
						opts.CPU.Release()
						release(room, batches, weight)
						cancel()
						<-done
						return err
					}
				}
			}
			err := a.add(batches)
			if a.pend != nil && a.pend.latest != nil {
				release(room, batches, weight)
				batches = nil
			}
			if err == nil && a.flushDue(len(in) > 0, followBehindCommit, opts.Interval) {
				err = a.flush()
			} else if err != nil {
				// What was added before these commits first.
				if ferr := a.flush(); ferr != nil {
					log.Warn().Err(ferr).Msg("follow: the records read before the failed batch were not applied")
				}
			}
			opts.CPU.Release()
			release(room, batches, weight)
			if err != nil {
				cancel()
				<-done
				return err
			}
		case <-due:
			dueAt = time.Time{}
			if err := a.flushNow(ctx); err != nil {
				cancel()
				<-done
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		case <-checkc:
			// The check's positions are the committed ones.
			if err := a.flushNow(ctx); err != nil {
				cancel()
				<-done
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if err := a.checkRunning(); err != nil {
				cancel()
				<-done
				return err
			}
		case <-ctx.Done():
			// What was added and not committed is read again by the
			// next follower, as the batches still in flight.
			cancel()
			<-done
			return nil
		}
	}
}

// release gives batches' weights back to room.
func release(room *semaphore.Weighted, batches []replay.FollowBatch, weight func(replay.FollowBatch) int64) {
	for _, b := range batches {
		room.Release(weight(b))
	}
}

// flushNow commits what the applier added, in a slot of the CPU share. ctx
// ending while it waits for one commits nothing and returns ctx's error.
func (a *applier) flushNow(ctx context.Context) error {
	if a.pend == nil {
		return nil
	}
	if err := a.opts.CPU.Acquire(ctx); err != nil {
		return err
	}
	defer a.opts.CPU.Release()
	return a.flush()
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
// opts.Spec (on_bad_record, stall_timeout, memory, readers); opts.Spec
// itself for a table stored without a definition.
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
	stored.OnBadRecord, stored.StallTimeout, stored.Memory, stored.Readers = opts.Spec.OnBadRecord, opts.Spec.StallTimeout, opts.Spec.Memory, opts.Spec.Readers
	return stored, nil
}

// foldName is the fold's name as stored in a table's metadata.
func (s Spec) foldName() string {
	if s.Fold == "" {
		return FoldLatest
	}
	return s.Fold
}

// FollowRetriable reports whether KeepCurrent's error may pass without a
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

// largeRow is the folded row size (key, value and bookkeeping) from which
// a follower commits what it folded before it folds past the budget:
// bbolt's page size, from which a value takes overflow pages of its own.
const largeRow = 4096

// inFlight is the weight of batches: their records' bytes, as the
// in-flight semaphore counts them.
func inFlight(batches []replay.FollowBatch, weight func(replay.FollowBatch) int64) int64 {
	var n int64
	for _, b := range batches {
		n += weight(b)
	}
	return n
}
