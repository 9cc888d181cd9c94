package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/internal/tableview"
	"github.com/kmaterialize/kmaterialize/partition"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

func tablesCommand() *cli.Command {
	return withCluster(&cli.Command{
		Name:      "tables",
		Usage:     "list the tables in a database with how and when they were built",
		UsageText: "kmaterialize tables --db FILE [--format text|json|jsonl]",
		Description: `Lists each table: topic, fold, generation, number of keys, when it was built,
how long it took, records read and skipped (by reason: null_key, empty_key,
key_too_large, undecodable, unknown_group), the partitions it covers (those
captured when its rebuild started; for a table over a subset of its topic's
partitions, --partitions or partitions:, the set and the topic's partition
count when it was captured; the producers' partitioner when it has one: see
docs/shards.md), and per partition the start
offset, the end mark (high watermark or LSO captured at start) and the end
position reached; after kmaterialize update, where the table's data starts
and ends, how many updates followed the last full rebuild and when the
checkpoint's end marks were captured (unknown for an imported table); for a
rebuild with --until-timestamp / --to-offsets, the bound; what the last
publish changed (keys added, removed and changed compared with the generation
it replaced); and the generations kept with --keep, newest first, each with
its provenance (see kmaterialize rollback and diff).

Examples:
  $ kmaterialize tables --db balances.db
  $ kmaterialize tables --db balances.db --format json`,
		Flags: []cli.Flag{
			configFlag(), dbFlag(true), lockTimeoutFlag(), socketFlag(),
			formatsFlag(formatText, formatText, formatJSON, formatJSONL),
		},
		Action: func(c *cli.Context) error {
			format, err := formatOf(c, formatText, formatJSON, formatJSONL)
			if err != nil {
				return err
			}
			if clusterFile(c) != "" {
				return tablesViaCluster(c, format)
			}
			if routed, err := viaDaemon(c, func(d *daemon) error { return tablesVia(c, d, format) }); routed {
				return err
			}
			db, err := openRead(c)
			if err != nil {
				return err
			}
			defer db.Close()
			ts, err := loadTables(db)
			if err != nil {
				return err
			}
			return renderTables(c, format, db.Path(), ts)
		},
	})
}

// renderTables prints ts, the published tables of the database at path,
// in format: read from the file or through the daemon, the same output.
func renderTables(c *cli.Context, format, path string, ts []api.Table) error {
	if format == formatJSONL {
		enc := json.NewEncoder(stdoutOf(c))
		for _, t := range ts {
			if err := enc.Encode(tableDocOf(t)); err != nil {
				return err
			}
		}
		return nil
	}
	if format == "json" {
		docs := make([]tableDoc, len(ts))
		for i, t := range ts {
			docs[i] = tableDocOf(t)
		}
		enc := json.NewEncoder(stdoutOf(c))
		enc.SetIndent("", "  ")
		return enc.Encode(docs)
	}
	return printTables(stdoutOf(c), path, ts)
}

// tableDoc is a table as `tables --format json` prints it: the stored
// metadata's fields in their order, then the checkpoint's.
type tableDoc struct {
	Name            string            `json:"name"`
	Topic           string            `json:"topic"`
	Fold            string            `json:"fold"`
	Params          map[string]string `json:"params,omitempty"`
	Generation      uint64            `json:"generation"`
	Keys            int64             `json:"keys"`
	BuiltAt         time.Time         `json:"built_at"`
	Duration        time.Duration     `json:"duration_ns"`
	Records         int64             `json:"records"`
	Skipped         int64             `json:"skipped"`
	SkippedByReason map[string]int64  `json:"skipped_by_reason,omitempty"`
	Empty           bool              `json:"empty,omitempty"`
	Extra           map[string]int64  `json:"extra,omitempty"`
	Until           *api.Bound        `json:"until,omitempty"`
	Changes         *api.Changes      `json:"changes,omitempty"`
	EndMark         string            `json:"end_mark"`
	// PartitionSet is the partitions the table covers ("0-2"): those
	// captured when its rebuild started, whatever was added since.
	PartitionSet string                 `json:"partition_set"`
	Partitions   []checkpoint.Partition `json:"partitions"`
	// Subset and PartitionsOfTopic are there for a table over some of
	// its topic's partitions (a shard: partitions:, --partitions), with
	// the topic's count its checkpoint recorded (0: unknown);
	// Partitioner for a table configured with one.
	Subset            bool   `json:"subset,omitempty"`
	PartitionsOfTopic int32  `json:"partitions_of_topic,omitempty"`
	Partitioner       string `json:"partitioner,omitempty"`
	// UpdatesSinceRebuild and CheckpointCapturedAt are the checkpoint's
	// provenance (zero time: unknown, an imported table).
	UpdatesSinceRebuild  int64     `json:"updates_since_rebuild"`
	CheckpointCapturedAt time.Time `json:"checkpoint_captured_at"`
	// Kept are the table's kept generations (--keep), newest first, each
	// with the metadata and checkpoint it was published with.
	Kept []tableDoc `json:"kept,omitempty"`
}

