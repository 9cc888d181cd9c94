package materialize

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/exportdoc"
	"github.com/kmaterialize/kmaterialize/partition"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// ImportOptions describe one import of an export document.
type ImportOptions struct {
	DB *store.DB
	// In is the document; Source names it in errors (its path).
	In     io.Reader
	Source string
	// Table is the table to import into. Default: the document's table.
	Table string
	Log   zerolog.Logger
}

// Import loads a table from an export document (exportdoc.Write) into a new
// generation and publishes it like a rebuild, with the document's
// provenance offsets as the table's checkpoint, so that update (or a
// follower) continues from where the exported table ended instead of
// replaying the topic's history. The checkpoint's age is unknown: an update
// of a compacted topic refuses it (ErrStaleCheckpoint).
//
// The document is checked before anything is published (a
// *exportdoc.ImportError, exportdoc.ErrImport): its format version; a latest
// fold only (a count table's export carries no identity index, so its
// updates could not dedupe); the latest fold's parameters (none); its end
// mark and partitions; its row count against its totals; and, when the
// database already has the table, the same topic and fold as the table's
// stored definition. Rows must be in ascending key order, as export writes
// them. Nothing is published on any error.
func Import(ctx context.Context, o ImportOptions) (Report, error) {
	started := time.Now()
	rd, err := exportdoc.NewReader(o.In, o.Source)
	if err != nil {
		return Report{}, err
	}
	h := rd.Header
	bad := func(format string, args ...any) error {
		return &exportdoc.ImportError{Source: o.Source, Reason: fmt.Sprintf(format, args...)}
	}
	table := o.Table
	if table == "" {
		table = h.Table
	}
	switch {
	case h.Fold == FoldCount:
		return Report{}, bad("table %q is a count table: an export of a count table carries its counts but not its identity index (identity -> content), so updates after an import could neither dedupe nor detect conflicts; rebuild it from the topic instead", h.Table)
	case h.Fold != FoldLatest:
		return Report{}, bad("fold %q: only a latest table can be imported", h.Fold)
	case len(h.Params) > 0:
		return Report{}, bad("fold latest has no parameters, the document has %v", h.Params)
	case h.Topic == "":
		return Report{}, bad("the document names no topic")
	case table == "":
		return Report{}, bad("the document names no table (give --table)")
	case h.EndMark != checkpoint.EndHigh && h.EndMark != checkpoint.EndStable:
		return Report{}, bad("end mark %q: want high or stable", h.EndMark)
	}
	spec := Spec{Name: table, Topic: h.Topic, Fold: FoldLatest, End: replay.EndMark(h.EndMark),
		Partitions: h.PartitionSet, Partitioner: h.Partitioner}
	if err := spec.Validate(); err != nil {
		return Report{}, &exportdoc.ImportError{Source: o.Source, Reason: "the document's shard", Err: err}
	}
	if have, err := LoadSpec(o.DB, table); err == nil {
		if have.Topic != h.Topic || (have.Fold != "" && have.Fold != FoldLatest) {
			return Report{}, bad("table %q in %s is of topic %q, fold %q; the document is of topic %q, fold %q",
				table, o.DB.Path(), have.Topic, foldName(have.Fold), h.Topic, h.Fold)
		}
		if (have.Partitions == nil) != (spec.Partitions == nil) || !slices.Equal(have.Partitions, spec.Partitions) {
			return Report{}, bad("table %q in %s holds partitions %s of its topic; the document %s",
				table, o.DB.Path(), setText(have.Partitions), setText(spec.Partitions))
		}
		spec = have
	} else if !errors.Is(err, store.ErrTableNotFound) && !errors.Is(err, ErrNoSpec) {
		return Report{}, err
	}
	// A shard's document: its checkpoint's partitions are its set, and
	// the count it recorded goes on deciding whether the topic still fits
	// (Repartitioned).
	cp := checkpoint.Checkpoint{Topic: h.Topic, EndMark: h.EndMark, Partitions: h.Partitions,
		Subset: spec.Partitions != nil, PartitionsOfTopic: h.PartitionsOfTopic}
	if cp.Subset {
		for _, p := range cp.Partitions {
			if !slices.Contains(spec.Partitions, p.Partition) {
				return Report{}, bad("the document's positions name partition %d, outside its partition set %s", p.Partition, setText(spec.Partitions))
			}
		}
	}
	if err := checkpoint.Validate(table, cp); err != nil {
		return Report{}, &exportdoc.ImportError{Source: o.Source, Reason: "the document's partitions", Err: err}
	}
	wantKeys, ok := h.Totals["keys"]
	if !ok {
		return Report{}, bad("totals has no keys count")
	}

	gen, err := o.DB.Begin(table)
	if err != nil {
		return Report{}, fmt.Errorf("import table %q: %w", table, err)
	}
	defer func() {
		if aerr := gen.Abort(); aerr != nil {
			o.Log.Warn().Err(aerr).Str("table", table).Msg("could not drop the unpublished generation; the next open removes it")
		}
	}()
	if err := gen.WriteMerged(ctx, rd); err != nil {
		var ie *exportdoc.ImportError
		if errors.As(err, &ie) {
			return Report{}, ie
		}
		return Report{}, fmt.Errorf("import table %q: %w", table, err)
	}
	if rd.Rows() != wantKeys {
		return Report{}, bad("the document has %d rows, its totals say %d keys (a truncated or edited document)", rd.Rows(), wantKeys)
	}
	extra := maps.Clone(h.Totals)
	for _, k := range []string{"records_read", "records_skipped", "keys"} {
		delete(extra, k)
	}
	if len(extra) == 0 {
		extra = nil
	}
	meta := store.TableMeta{
		Name: table, Topic: h.Topic, Fold: FoldLatest, Params: map[string]string{},
		BuiltAt: started, Duration: time.Since(started),
		Records: h.Totals["records_read"], Skipped: h.Totals["records_skipped"], Extra: extra,
		Empty: wantKeys == 0,
	}
	if meta.Spec, err = encodeSpec(Options{Table: table, Spec: &spec}); err != nil {
		return Report{}, err
	}
	if err := ctx.Err(); err != nil {
		return Report{}, fmt.Errorf("import of table %q interrupted before publish: %w", table, err)
	}
	// The checkpoint's age is unknown (CapturedAt zero), and the imported
	// table counts as freshly rebuilt (Updates 0).
	if err := gen.Publish(meta, func(tx *bolt.Tx) error { return checkpoint.Save(tx, table, cp) }); err != nil {
		return Report{}, fmt.Errorf("publish table %q: %w", table, err)
	}
	published, err := o.DB.Table(table)
	if err != nil {
		return Report{}, err
	}
	o.Log.Info().Str("table", table).Str("topic", h.Topic).Int64("keys", published.Keys).Str("from", o.Source).Msg("imported")
	return Report{Meta: published, Checkpoint: cp}, nil
}

func foldName(f string) string {
	if f == "" {
		return FoldLatest
	}
	return f
}

// setText names a table's partition set in messages: "all" for nil.
func setText(ps []int32) string {
	if ps == nil {
		return "all"
	}
	return partition.FormatSet(ps)
}
