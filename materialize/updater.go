package materialize

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/cpushare"
	"github.com/kmaterialize/kmaterialize/store"
)

// updater folds an update's records: in memory while they may still fit
// one transaction on the published generation, and into a new generation
// (begun from the published one) once they cannot.
type updater struct {
	ctx    context.Context // the update's: it ends a copy begun from the sink
	db     *store.DB
	table  string
	base   uint64 // the published generation the update started from
	memory int64
	hold   int
	cpu    *cpushare.Share // paces the merge of a new generation (the sink's callers pace the folds)
	log    zerolog.Logger

	latest *fold.Latest // the latest fold: rows held in memory, spilled as runs
	count  *fold.Count  // the count fold: records buffered until they no longer fit

	buf      [][]fold.Record // count: the records not yet folded
	bufBytes int
	records  int64 // records handed to the sink

	gen  *store.Generation // the new generation, once the update does not fit
	runs int               // run files the latest fold spilled

	decoder *decode.Decoder // nil when the table decodes nothing
}

// stats is the fold's counters plus the records the decoder skipped as
// undecodable (withDecodeSkips).
func (u *updater) stats(s fold.Stats) fold.Stats {
	if u.decoder == nil {
		return s
	}
	return withDecodeSkips(s, u.decoder.Skipped())
}

// sink is the replay's Sink.
func (u *updater) sink(batch []fold.Record) error {
	u.records += int64(len(batch))
	if u.latest != nil {
		for len(batch) > 0 {
			n := min(len(batch), foldChunk)
			if err := u.latest.Fold(nil, batch[:n]); err != nil {
				return err
			}
			batch = batch[n:]
			if !u.latest.Full() {
				continue
			}
			if err := u.begin(u.ctx); err != nil {
				return err
			}
			if err := u.gen.SpillRun(u.latest.Sorted()); err != nil {
				return err
			}
			u.latest.Reset()
		}
		return nil
	}
	if u.gen != nil {
		return u.gen.Write(func(r store.Rows) error { return u.count.Fold(foldTable{r}, batch) })
	}
	u.buf = append(u.buf, batch)
	for i := range batch {
		u.bufBytes += len(batch[i].Key) + len(batch[i].Value) + 64
	}
	if u.bufBytes < u.hold {
		return nil
	}
	// Too many records to hold: fold them into a new generation that
	// starts as a copy of the published one's identity index.
	if err := u.begin(u.ctx); err != nil {
		return err
	}
	return u.flushBuf()
}

// flushBuf folds the buffered records into the new generation.
func (u *updater) flushBuf() error {
	buf := u.buf
	u.buf, u.bufBytes = nil, 0
	return u.gen.Write(func(r store.Rows) error {
		t := foldTable{r}
		for _, b := range buf {
			if err := u.count.Fold(t, b); err != nil {
				return err
			}
		}
		return nil
	})
}

// begin starts the new generation, once. For the count fold it copies the
// published generation's identity index into it.
func (u *updater) begin(ctx context.Context) error {
	if u.gen != nil {
		return nil
	}
	g, err := u.db.Begin(u.table)
	if err != nil {
		return fmt.Errorf("update table %q: %w", u.table, err)
	}
	u.gen = g
	g.Pace(u.cpu)
	u.log.Info().Uint64("generation", g.ID()).Msg("the update does not fit one transaction: merging it with the published rows into a new generation")
	if u.count != nil {
		if err := g.CopyIndexes(ctx, u.base); err != nil {
			return fmt.Errorf("update table %q: %w", u.table, err)
		}
	}
	return nil
}

// abort drops the new generation unless it was published.
func (u *updater) abort() {
	if u.gen == nil {
		return
	}
	if err := u.gen.Abort(); err != nil {
		u.log.Warn().Err(err).Uint64("generation", u.gen.ID()).Msg("could not drop the unpublished generation; the next open removes it")
	}
}

// txPageCost is what one touched page costs a write transaction: bbolt
// holds it as a node (its keys and values) and writes it out at the
// commit, once split; twice the page size, as an estimate.
const txPageCost = 2

// fitsInPlace reports whether rows changed rows (or, for the count fold,
// index entries) of held bytes fit one write transaction on the published
// generation: the bytes held, plus each touched page (at most the file's
// pages), within half the memory bound.
func (u *updater) fitsInPlace(rows int64, held int64) bool {
	page := int64(u.db.Bolt().Info().PageSize)
	pages := rows
	if fi, err := os.Stat(u.db.Path()); err == nil {
		pages = min(pages, fi.Size()/page)
	}
	return held+pages*page*txPageCost <= u.memory/2
}

