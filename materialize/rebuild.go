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
	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/cpushare"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// DefaultMemory is a rebuild's memory bound when Options.Memory is 0
// (--memory's default).
const DefaultMemory = 256 << 20

// memorySplit is how a rebuild divides its memory bound between the parts
// that hold records. The Go parts get less than half of what they may use
// at most, because the garbage collector (GOGC=100) lets the heap grow to
// about twice its live data, and the records the folds drop (an older
// value of a key, a duplicate event) are garbage until the next cycle:
//
//   - the client's prefetch queue, M/8: librdkafka's
//     queued.max.messages.kbytes (C memory, no collector), which bounds the
//     messages fetched but not yet polled across the partitions of the
//     consumer's queue, unless -X sets it;
//   - the replay's batch being filled and the batches sent to the writer
//     but not yet collected, M/16 together: the batch ends at M/64 bytes of
//     keys and values (replay.Config.BatchBytes, or at its record limit),
//     and the writer's queue admits M/16 - M/64 of batches (their arrays
//     included) before the replay waits;
//   - the writer's two record buffers (one filling while the other folds),
//     M/16 each;
//   - the fold's held rows (the latest fold's last record per key, the
//     count fold's identities), M/4, spilled as a sorted run when full.
//     The merge at the end reads each run through a buffer of at most
//     256 KiB (16 MiB in all) and writes blocks of at most 8 MiB (two in
//     flight),
//     and by then the replay has released its buffers and queue.
//
// Live: 7M/16 of Go memory (about 7M/8 with garbage) plus M/8 of C, within
// M.
//
// With N readers (replay.Config.Readers) the prefetch queue and the batch
// bytes are divided among them (the replay does it), but each reader beyond
// the first is a consumer of its own, with its own broker threads, their
// receive buffers and its batch arenas in flight: the fold's held rows give
// up M/32 for each (at most down to M/8), measured as the difference in
// peak RssAnon between one and two readers at 5M distinct keys
// (bench/RESULTS.md).
type memorySplit struct {
	prefetchKiB int // queued.max.messages.kbytes
	batchBytes  int // replay.Config.BatchBytes
	queue       int // bytes of batches queued for the writer
	buffer      int // bytes of records per writer buffer
	hold        int // bytes of rows the fold holds before spilling
}

func splitMemory(m int64, readers int) memorySplit {
	hold := max(m/4-int64(max(readers-1, 0))*(m/32), m/8)
	return memorySplit{
		prefetchKiB: int(max(m/8/1024, 1)),
		batchBytes:  int(max(m/64, 1)),
		queue:       int(max(m/16-m/64, 1)),
		buffer:      int(max(m/16, 1)),
		hold:        int(max(hold, 1)),
	}
}

// DefaultReaders is how many consumers a rebuild or an update reads the
// topic's partitions with when the table's definition does not say
// (Spec.Readers 0): two read faster than one even on two cores, since
// librdkafka parses each consumer's fetch responses on that consumer's own
// broker thread (bench/RESULTS.md, "Parallel readers").
const DefaultReaders = 2

// readers is r, or DefaultReaders when r is not positive.
func readers(r int) int {
	if r > 0 {
		return r
	}
	return DefaultReaders
}

// prefetchProp is the librdkafka property splitMemory sizes.
const prefetchProp = replay.PrefetchProperty

