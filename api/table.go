package api

import (
	"encoding/json"
	"time"
)

// Table is a table as GET /v1/tables/{table} shows it. The fields of the
// published generation (Generation to Extra, EndMark, Partitions) are zero
// while the table has none (State StateEmpty or StateBuilding), and null
// on the wire.
type Table struct {
	Name   string
	Topic  string
	Fold   string
	Params map[string]string
	// State is one of the State* constants.
	State string
	// Retry is the planned retry of a failed first build; nil when none is
	// planned.
	Retry *Retry
	// Definition says whether the configured definition differs from the
	// one the published generation was built by; nil when there is nothing
	// to compare (not configured with one, not published, or stored
	// without one).
	Definition *Definition
	// Configured is true for a table in the daemon's config (which it
	// rebuilds); false for one the file holds that it only serves.
	Configured bool
	// Schedule is "" when the table is not scheduled.
	Schedule string

	// Generation is the published generation; 0 when there is none.
	Generation      uint64
	Keys            int64
	BuiltAt         time.Time
	Duration        time.Duration // took_ms on the wire is its milliseconds
	Records         int64
	Skipped         int64
	SkippedByReason map[string]int64
	Empty           bool
	Extra           map[string]int64
	// EndMark is "high" or "stable": what Partition.High is.
	EndMark    string
	Partitions []Partition
	// UpdatesSinceRebuild is how many incremental updates followed the
	// last full rebuild; CheckpointCapturedAt is when the checkpoint's
	// end marks were captured (zero: unknown, an imported table).
	UpdatesSinceRebuild  int64
	CheckpointCapturedAt time.Time
	// Until is the end bound of an as-of rebuild; nil when it read to the
	// end mark.
	Until *Bound
	// Changes is what the last publish changed; nil when not recorded.
	Changes *Changes
	// Kept are the generations kept for rollback and diff, newest first.
	Kept []KeptGeneration

	// LastError is the last run's failure (or why following stopped), nil
	// when it succeeded.
	LastError *LastError
	// NextRun is the next scheduled run, zero when unscheduled.
	NextRun time.Time
	// Run is the run queued or going, nil when none.
	Run *Run
	// SkippedRuns counts scheduled runs skipped because one was going.
	SkippedRuns int64
	// Follow is a followed table's follower; nil when not followed.
	Follow *Follow

	// Shard says which of its topic's partitions the table holds and how
	// a key's partition is found (docs/shards.md); a client that routes
	// keys reads it. Never nil on an answer of the daemon.
	Shard *Shard
}

// Shard is how a table covers its topic's partitions.
type Shard struct {
	// Subset is true for a table configured over some of its topic's
	// partitions (`partitions:`), a shard; false for one over them all.
	Subset bool `json:"subset"`
	// PartitionSet are the partitions the table holds, sorted: the
	// configured subset, or for a table over all partitions those of its
	// checkpoint (empty before its first publish).
	PartitionSet []int32 `json:"partition_set"`
	// PartitionsOfTopic is the topic's partition count when the table's
	// positions were captured, as recorded in its checkpoint (0: unknown,
	// not yet built or built before it was recorded).
	PartitionsOfTopic int32 `json:"partitions_of_topic"`
	// Partitioner is the producers' partitioner the table is configured
	// with (package partition's names), "" when none: then the daemon
	// cannot tell which partition a key is in, and a subset table
	// answers a key it lacks 404 with HeaderPartial.
	Partitioner string `json:"partitioner,omitempty"`
	// Repartitioned is true once the daemon saw the topic with another
	// partition count than PartitionsOfTopic while the table is a subset:
	// its keys may be in other partitions than their hash says, so key
	// reads answer 409 CodeRepartitioned until it is dropped and rebuilt
	// (docs/shards.md). LiveCount is the count it saw.
	Repartitioned bool  `json:"repartitioned,omitempty"`
	LiveCount     int32 `json:"live_partitions_of_topic,omitempty"`
}

// KeyPartition answers GET /v1/tables/{table}/partition?key=K: the
// partition the table's partitioner puts the key in, and whether this
// daemon's table holds it.
type KeyPartition struct {
	Table             string `json:"table"`
	Partitioner       string `json:"partitioner"`
	PartitionsOfTopic int32  `json:"partitions_of_topic"`
	Partition         int32  `json:"partition"`
	Held              bool   `json:"held"`
}

