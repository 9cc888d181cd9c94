package materialize

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/cpushare"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// UpdateOptions describe one incremental update of a published table.
type UpdateOptions struct {
	DB    *store.DB
	Table string // required: the table's definition is the one stored with it
	// Brokers and Props are the connection settings (a table's definition
	// holds none).
	Brokers string
	Props   map[string]string
	// Registry is the Schema Registry a table with an avro, protobuf or
	// jsonschema format decodes with (a connection setting too): the
	// update decodes keys and values as the table's rebuild did.
	Registry decode.Registry
	// End, StallTimeout and Memory override the stored definition's when
	// set.
	End          replay.EndMark
	StallTimeout time.Duration
	Memory       int64
	// RebuildIfNeeded runs a full rebuild (from the stored definition)
	// instead of refusing when the checkpoint cannot be continued
	// (*StaleCheckpointError).
	RebuildIfNeeded bool
	// Progress and ProgressInterval are the replay's (replay.Config).
	Progress         func(replay.Progress)
	ProgressInterval time.Duration
	// Now is the clock the checkpoint's age is measured with. Default
	// time.Now.
	Now func() time.Time
	// CPU is the share of the cores the update's folds and merge take
	// turns on, as Options.CPU for a rebuild; nil: unlimited.
	CPU *cpushare.Share
	Log zerolog.Logger
}

// How an update changed the table (Report.Mode).
const (
	// ModeInPlace: the new records were applied to the published
	// generation in one write transaction.
	ModeInPlace = "in-place"
	// ModeMerged: the published rows and the new ones were merged into a
	// new generation, published like a rebuild.
	ModeMerged = "merged"
	// ModeRebuilt: the checkpoint could not be continued and
	// RebuildIfNeeded ran a full rebuild.
	ModeRebuilt = "rebuilt"
)

// Topic configuration entries an update reads (DescribeConfigs).
const (
	configCleanupPolicy   = "cleanup.policy"
	configDeleteRetention = "delete.retention.ms"
)

// Update applies what table's topic gained since its checkpoint, up to the
// end marks captured once at its start (the rebuild's end rules), and
// publishes it atomically: readers see the table before or after the whole
// update. The table's definition is the one stored with it (LoadSpec).
//
// A backlog that fits the memory bound is applied to the published
// generation in one write transaction (store.DB.Apply); a larger one is
// merged with the published rows into a new generation, published like a
// rebuild. Either way the checkpoint commits with the rows, and Stats are
// those of a full rebuild over the same records.
//
// It refuses, with a *StaleCheckpointError (ErrStaleCheckpoint) and before
// reading anything, a checkpoint the topic no longer continues: below a
// partition's retained low, past its end, a partition gone, or, on a
// compacted topic, older than delete.retention.ms (or of unknown age, or a
// topic configuration it cannot read); with RebuildIfNeeded it runs a full
// rebuild instead. A count fold's conflict between the new records and the
// table's is a *fold.ConflictError, and the table is unchanged.
func Update(ctx context.Context, o UpdateOptions) (Report, error) {
	started := time.Now()
	if o.Now == nil {
		o.Now = time.Now
	}
	spec, err := LoadSpec(o.DB, o.Table)
	if err != nil {
		return Report{}, err
	}
	if !spec.UntilTimestamp.IsZero() || len(spec.ToOffsets) > 0 {
		// A table as of a point (rebuild --until-timestamp/--to-offsets)
		// ends where its bound says: reading on from its checkpoint would
		// silently make it a table as of now.
		return Report{}, &SpecError{Table: o.Table, Field: FieldUntil,
			Reason: "the table was rebuilt as of a point (--until-timestamp or --to-offsets) and cannot be updated; rebuild it without the bound to keep it current"}
	}
	// The overrides are this run's: the table keeps its stored definition.
	stored := spec
	if o.End != "" {
		spec.End = o.End
	}
	if o.StallTimeout > 0 {
		spec.StallTimeout = o.StallTimeout
	}
	if o.Memory > 0 {
		spec.Memory = o.Memory
	}
	meta, cp, ok, err := loadState(o.DB, o.Table)
	if err != nil {
		return Report{}, err
	}
	log := o.Log.With().Str("table", o.Table).Logger()
	var stale error
	if !ok {
		stale = &StaleCheckpointError{Table: o.Table, Topic: spec.Topic, Partition: -1, Checkpoint: -1, Low: -1, Reason: "the table has no checkpoint"}
	} else if cp.Topic != spec.Topic {
		stale = &StaleCheckpointError{Table: o.Table, Topic: spec.Topic, Partition: -1, Checkpoint: -1, Low: -1,
			Reason: fmt.Sprintf("its checkpoint is of topic %q", cp.Topic)}
	}
	var rep Report
	if stale == nil {
		rep, err = update(ctx, o, spec, meta, cp, started, log)
		if !errors.Is(err, ErrStaleCheckpoint) {
			return rep, err
		}
		stale = err
	}
	if !o.RebuildIfNeeded {
		return rep, stale
	}
	log.Warn().Str("reason", stale.Error()).Msg("the checkpoint cannot be continued: running a full rebuild (--rebuild-if-needed)")
	opts, err := spec.Options(o.DB, o.Brokers, o.Props, o.Log)
	if err != nil {
		return Report{}, err
	}
	opts.Decode.Registry = o.Registry
	opts.Replay.Progress, opts.Replay.ProgressInterval = o.Progress, o.ProgressInterval
	opts.Spec = &stored
	opts.CPU = o.CPU
	rep, err = Rebuild(ctx, opts)
	rep.Mode = ModeRebuilt
	return rep, err
}

