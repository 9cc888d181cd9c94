package materialize

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// DefaultMemory is a rebuild's memory bound when Options.Memory is 0
// (--memory's default).
const DefaultMemory = 256 << 20

// memorySplit is how a rebuild divides its memory bound between the parts
// that hold records. The Go parts get a third of what they may use at most,
// because the garbage collector (GOGC=100) lets the heap grow to about twice
// its live data, and the records the latest fold drops (an older value of a
// key) are garbage until the next cycle:
//
//   - the client's prefetch queue, M/8: librdkafka's
//     queued.max.messages.kbytes (C memory, no collector), which bounds the
//     messages fetched but not yet polled across the partitions of the
//     consumer's queue, unless -X sets it;
//   - the writer's two record buffers (one filling while the other folds),
//     M/16 each;
//   - the latest fold's held rows, M/4, spilled as a sorted run when full.
//     The merge at the end reads each run through a buffer of at most
//     256 KiB (16 MiB in all), and by then the replay has released its
//     buffers and queue.
//
// Live: 3M/8 of Go memory (about 3M/4 with garbage) plus M/8 of C, within M.
type memorySplit struct {
	prefetchKiB int // queued.max.messages.kbytes
	buffer      int // bytes of records per writer buffer
	hold        int // bytes of rows the latest fold holds before spilling
}

func splitMemory(m int64) memorySplit {
	return memorySplit{
		prefetchKiB: int(max(m/8/1024, 1)),
		buffer:      int(max(m/16, 1)),
		hold:        int(max(m/4, 1)),
	}
}

// prefetchProp is the librdkafka property splitMemory sizes.
const prefetchProp = "queued.max.messages.kbytes"

// Options describe one rebuild.
type Options struct {
	DB     *store.DB
	Table  string // default: the topic name
	Replay replay.Config
	Fold   fold.Folder // default: fold.NewLatest()
	// Memory bounds the memory the rebuild's records and rows take: the
	// client's prefetch queue, the writer's buffers, the fold's held rows
	// (see memorySplit). Default DefaultMemory.
	Memory int64
	// WriteBudget overrides the bytes of records the writer buffers per
	// hand-off to the fold (default: from Memory).
	WriteBudget int
	// AllowEmpty publishes a rebuild in which no record contributed a row
	// over a table that has such rows. By default that rebuild is refused
	// with an *EmptyTableError (ErrWouldEmpty): a start past the last
	// record (--from-timestamp in the future, offsets at the end) would
	// otherwise wipe a full table and succeed. A first rebuild, or one over
	// an empty table, is never refused.
	AllowEmpty bool
	// Keep is how many earlier generations the publish keeps, each with
	// its metadata and checkpoint, for rollback and diff
	// (store.Generation.Keep). 0 (the default) drops the previous one.
	Keep int
	// MaxChange, if not nil, refuses to publish (a *ChangeLimitError,
	// ErrTooManyChanges) a rebuild that would add, remove or change more
	// than this percentage of the published table's keys. A first rebuild,
	// or one over an empty table, is never refused. nil: off.
	MaxChange *float64
	Log       zerolog.Logger
}

// Report is what a published rebuild did.
type Report struct {
	Meta       store.TableMeta
	Checkpoint checkpoint.Checkpoint
	Replay     replay.Result
}