// tableWire is Table as the daemon sends it, field for field in its order.
type tableWire struct {
	Name                 string            `json:"name"`
	Topic                string            `json:"topic"`
	Fold                 string            `json:"fold"`
	Params               map[string]string `json:"params,omitempty"`
	State                string            `json:"state"`
	Retry                *Retry            `json:"retry,omitempty"`
	Definition           *Definition       `json:"definition,omitempty"`
	Configured           bool              `json:"configured"`
	Schedule             *string           `json:"schedule"`
	Generation           *uint64           `json:"generation"`
	Keys                 *int64            `json:"keys"`
	BuiltAt              *string           `json:"built_at"`
	TookMS               *int64            `json:"took_ms"`
	Records              *int64            `json:"records"`
	Skipped              *int64            `json:"skipped"`
	EndMark              string            `json:"end_mark,omitempty"`
	Partitions           []Partition       `json:"partitions"`
	UpdatesSinceRebuild  int64             `json:"updates_since_rebuild"`
	CheckpointCapturedAt *string           `json:"checkpoint_captured_at"`
	LastError            *LastError        `json:"last_error"`
	NextRun              *string           `json:"next_run"`
	Run                  *Run              `json:"run"`
	SkippedRuns          int64             `json:"skipped_runs"`
	DurationNS           *int64            `json:"duration_ns"`
	SkippedByReason      map[string]int64  `json:"skipped_by_reason,omitempty"`
	Empty                bool              `json:"empty,omitempty"`
	Extra                map[string]int64  `json:"extra,omitempty"`
	Follow               *Follow           `json:"follow,omitempty"`
	Until                *Bound            `json:"until,omitempty"`
	Changes              *Changes          `json:"changes,omitempty"`
	Kept                 []KeptGeneration  `json:"kept,omitempty"`
	Shard                *Shard            `json:"shard,omitempty"`
}