// Options describe one rebuild.
type Options struct {
	DB     *store.DB
	Table  string // default: the topic name
	Replay replay.Config
	Fold   fold.Folder // default: fold.NewLatest()
	// Memory bounds the memory the rebuild's records and rows take: the
	// client's prefetch queue, the replay's batch, the writer's queue and
	// buffers, the fold's held rows (see memorySplit). Default
	// DefaultMemory.
	Memory int64
	// WriteBudget overrides the bytes of records the writer buffers per
	// hand-off to the fold (default: from Memory).
	WriteBudget int
	// Decode says how keys and values are decoded before the fold (package
	// decode); the zero value decodes nothing (raw bytes). An undecodable
	// record is a bad record (a *fold.DataError, or skipped and counted
	// with Decode.OnBadRecord); a Schema Registry that cannot be reached
	// fails the rebuild (decode.ErrUnavailable).
	Decode decode.Config
	// AllowEmpty publishes a rebuild in which no record contributed a row
	// over a table that has such rows. By default that rebuild is refused
	// with an *EmptyTableError (ErrWouldEmpty): a start past the last
	// record (--from-timestamp in the future, offsets at the end) would
	// otherwise wipe a full table and succeed. A first rebuild, or one over
	// an empty table, is never refused.
	AllowEmpty bool
	// Spec is the table's definition, stored with the table at publish so
	// that update, import and the daemon need only its name (LoadSpec).
	// Spec.Options sets it. Nil: a latest fold stores a definition made of
	// the topic and end mark; another fold stores none, and an update of
	// the table asks for a rebuild from a definition first.
	Spec *Spec
	// CatchUp, if set, is called once the replay reached its end marks and
	// before the fold finishes: a followed table's rebuild stops the
	// follower there and returns the positions it applied. Each partition
	// whose position is beyond the rebuild's end (or that the rebuild did
	// not capture) is then read on into the same generation up to that
	// position, and the checkpoint ends there, so that the new generation
	// is never behind the one it replaces. See catchUp.
	CatchUp func(ctx context.Context) (map[int32]int64, error)
	// Keep is how many earlier generations the publish keeps, each with
	// its metadata and checkpoint, for rollback and diff
	// (store.Generation.Keep). 0 (the default) drops the previous one.
	Keep int
	// MaxChange, if not nil, refuses to publish (a *ChangeLimitError,
	// ErrTooManyChanges) a rebuild that would add, remove or change more
	// than this percentage of the published table's keys. A first rebuild,
	// or one over an empty table, is never refused. nil: off.
	MaxChange *float64
	// CPU, if set, is the share of the process's cores the rebuild's
	// CPU-bound work takes turns on (package cpushare): the writer's
	// folds and spills, the decoding, the merge's blocks, each a unit in a
	// slot, with a yield between units. The daemon sets it so that a
	// rebuild never holds every P and its reads go first; nil (the CLI's
	// rebuild, the default) is unlimited. The replay's read loop itself
	// (mostly C) yields at each hand-off, and runs with the client's
	// threads at a lower CPU priority (cpushare.Share.Run).
	CPU *cpushare.Share
	Log zerolog.Logger
}