// publish makes the update visible, in place or as a new generation, and
// returns which.
func (u *updater) publish(ctx context.Context, meta store.TableMeta, spec []byte, hook func(tx *bolt.Tx) error) (string, error) {
	if u.latest != nil {
		return u.publishLatest(ctx, meta, spec, hook)
	}
	return u.publishCount(ctx, meta, spec, hook)
}

func (u *updater) publishLatest(ctx context.Context, meta store.TableMeta, spec []byte, hook func(tx *bolt.Tx) error) (string, error) {
	rows := u.latest.Sorted()
	stats := u.stats(u.latest.Stats())
	if u.gen == nil && u.fitsInPlace(int64(rows.Len()), int64(u.hold)) {
		_, err := u.db.Apply(u.table, u.base, func(t store.Rows) error {
			for {
				k, v, ok, _ := rows.Next()
				if !ok {
					return nil
				}
				if v == nil {
					if err := t.Delete(k); err != nil {
						return fmt.Errorf("delete key %q: %w", k, err)
					}
					continue
				}
				if err := t.Put(k, v); err != nil {
					return fmt.Errorf("put key %q: %w", k, err)
				}
			}
		}, func(m *store.TableMeta) error {
			setStats(m, stats, spec)
			m.Empty = m.Keys == 0
			return nil
		}, hook)
		if err != nil {
			return "", u.applyError(err)
		}
		return ModeInPlace, nil
	}
	if err := u.begin(ctx); err != nil {
		return "", err
	}
	u.runs = u.gen.Runs()
	if err := u.gen.WriteMergedOver(ctx, u.base, rows); err != nil {
		return "", fmt.Errorf("update table %q: %w", u.table, err)
	}
	u.latest.Reset()
	has, err := u.gen.HasRows()
	if err != nil {
		return "", fmt.Errorf("update table %q: %w", u.table, err)
	}
	m := meta
	setStats(&m, stats, spec)
	m.Empty = !has
	if err := u.gen.Publish(m, hook); err != nil {
		return "", fmt.Errorf("publish table %q: %w", u.table, err)
	}
	return ModeMerged, nil
}

func (u *updater) publishCount(ctx context.Context, meta store.TableMeta, spec []byte, hook func(tx *bolt.Tx) error) (string, error) {
	if u.gen == nil && u.fitsInPlace(u.records, int64(u.bufBytes)) {
		_, err := u.db.Apply(u.table, u.base, func(r store.Rows) error {
			t := foldTable{r}
			for _, b := range u.buf {
				if err := u.count.Fold(t, b); err != nil {
					return err
				}
			}
			return u.count.Finish(t)
		}, func(m *store.TableMeta) error {
			setStats(m, u.stats(u.count.Stats()), spec)
			m.Empty = u.count.Empty()
			return nil
		}, hook)
		if err != nil {
			return "", u.applyError(err)
		}
		return ModeInPlace, nil
	}
	if err := u.begin(ctx); err != nil {
		return "", err
	}
	if len(u.buf) > 0 {
		if err := u.flushBuf(); err != nil {
			return "", err
		}
	}
	if err := u.gen.Write(func(r store.Rows) error { return u.count.Finish(foldTable{r}) }); err != nil {
		return "", fmt.Errorf("table %q: %w", u.table, err)
	}
	m := meta
	setStats(&m, u.stats(u.count.Stats()), spec)
	m.Empty = u.count.Empty()
	if err := u.gen.Publish(m, hook); err != nil {
		return "", fmt.Errorf("publish table %q: %w", u.table, err)
	}
	return ModeMerged, nil
}

// applyError returns an Apply error as is when it is the fold's (a
// conflict, a bad record), wrapped with the table otherwise.
func (u *updater) applyError(err error) error {
	if errors.Is(err, ErrCheckpointMoved) {
		return err
	}
	if errors.Is(err, store.ErrGenerationChanged) {
		return fmt.Errorf("%w: %w", ErrCheckpointMoved, err)
	}
	var de *fold.DataError
	var ce *fold.ConflictError
	if errors.As(err, &de) || errors.As(err, &ce) {
		return err
	}
	return fmt.Errorf("update table %q: %w", u.table, err)
}

// setStats records a resumed fold's (cumulative) counters and the
// definition in m.
func setStats(m *store.TableMeta, s fold.Stats, spec []byte) {
	m.Records, m.Skipped, m.SkippedByReason, m.Extra = s.Records, s.Skipped, s.SkippedByReason, s.Extra
	if spec != nil {
		m.Spec = spec
	}
}