// MarshalJSON writes t as the daemon sends it: the published generation's
// fields null while Generation is 0, times in UTC.
func (t Table) MarshalJSON() ([]byte, error) {
	w := tableWire{Name: t.Name, Topic: t.Topic, Fold: t.Fold, Params: t.Params, State: t.State, Retry: t.Retry,
		Definition: t.Definition, Configured: t.Configured, EndMark: t.EndMark, Partitions: t.Partitions,
		UpdatesSinceRebuild: t.UpdatesSinceRebuild, CheckpointCapturedAt: nanoTime(t.CheckpointCapturedAt),
		LastError: t.LastError, NextRun: secondTime(t.NextRun), Run: t.Run, SkippedRuns: t.SkippedRuns,
		SkippedByReason: t.SkippedByReason, Empty: t.Empty, Extra: t.Extra, Follow: t.Follow,
		Until: t.Until, Changes: t.Changes, Kept: t.Kept, Shard: t.Shard}
	if t.Schedule != "" {
		w.Schedule = &t.Schedule
	}
	if t.Generation != 0 {
		took, dur := t.Duration.Milliseconds(), int64(t.Duration)
		w.Generation, w.Keys, w.BuiltAt, w.TookMS = &t.Generation, &t.Keys, nanoTime(t.BuiltAt), &took
		w.Records, w.Skipped, w.DurationNS = &t.Records, &t.Skipped, &dur
	}
	if w.Partitions == nil {
		w.Partitions = []Partition{}
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads t as the daemon sends it.
func (t *Table) UnmarshalJSON(b []byte) error {
	var w tableWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*t = Table{Name: w.Name, Topic: w.Topic, Fold: w.Fold, Params: w.Params, State: w.State, Retry: w.Retry,
		Definition: w.Definition, Configured: w.Configured, Schedule: deref(w.Schedule), Generation: deref(w.Generation),
		Keys: deref(w.Keys), Duration: time.Duration(deref(w.DurationNS)), Records: deref(w.Records),
		Skipped: deref(w.Skipped), SkippedByReason: w.SkippedByReason, Empty: w.Empty, Extra: w.Extra,
		EndMark: w.EndMark, Partitions: w.Partitions, UpdatesSinceRebuild: w.UpdatesSinceRebuild,
		Until: w.Until, Changes: w.Changes, Kept: w.Kept, LastError: w.LastError, Run: w.Run,
		SkippedRuns: w.SkippedRuns, Follow: w.Follow, Shard: w.Shard}
	var err error
	if t.BuiltAt, err = parseTime("built_at", w.BuiltAt); err != nil {
		return err
	}
	if t.CheckpointCapturedAt, err = parseTime("checkpoint_captured_at", w.CheckpointCapturedAt); err != nil {
		return err
	}
	t.NextRun, err = parseTime("next_run", w.NextRun)
	return err
}

// Partition is one partition of a table's checkpoint, as `kmaterialize
// export` shows it, with the live marks of a followed table.
type Partition struct {
	Partition int32 `json:"partition"`
	// Low is the retained low offset captured at the start.
	Low int64 `json:"low"`
	// Start is the first offset the rebuild read from.
	Start int64 `json:"start"`
	// High is the end mark captured at the start.
	High int64 `json:"high"`
	// End is the position reached; == High when complete.
	End int64 `json:"end"`
	// LiveHigh is a followed table's partition's high watermark as its
	// follower last read it (never below End), and Lag what it lacks of
	// it; nil before the follower read it, and on a table not followed.
	LiveHigh *int64 `json:"live_high,omitempty"`
	Lag      *int64 `json:"lag,omitempty"`
}

// Bound is the end bound of an as-of rebuild: a timestamp, or end offsets by
// partition.
type Bound struct {
	Timestamp time.Time       `json:"timestamp,omitzero"`
	Offsets   map[int32]int64 `json:"offsets,omitempty"`
}

// Changes is what a publish changed compared with the generation it
// replaced (From; 0 for a table's first).
type Changes struct {
	From     uint64 `json:"from"`
	FromKeys int64  `json:"from_keys"`
	Added    int64  `json:"added"`
	Removed  int64  `json:"removed"`
	Changed  int64  `json:"changed"`
}

// KeptGeneration is a kept generation of a table, with the metadata and
// checkpoint it was published with.
type KeptGeneration struct {
	Generation      uint64
	Topic           string
	Fold            string
	Params          map[string]string
	Keys            int64
	BuiltAt         time.Time
	Duration        time.Duration
	Records         int64
	Skipped         int64
	SkippedByReason map[string]int64
	Empty           bool
	Extra           map[string]int64
	Until           *Bound
	Changes         *Changes
	EndMark         string
	Partitions      []Partition
	// As Table's, for this generation's checkpoint.
	UpdatesSinceRebuild  int64
	CheckpointCapturedAt time.Time
}

type keptWire struct {
	Generation           uint64            `json:"generation"`
	Topic                string            `json:"topic"`
	Fold                 string            `json:"fold"`
	Params               map[string]string `json:"params,omitempty"`
	Keys                 int64             `json:"keys"`
	BuiltAt              string            `json:"built_at"`
	DurationNS           int64             `json:"duration_ns"`
	Records              int64             `json:"records"`
	Skipped              int64             `json:"skipped"`
	SkippedByReason      map[string]int64  `json:"skipped_by_reason,omitempty"`
	Empty                bool              `json:"empty,omitempty"`
	Extra                map[string]int64  `json:"extra,omitempty"`
	Until                *Bound            `json:"until,omitempty"`
	Changes              *Changes          `json:"changes,omitempty"`
	EndMark              string            `json:"end_mark,omitempty"`
	Partitions           []Partition       `json:"partitions"`
	UpdatesSinceRebuild  int64             `json:"updates_since_rebuild"`
	CheckpointCapturedAt *string           `json:"checkpoint_captured_at"`
}

// MarshalJSON writes k as the daemon sends it.
func (k KeptGeneration) MarshalJSON() ([]byte, error) {
	w := keptWire{Generation: k.Generation, Topic: k.Topic, Fold: k.Fold, Params: k.Params, Keys: k.Keys,
		BuiltAt: k.BuiltAt.UTC().Format(time.RFC3339Nano), DurationNS: int64(k.Duration), Records: k.Records,
		Skipped: k.Skipped, SkippedByReason: k.SkippedByReason, Empty: k.Empty, Extra: k.Extra, Until: k.Until,
		Changes: k.Changes, EndMark: k.EndMark, Partitions: k.Partitions, UpdatesSinceRebuild: k.UpdatesSinceRebuild,
		CheckpointCapturedAt: nanoTime(k.CheckpointCapturedAt)}
	if w.Partitions == nil {
		w.Partitions = []Partition{}
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads k as the daemon sends it.
func (k *KeptGeneration) UnmarshalJSON(b []byte) error {
	var w keptWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*k = KeptGeneration{Generation: w.Generation, Topic: w.Topic, Fold: w.Fold, Params: w.Params, Keys: w.Keys,
		Duration: time.Duration(w.DurationNS), Records: w.Records, Skipped: w.Skipped,
		SkippedByReason: w.SkippedByReason, Empty: w.Empty, Extra: w.Extra, Until: w.Until, Changes: w.Changes,
		EndMark: w.EndMark, Partitions: w.Partitions, UpdatesSinceRebuild: w.UpdatesSinceRebuild}
	var err error
	if k.BuiltAt, err = parseTime("built_at", &w.BuiltAt); err != nil {
		return err
	}
	k.CheckpointCapturedAt, err = parseTime("checkpoint_captured_at", w.CheckpointCapturedAt)
	return err
}

// Definition is whether the configured definition differs from the stored
// one, and in which fields (the config file's names; [] when none).
type Definition struct {
	Changed bool     `json:"changed"`
	Fields  []string `json:"fields"`
}