// tableDocOf is t as `tables --format json` prints it.
func tableDocOf(t api.Table) tableDoc {
	d := tableDoc{Name: t.Name, Topic: t.Topic, Fold: t.Fold, Params: t.Params, Generation: t.Generation, Keys: t.Keys,
		BuiltAt: t.BuiltAt, Duration: t.Duration, Records: t.Records, Skipped: t.Skipped, SkippedByReason: t.SkippedByReason,
		Empty: t.Empty, Extra: t.Extra, Until: t.Until, Changes: t.Changes, EndMark: t.EndMark,
		PartitionSet: partitionSet(t.Partitions), Partitions: checkpointPartitions(t.Partitions),
		UpdatesSinceRebuild: t.UpdatesSinceRebuild, CheckpointCapturedAt: t.CheckpointCapturedAt}
	if sh := t.Shard; sh != nil {
		d.Partitioner = sh.Partitioner
		if sh.Subset {
			d.Subset, d.PartitionsOfTopic, d.PartitionSet = true, sh.PartitionsOfTopic, partition.FormatSet(sh.PartitionSet)
		}
	}
	for _, k := range t.Kept {
		d.Kept = append(d.Kept, tableDoc{Name: t.Name, Topic: k.Topic, Fold: k.Fold, Params: k.Params,
			Generation: k.Generation, Keys: k.Keys, BuiltAt: k.BuiltAt, Duration: k.Duration, Records: k.Records,
			Skipped: k.Skipped, SkippedByReason: k.SkippedByReason, Empty: k.Empty, Extra: k.Extra, Until: k.Until,
			Changes: k.Changes, EndMark: k.EndMark, PartitionSet: partitionSet(k.Partitions),
			Partitions: checkpointPartitions(k.Partitions), UpdatesSinceRebuild: k.UpdatesSinceRebuild,
			CheckpointCapturedAt: k.CheckpointCapturedAt})
	}
	return d
}

// partitionSet is the partitions ps covers, as "0-2".
func partitionSet(ps []api.Partition) string {
	ns := make([]int32, len(ps))
	for i, p := range ps {
		ns[i] = p.Partition
	}
	return replay.PartitionSet(ns)
}

// checkpointPartitions are ps without live marks (null when none, as the
// file's checkpoint-less table has).
func checkpointPartitions(ps []api.Partition) []checkpoint.Partition {
	var out []checkpoint.Partition
	for _, p := range ps {
		out = append(out, checkpoint.Partition{Partition: p.Partition, Low: p.Low, Start: p.Start, High: p.High, End: p.End})
	}
	return out
}

// loadTables reads every published table of db, in one transaction.
func loadTables(db *store.DB) ([]api.Table, error) {
	metas, err := db.Tables()
	if err != nil {
		return nil, err
	}
	out := make([]api.Table, 0, len(metas))
	err = db.View(func(tx *bolt.Tx) error {
		for _, m := range metas {
			t, err := tableview.FromTx(tx, m)
			if err != nil {
				return err
			}
			if t.Shard == nil {
				if t.Shard, err = storedShard(tx, m); err != nil {
					return err
				}
			}
			out = append(out, t)
		}
		return nil
	})
	return out, err
}

// tablesVia is tables through the daemon: the published tables (a
// configured table never published is not in the file), from their stored
// metadata as the API shows it.
func tablesVia(c *cli.Context, d *daemon, format string) error {
	ts, err := d.cl.Tables(c.Context)
	if err != nil {
		return d.fail(err, "")
	}
	published := make([]api.Table, 0, len(ts))
	for _, t := range ts {
		if t.Generation != 0 {
			published = append(published, t)
		}
	}
	return renderTables(c, format, c.String("db"), published)
}