// Rebuild replays opts.Replay.Topic into a new generation of opts.Table and
// publishes it with its checkpoint. On any error nothing is published and
// the previous generation stays what readers see.
func Rebuild(ctx context.Context, opts Options) (Report, error) {
	started := time.Now()
	if opts.Table == "" {
		opts.Table = opts.Replay.Topic
	}
	if opts.Fold == nil {
		opts.Fold = fold.NewLatest()
	}
	if opts.Memory <= 0 {
		opts.Memory = DefaultMemory
	}
	split := splitMemory(opts.Memory)
	if opts.WriteBudget <= 0 {
		opts.WriteBudget = split.buffer
	}
	if _, set := opts.Replay.Props[prefetchProp]; !set {
		props := make(map[string]string, len(opts.Replay.Props)+1)
		for k, v := range opts.Replay.Props {
			props[k] = v
		}
		props[prefetchProp] = strconv.Itoa(split.prefetchKiB)
		opts.Replay.Props = props
	}
	gen, err := opts.DB.Begin(opts.Table)
	if err != nil {
		return Report{}, fmt.Errorf("rebuild table %q: %w", opts.Table, err)
	}
	// Abort is a no-op after a successful Publish; otherwise it drops the
	// unpublished generation. A kill before it runs leaves the generation
	// to the next read-write open.
	defer func() {
		if aerr := gen.Abort(); aerr != nil {
			opts.Log.Warn().Err(aerr).Str("table", opts.Table).Uint64("generation", gen.ID()).
				Msg("could not drop the unpublished generation; the next open removes it")
		}
	}()
	log := opts.Log.With().Str("table", opts.Table).Uint64("generation", gen.ID()).Logger()

	w := newWriter(gen, opts.Fold, opts.WriteBudget, split.hold)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.start(rctx)
	res, rerr := replay.Run(rctx, opts.Replay, w.send)
	werr := w.close()
	switch {
	case rerr != nil && werr != nil && errors.Is(rerr, errWriterFailed):
		return Report{Replay: res}, werr
	case rerr != nil:
		return Report{Replay: res}, rerr
	case werr != nil:
		return Report{Replay: res}, werr
	}
	if err := w.finish(ctx); err != nil {
		return Report{Replay: res}, fmt.Errorf("table %q: %w", opts.Table, err)
	}

	stats := opts.Fold.Stats()
	empty, err := isEmpty(gen, opts.Fold)
	if err != nil {
		return Report{Replay: res}, fmt.Errorf("table %q: %w", opts.Table, err)
	}
	if empty && !opts.AllowEmpty {
		// Returning drops the unpublished generation (the deferred Abort):
		// readers keep the published table.
		if err := refuseEmpty(opts.DB, opts.Table, stats); err != nil {
			return Report{Replay: res}, err
		}
	}
	meta := store.TableMeta{
		Name:     opts.Table,
		Topic:    opts.Replay.Topic,
		Fold:     opts.Fold.Name(),
		Params:   opts.Fold.Params(),
		BuiltAt:  started,
		Duration: time.Since(started),
		Records:  stats.Records,
		Skipped:  stats.Skipped,
		Extra:    stats.Extra,

		SkippedByReason: stats.SkippedByReason,
		Empty:           empty,
		Until:           untilBound(opts.Replay.Until),
	}
	cp := checkpoint.Checkpoint{Topic: opts.Replay.Topic, EndMark: string(res.Plan.End)}
	for _, p := range res.Plan.Partitions {
		cp.Partitions = append(cp.Partitions, checkpoint.Partition{
			Partition: p.Partition, Low: p.Low, Start: p.Start, High: p.End, End: p.End,
		})
	}
	if err := ctx.Err(); err != nil {
		return Report{Replay: res}, fmt.Errorf("rebuild of table %q interrupted before publish: %w", opts.Table, err)
	}
	gen.Keep(opts.Keep)
	if opts.MaxChange != nil {
		limit := *opts.MaxChange
		gen.Guard(func(c store.Changes) error { return checkChanges(opts.Table, c, limit) })
	}
	err = gen.Publish(meta, func(tx *bolt.Tx) error { return checkpoint.Save(tx, opts.Table, cp) })
	if errors.Is(err, ErrTooManyChanges) {
		// Returning drops the unpublished generation (the deferred
		// Abort): readers keep the published table.
		return Report{Replay: res}, err
	}
	if err != nil {
		return Report{Replay: res}, fmt.Errorf("publish table %q: %w", opts.Table, err)
	}
	published, err := opts.DB.Table(opts.Table)
	if err != nil {
		return Report{Replay: res}, err
	}
	if bad := badSkipped(stats.SkippedByReason); len(bad) > 0 {
		log.Warn().Interface("skipped_by_reason", bad).Msg("bad records were skipped (--on-bad-record skip); the table leaves them out")
	}
	ev := log.Info().Str("topic", opts.Replay.Topic).Int64("records", stats.Records).Int64("skipped", stats.Skipped).
		Int64("keys", published.Keys).Int("runs", w.runs).Dur("took", time.Since(started))
	if c := published.Changes; c != nil {
		ev = ev.Int64("added", c.Added).Int64("removed", c.Removed).Int64("changed", c.Changed)
	}
	ev.Msg("published")
	return Report{Meta: published, Checkpoint: cp, Replay: res}, nil
}

// isEmpty reports whether no record contributed a row to the finished
// generation: the fold says so (fold.EmptyReporter), or there is no row.
func isEmpty(gen *store.Generation, f fold.Folder) (bool, error) {
	if e, ok := f.(fold.EmptyReporter); ok {
		return e.Empty(), nil
	}
	has, err := gen.HasRows()
	return !has, err
}

// refuseEmpty returns an *EmptyTableError when table is published and not
// empty; nil for a first rebuild or an empty table (nothing to wipe).
func refuseEmpty(db *store.DB, table string, stats fold.Stats) error {
	old, err := db.Table(table)
	if errors.Is(err, store.ErrTableNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("table %q: %w", table, err)
	}
	if old.Empty || old.Keys == 0 {
		return nil
	}
	return &EmptyTableError{Table: table, OldKeys: old.Keys, Records: stats.Records, Skipped: stats.Skipped}
}

// badSkipped returns the counts of bad records skipped, leaving out the
// reasons that are always skipped (null and empty keys).
func badSkipped(by map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range by {
		if k != fold.ReasonNullKey && k != fold.ReasonEmptyKey {
			out[k] = v
		}
	}
	return out
}

// checkChanges refuses changes above limit percent of the previous
// generation's keys; a first rebuild or one over an empty table passes.
func checkChanges(table string, c store.Changes, limit float64) error {
	if c.From == 0 || c.FromKeys <= 0 {
		return nil
	}
	// Exact: total/fromKeys > limit/100, without rounding.
	if float64(c.Total())*100 > limit*float64(c.FromKeys) {
		return &ChangeLimitError{Table: table, Changes: c, MaxPercent: limit}
	}
	return nil
}

// untilBound is the provenance of a replay's end bound, nil for none.
func untilBound(u replay.Until) *store.Bound {
	if u.IsZero() {
		return nil
	}
	b := &store.Bound{Timestamp: u.Timestamp.UTC()}
	if u.Timestamp.IsZero() {
		b.Timestamp = time.Time{}
	}
	if len(u.Offsets) > 0 {
		b.Offsets = make(map[int32]int64, len(u.Offsets))
		for p, o := range u.Offsets {
			b.Offsets[p] = o
		}
	}
	return b
}