// loadState reads the table's metadata and checkpoint in one transaction.
func loadState(db *store.DB, table string) (store.TableMeta, checkpoint.Checkpoint, bool, error) {
	var meta store.TableMeta
	var cp checkpoint.Checkpoint
	var ok bool
	err := db.ReadTable(table, func(s *store.Snapshot) error {
		meta = s.Meta
		var err error
		cp, ok, err = checkpoint.Load(s.Tx, table)
		return err
	})
	if err != nil {
		return meta, cp, false, fmt.Errorf("table %q: %w", table, err)
	}
	return meta, cp, ok, nil
}

// update is one update from checkpoint cp of the table published as meta.
func update(ctx context.Context, o UpdateOptions, spec Spec, meta store.TableMeta, cp checkpoint.Checkpoint,
	started time.Time, log zerolog.Logger) (Report, error) {
	opts, err := spec.Options(o.DB, o.Brokers, o.Props, o.Log)
	if err != nil {
		return Report{}, err
	}
	if opts.Memory <= 0 {
		opts.Memory = DefaultMemory
	}
	rc := opts.Replay
	rc.Readers = readers(rc.Readers)
	split := splitMemory(opts.Memory, rc.Readers)
	rc.Progress, rc.ProgressInterval = o.Progress, o.ProgressInterval
	if _, set := rc.Props[prefetchProp]; !set {
		props := maps.Clone(rc.Props)
		if props == nil {
			props = map[string]string{}
		}
		props[prefetchProp] = strconv.Itoa(split.prefetchKiB)
		rc.Props = props
	}
	rc.Start.Offsets = map[int32]int64{}
	for _, p := range cp.Partitions {
		rc.Start.Offsets[p.Partition] = p.End
	}
	rc.TopicConfigs = []string{configCleanupPolicy, configDeleteRetention}
	var retention time.Duration // the compacted topic's delete.retention.ms; 0 when not compacted
	rc.Check = func(plan replay.Plan) error {
		retention = compactedRetention(plan)
		return checkContinues(OpUpdate, o.Table, cp, plan, o.Now())
	}

	u := &updater{ctx: ctx, db: o.DB, table: o.Table, base: meta.Generation, memory: opts.Memory, hold: split.hold, cpu: o.CPU, log: log}
	switch f := opts.Fold.(type) {
	case *fold.Latest:
		f.SortExternally(split.hold)
		f.Resume(statsOf(meta))
		u.latest = f
	case *fold.Count:
		counts, err := readCounts(o.DB, o.Table)
		if err != nil {
			return Report{}, err
		}
		f.Resume(counts, statsOf(meta))
		u.count = f
	default:
		return Report{}, fmt.Errorf("table %q: fold %q cannot be updated", o.Table, opts.Fold.Name())
	}
	defer u.abort()

	// The update folds on the replay's goroutine: each batch (its decoding
	// included) is a unit in a slot of the share, taken outside any write
	// transaction (a batch that applies in place opens its own).
	fold1 := u.sink
	sink := func(batch []fold.Record) error { return o.CPU.Do(ctx, func() error { return fold1(batch) }) }
	if opts.Decode.Active() {
		// The same decoding as the table's rebuild (Rebuild), before the
		// fold; records it skips count in the table's stats (u.stats).
		opts.Decode.Registry = o.Registry
		dec, err := decode.New(opts.Decode)
		if err != nil {
			return Report{}, fmt.Errorf("table %q: %w", o.Table, err)
		}
		defer dec.Close()
		u.decoder = dec
		sink = func(batch []fold.Record) error {
			return o.CPU.Do(ctx, func() error {
				out, err := dec.Decode(batch)
				if err != nil || len(out) == 0 {
					return err
				}
				return u.sink(out)
			})
		}
	}
	// At a lower CPU priority in the daemon, as a rebuild's read.
	var res replay.Result
	if o.CPU != nil {
		rc.CPU = o.CPU
	}
	rc.Lower = o.CPU.Run // every reader at the priority of the one below
	// The replay's clients close while the apply or merge and the publish
	// run (a close waits for the fetch in flight); the update returns
	// after.
	rc.CloseBehind = true
	o.CPU.Run(func() { res, err = replay.Run(ctx, rc, sink) })
	defer res.WaitClosed()
	if err != nil {
		return Report{Replay: res}, err
	}
	// The check before the read saw the checkpoint young enough; a read
	// that outlasted the rest of delete.retention.ms may have missed a
	// tombstone removed meanwhile.
	if age := o.Now().Sub(cp.CapturedAt); retention > 0 && age > retention {
		return Report{Replay: res}, &StaleCheckpointError{Table: o.Table, Topic: spec.Topic, Partition: -1, Checkpoint: -1, Low: -1,
			Reason: fmt.Sprintf("the topic is compacted and the update's read ended %s after the checkpoint was captured, past %s=%d: tombstones written since may be gone",
				age.Round(time.Millisecond), configDeleteRetention, retention.Milliseconds())}
	}
	if err := ctx.Err(); err != nil {
		return Report{Replay: res}, fmt.Errorf("update of table %q interrupted before publish: %w", o.Table, err)
	}
	replayed(ctx) // the rest (apply or merge, publish) reads nothing
	next := nextCheckpoint(cp, res.Plan)
	// The table keeps its stored definition (meta.Spec): the run's
	// overrides (--end, --stall-timeout, --memory) are not stored.
	var specJSON []byte
	// The checkpoint must still be the one the update started from: a
	// follower (or anything else) that applied records meanwhile would
	// otherwise have them applied twice.
	hook := func(tx *bolt.Tx) error {
		return saveCheckpointFrom(tx, o.Table, writerUpdate, cp, next)
	}
	mode, err := u.publish(ctx, meta, specJSON, hook)
	log = log.With().Int("runs", u.runs).Logger()
	if err != nil {
		return Report{Replay: res}, err
	}
	published, err := o.DB.Table(o.Table)
	if err != nil {
		return Report{Replay: res}, err
	}
	log.Info().Str("topic", spec.Topic).Str("mode", mode).Int64("records", res.Records).Int64("keys", published.Keys).
		Int64("updates", next.Updates).Int64("took_ms", time.Since(started).Milliseconds()).Msg("updated")
	return Report{Meta: published, Checkpoint: next, Replay: res, Mode: mode}, nil
}