func printTables(w io.Writer, path string, ts []api.Table) error {
	if len(ts) == 0 {
		_, err := fmt.Fprintf(w, "no tables in %s\n", path)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, t := range ts {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		fmt.Fprintf(tw, "table %s\n", t.Name)
		fmt.Fprintf(tw, "  topic:\t%s\n", t.Topic)
		fmt.Fprintf(tw, "  fold:\t%s%s\n", t.Fold, params(t.Params))
		fmt.Fprintf(tw, "  generation:\t%d\n", t.Generation)
		fmt.Fprintf(tw, "  keys:\t%d\n", t.Keys)
		fmt.Fprintf(tw, "  built:\t%s (took %s)\n", t.BuiltAt.Local().Format(time.RFC3339), t.Duration.Round(time.Millisecond))
		fmt.Fprintf(tw, "  records read:\t%d\n", t.Records)
		fmt.Fprintf(tw, "  records skipped:\t%d%s\n", t.Skipped, byReason(t.SkippedByReason))
		keys := make([]string, 0, len(t.Extra))
		for k := range t.Extra {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(tw, "  %s:\t%d\n", strings.ReplaceAll(k, "_", " "), t.Extra[k])
		}
		if c := changesText(t.Changes); c != "" {
			fmt.Fprintf(tw, "  changes:\t%s\n", c)
		}
		fmt.Fprintf(tw, "  partitions:\t%s (%d)\n", partitionSet(t.Partitions), len(t.Partitions))
		if s := shardText(t.Shard); s != "" {
			fmt.Fprintf(tw, "  partition set:\t%s\n", s)
		}
		if t.Shard != nil && t.Shard.Partitioner != "" {
			fmt.Fprintf(tw, "  partitioner:\t%s\n", t.Shard.Partitioner)
		}
		fmt.Fprintf(tw, "  end mark:\t%s%s\n", t.EndMark, untilText(t.Until))
		captured := "unknown (imported)"
		if !t.CheckpointCapturedAt.IsZero() {
			captured = t.CheckpointCapturedAt.Local().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "  updates since rebuild:\t%d (end marks captured %s)\n", t.UpdatesSinceRebuild, captured)
		fmt.Fprintf(tw, "  partition\tlow\tstart\tend mark\treached\n")
		for _, p := range t.Partitions {
			fmt.Fprintf(tw, "  %d\t%d\t%d\t%d\t%d\n", p.Partition, p.Low, p.Start, p.High, p.End)
		}
		for _, k := range t.Kept {
			fmt.Fprintf(tw, "  kept generation %d:\t%d keys, built %s, %d records read, end mark %s%s (%s)%s\n",
				k.Generation, k.Keys, k.BuiltAt.Local().Format(time.RFC3339), k.Records, k.EndMark, untilText(k.Until),
				endsText(k.Partitions), prefixed("; changes: ", changesText(k.Changes)))
		}
	}
	return tw.Flush()
}

// changesText says what a publish changed, e.g. "12 added, 3 removed, 40
// changed (of 1000 keys in generation 6)"; "" when not recorded.
func changesText(c *api.Changes) string {
	if c == nil {
		return ""
	}
	if c.From == 0 {
		return fmt.Sprintf("%d added (first generation)", c.Added)
	}
	return fmt.Sprintf("%d added, %d removed, %d changed (of %d keys in generation %d)", c.Added, c.Removed, c.Changed, c.FromKeys, c.From)
}

// untilText says the end bound of an as-of rebuild, "" without one.
func untilText(b *api.Bound) string {
	switch {
	case b == nil:
		return ""
	case !b.Timestamp.IsZero():
		return ", until timestamp " + b.Timestamp.UTC().Format(time.RFC3339Nano)
	default:
		ps := make([]int32, 0, len(b.Offsets))
		for p := range b.Offsets {
			ps = append(ps, p)
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		parts := make([]string, len(ps))
		for i, p := range ps {
			parts[i] = fmt.Sprintf("%d=%d", p, b.Offsets[p])
		}
		return ", to offsets " + strings.Join(parts, ",")
	}
}

// endsText lists each partition's end as "P:END".
func endsText(ps []api.Partition) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%d:%d", p.Partition, p.End)
	}
	return "ends " + strings.Join(parts, " ")
}

func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// byReason formats skipped counts as " (key_too_large=1, null_key=3)", in
// reason order; "" when there are none.
func byReason(m map[string]int64) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func params(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