// Report is what a published rebuild did.
type Report struct {
	Meta       store.TableMeta
	Checkpoint checkpoint.Checkpoint
	Replay     replay.Result
	// Mode is how an update changed the table (ModeInPlace, ModeMerged,
	// ModeRebuilt); "" for a rebuild.
	Mode string
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
	opts.Replay.Readers = readers(opts.Replay.Readers)
	split := splitMemory(opts.Memory, opts.Replay.Readers)
	if opts.WriteBudget <= 0 {
		opts.WriteBudget = split.buffer
	}
	if opts.Replay.BatchBytes <= 0 {
		opts.Replay.BatchBytes = split.batchBytes
	}
	if _, set := opts.Replay.Props[prefetchProp]; !set {
		props := make(map[string]string, len(opts.Replay.Props)+1)
		for k, v := range opts.Replay.Props {
			props[k] = v
		}
		props[prefetchProp] = strconv.Itoa(split.prefetchKiB)
		opts.Replay.Props = props
	}
	if opts.Decode.Topic == "" {
		opts.Decode.Topic = opts.Replay.Topic
	}
	var dec *decode.Decoder
	if opts.Decode.Active() {
		var err error
		if dec, err = decode.New(opts.Decode); err != nil {
			return Report{}, fmt.Errorf("table %q: %w", opts.Table, err)
		}
		defer dec.Close()
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

	w := newWriter(gen, opts.Fold, opts.WriteBudget, split.queue, split.hold)
	w.share = opts.CPU
	gen.Pace(opts.CPU)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.start(rctx)
	sink := func(batch []fold.Record) error {
		err := w.send(batch)
		opts.CPU.Yield() // a waiting read before the next poll
		return err
	}
	if dec != nil {
		// Decoding runs on the replay's goroutine, before the writer: the
		// fold sees canonical JSON. It is CPU-bound work: a unit in a
		// slot.
		sink = func(batch []fold.Record) error {
			var out []fold.Record
			err := opts.CPU.Do(rctx, func() (err error) {
				out, err = dec.Decode(batch)
				return err
			})
			if err != nil || len(out) == 0 {
				return err
			}
			return w.send(out)
		}
	}
	// The read, at a lower CPU priority in the daemon (cpushare's Run):
	// the client's threads and the read loop give way to the reads.
	var res replay.Result
	var rerr error
	if opts.CPU != nil {
		opts.Replay.CPU = opts.CPU
	}
	// Every reader at the priority of the one on this goroutine (below).
	opts.Replay.Lower = opts.CPU.Run
	if opts.Replay.Partitions != nil {
		if opts.Replay.Check, err = rebuildCheck(opts.DB, opts.Table, opts.Replay.Check); err != nil {
			return Report{}, fmt.Errorf("rebuild table %q: %w", opts.Table, err)
		}
	}
	// The replay's clients close while the merge and the publish run (a
	// close waits for the fetch in flight); the rebuild returns after.
	opts.Replay.CloseBehind = true
	var closing replay.Result
	defer func() { closing.WaitClosed() }()
	opts.CPU.Run(func() {
		res, rerr = replay.Run(rctx, opts.Replay, sink)
		closing = res
		if rerr == nil && opts.CatchUp != nil {
			res, rerr = catchUp(rctx, opts, res, sink)
		}
	})
	werr := w.close()
	switch {
	case rerr != nil && werr != nil && errors.Is(rerr, errWriterFailed):
		return Report{Replay: res}, werr
	case rerr != nil:
		return Report{Replay: res}, rerr
	case werr != nil:
		return Report{Replay: res}, werr
	}
	replayed(ctx) // the rest (merge, publish) reads nothing
	if err := w.finish(ctx); err != nil {
		return Report{Replay: res}, fmt.Errorf("table %q: %w", opts.Table, err)
	}

	stats := opts.Fold.Stats()
	if dec != nil {
		stats = withDecodeSkips(stats, dec.Skipped())
	}
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
		Params:   withFormats(opts.Fold.Params(), opts.Decode),
		BuiltAt:  started,
		Duration: time.Since(started),
		Records:  stats.Records,
		Skipped:  stats.Skipped,
		Extra:    stats.Extra,

		SkippedByReason: stats.SkippedByReason,
		Empty:           empty,
		Until:           untilBound(opts.Replay.Until),
	}
	if meta.Spec, err = encodeSpec(opts); err != nil {
		return Report{Replay: res}, err
	}
	cp := checkpoint.Checkpoint{Topic: opts.Replay.Topic, EndMark: string(res.Plan.End), CapturedAt: res.Plan.CapturedAt, TopicID: res.Plan.TopicID,
		PartitionsOfTopic: res.Plan.PartitionsOfTopic, Subset: opts.Replay.Partitions != nil}
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
		Int64("keys", published.Keys).Int("runs", w.runs).Int64("took_ms", time.Since(started).Milliseconds())
	if c := published.Changes; c != nil {
		ev = ev.Int64("added", c.Added).Int64("removed", c.Removed).Int64("changed", c.Changed)
	}
	ev.Msg("published")
	return Report{Meta: published, Checkpoint: cp, Replay: res}, nil
}

// withFormats adds the key and value formats other than raw to a fold's
// parameters, so that tables and export say how rows were decoded.
func withFormats(params map[string]string, c decode.Config) map[string]string {
	if !c.Active() {
		return params
	}
	out := make(map[string]string, len(params)+2)
	for k, v := range params {
		out[k] = v
	}
	if c.Value != "" && c.Value != decode.Raw {
		out["value_format"] = string(c.Value)
	}
	if c.Key != "" && c.Key != decode.Raw {
		out["key_format"] = string(c.Key)
	}
	return out
}

// withDecodeSkips adds the records the decoder left out (undecodable,
// with --on-bad-record skip) to the fold's counts: they were read, and
// skipped as bad records.
func withDecodeSkips(s fold.Stats, n int64) fold.Stats {
	if n == 0 {
		return s
	}
	by := make(map[string]int64, len(s.SkippedByReason)+1)
	for k, v := range s.SkippedByReason {
		by[k] = v
	}
	by[fold.ReasonUndecodable] += n
	s.SkippedByReason = by
	s.Records += n
	s.Skipped += n
	return s
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