// nextCheckpoint is the checkpoint after an update from cp that read plan:
// each partition's data still starts where the table's did (a partition
// added since starts where the update read it from), and ends at the
// update's end.
func nextCheckpoint(cp checkpoint.Checkpoint, plan replay.Plan) checkpoint.Checkpoint {
	old := map[int32]checkpoint.Partition{}
	for _, p := range cp.Partitions {
		old[p.Partition] = p
	}
	next := checkpoint.Checkpoint{Topic: cp.Topic, EndMark: string(plan.End), CapturedAt: plan.CapturedAt, Updates: cp.Updates + 1,
		TopicID: recordedID(cp.TopicID, plan.TopicID), PartitionsOfTopic: plan.PartitionsOfTopic, Subset: cp.Subset}
	for _, p := range plan.Partitions {
		start := p.Start
		if o, ok := old[p.Partition]; ok {
			start = o.Start
		}
		next.Partitions = append(next.Partitions, checkpoint.Partition{
			Partition: p.Partition, Low: p.Low, Start: start, High: p.End, End: p.End,
		})
	}
	return next
}

// recordedID is the topic ID a checkpoint saved after reading a plan
// records: the plan's, or, when the broker reported none (zero: unknown),
// the one the checkpoint had. checkTopicID has refused a different one.
func recordedID(had [16]byte, now replay.TopicID) [16]byte {
	if now.IsZero() {
		return had
	}
	return now
}

// statsOf is the fold counters a published table records.
func statsOf(m store.TableMeta) fold.Stats {
	return fold.Stats{Records: m.Records, Skipped: m.Skipped, SkippedByReason: m.SkippedByReason, Extra: m.Extra}
}

// readCounts reads a count table's rows: group -> count.
func readCounts(db *store.DB, table string) (map[string]int64, error) {
	counts := map[string]int64{}
	err := db.Scan(table, nil, 0, func(k, v []byte) error {
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return fmt.Errorf("%w: table %q: row %q is not a count: %q", store.ErrCorrupt, table, k, v)
		}
		counts[string(k)] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("table %q: read its counts: %w", table, err)
	}
	return counts, nil
}
