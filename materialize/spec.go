package materialize

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/partition"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// Fold names, as the CLI's --fold and the config file's fold spell them.
const (
	FoldLatest = "latest"
	FoldCount  = "count"
)

// Spec field names, as the config file spells them; a *SpecError names the
// field with one of these, and the CLI maps each to its flag.
const (
	FieldName               = "name"
	FieldTopic              = "topic"
	FieldFold               = "fold"
	FieldIdentityField      = "identity_field"
	FieldGroupField         = "group_field"
	FieldIgnoreFields       = "ignore_fields"
	FieldCatalog            = "catalog"
	FieldAllowUnknownGroups = "allow_unknown_groups"
	FieldOnBadRecord        = "on_bad_record"
	FieldEnd                = "end"
	FieldStallTimeout       = "stall_timeout"
	FieldMemory             = "memory"
	FieldReaders            = "readers"
	FieldValueFormat        = "value_format"
	FieldKeyFormat          = "key_format"
	FieldUntil              = "until"
	FieldKeep               = "keep"
	FieldMaxChange          = "max_change"
	FieldPartitions         = "partitions"
	FieldPartitioner        = "partitioner"
)

// Spec is a table's full definition: where its records come from, how they
// become rows, and when a rebuild's replay ends. It is what the rebuild
// flags and a table of the config file both describe, so the CLI and the
// daemon build the same table from the same Spec. Connection settings
// (brokers, librdkafka properties), the database and the logger are not part
// of a table and come from the caller (see Options).
//
// The zero value of every optional field is its default.
//
// A Spec is stored, as JSON with the tags below, in the metadata of the
// table it built (store.TableMeta.Spec) at every publish, so that update,
// import and the daemon need only the table's name (LoadSpec). A field added
// later must read its zero value as "as before" when absent.
type Spec struct {
	// Name is the table's name. Default: Topic.
	Name  string `json:"name"`
	Topic string `json:"topic"` // required
	// Fold is FoldLatest (default) or FoldCount.
	Fold string `json:"fold"`
	// IdentityField, GroupField, IgnoreFields, Catalog and
	// AllowUnknownGroups configure the count fold (fold.CountConfig) and
	// must be empty for the latest fold.
	IdentityField string   `json:"identity_field,omitempty"`
	GroupField    string   `json:"group_field,omitempty"`
	IgnoreFields  []string `json:"ignore_fields,omitempty"`
	// Catalog is the list of group names, already read (fold.ParseCatalog);
	// nil means no catalog. Stored without omitempty: an empty catalog
	// ([], accepts no group) is not the absent one (null).
	Catalog            []string `json:"catalog"`
	AllowUnknownGroups bool     `json:"allow_unknown_groups,omitempty"`
	// OnBadRecord says what the fold does with a record it cannot store.
	// Default fold.FailOnBadRecord.
	OnBadRecord fold.OnBadRecord `json:"on_bad_record"`
	// End is the replay's end mark. Default replay.EndHigh.
	End replay.EndMark `json:"end,omitempty"`
	// StallTimeout bounds a replay without progress. 0 means the replay's
	// default (30s); negative is invalid.
	StallTimeout time.Duration `json:"stall_timeout_ns,omitempty"`
	// AllowEmpty publishes a rebuild in which no record contributed a row
	// over a table that has rows (Options.AllowEmpty).
	AllowEmpty bool `json:"allow_empty,omitempty"`
	// Memory bounds the bytes a rebuild's records and rows take in memory
	// (Options.Memory). 0 means DefaultMemory; negative is invalid.
	Memory int64 `json:"memory,omitempty"`
	// Readers is how many consumers a rebuild, an update or a follower
	// reads the topic's partitions with (replay.Config.Readers), each a
	// share of them and of Memory's prefetch and batch parts (a
	// follower's: of what it holds for a stable offset). 0 means
	// DefaultReaders for a rebuild or an update, DefaultFollowReaders for
	// a follower; at most MaxReaders.
	Readers int `json:"readers,omitempty"`
	// ValueFormat and KeyFormat say how record values and keys are decoded
	// before the fold (package decode): raw (the default, ""), json,
	// avro, protobuf or jsonschema, stored as canonical JSON. The Schema
	// Registry they need is a connection setting, like the brokers: the
	// caller gives it in Options.Decode.Registry, so that no credential is
	// part of a table's definition.
	ValueFormat decode.Format `json:"value_format,omitempty"`
	KeyFormat   decode.Format `json:"key_format,omitempty"`

	// UntilTimestamp, if set, ends each partition at its first record whose
	// timestamp is >= it: the table as of that time (replay.Until).
	// Exclusive with ToOffsets.
	UntilTimestamp time.Time `json:"until_timestamp,omitzero"`
	// ToOffsets ends the named partitions at these offsets (exclusive);
	// the others end at the end mark (replay.Until).
	ToOffsets map[int32]int64 `json:"to_offsets,omitempty"`
	// Keep is how many earlier generations a publish keeps for rollback
	// and diff (Options.Keep). Negative is invalid.
	Keep int `json:"keep,omitempty"`
	// MaxChange, if not nil, refuses a publish that would add, remove or
	// change more than this percentage of the table's keys
	// (Options.MaxChange). Negative is invalid.
	MaxChange *float64 `json:"max_change,omitempty"`

	// Partitions, if not nil, are the topic's partitions the table holds
	// (a shard, docs/shards.md), sorted, without duplicates: a rebuild,
	// an update and a follow read only these, and a follow never adds the
	// topic's new partitions. A partition the topic lacks fails the
	// rebuild (exit 2). nil: all of them, as before.
	Partitions []int32 `json:"partitions,omitempty"`
	// Partitioner is the producers' partitioner (partition.Parse's
	// canonical names), with which the daemon finds a key's partition;
	// "" for none. Producers hash the serialized key, so it needs a raw
	// KeyFormat.
	Partitioner string `json:"partitioner,omitempty"`
}

// MaxReaders bounds Spec.Readers: each reader is a consumer with its own
// connections and threads.
const MaxReaders = 64

// ErrBadSpec is returned (as a *SpecError) by Spec.Validate, NewFolder and
// Options when a field of a Spec is missing or invalid: bad usage, before
// any work starts.
var ErrBadSpec = errors.New("invalid table definition")

// SpecError names the field of a Spec that is missing or invalid.
// It matches ErrBadSpec.
type SpecError struct {
	Table string // the Spec's Name (or topic); "" when neither is set
	Field string // one of the Field* names
	// Value is the offending value, when it helps ("count" for a fold
	// error); never a secret: a Spec holds none.
	Value  string
	Reason string
	Err    error // the underlying error, if any (e.g. from fold.NewCount)
}

// Error returns e.g. `table "votes": fold count: the identity field is
// required`.
func (e *SpecError) Error() string {
	s := e.Field
	if e.Value != "" {
		s += " " + e.Value
	}
	s += ": " + e.Reason
	if e.Table != "" {
		s = fmt.Sprintf("table %q: %s", e.Table, s)
	}
	return s
}

// Unwrap returns the underlying error, if any.
func (e *SpecError) Unwrap() error { return e.Err }

// Is reports whether target is ErrBadSpec.
func (e *SpecError) Is(target error) bool { return target == ErrBadSpec }

// TableName returns the table's name: Name, or Topic when Name is empty.
func (s Spec) TableName() string {
	if s.Name != "" {
		return s.Name
	}
	return s.Topic
}

// Validate reports the first missing or invalid field as a *SpecError, in
// a fixed order (topic, fold, the fold's fields, on_bad_record, end,
// stall_timeout, memory, value_format, key_format). It checks everything NewFolder needs, so a Spec that
// validates builds its fold.
func (s Spec) Validate() error {
	bad := func(field, value, reason string, err error) error {
		return &SpecError{Table: s.TableName(), Field: field, Value: value, Reason: reason, Err: err}
	}
	if s.Topic == "" {
		return bad(FieldTopic, "", "required", nil)
	}
	switch s.Fold {
	case "", FoldLatest:
		for _, f := range []struct {
			field string
			set   bool
		}{
			{FieldIdentityField, s.IdentityField != ""},
			{FieldGroupField, s.GroupField != ""},
			{FieldIgnoreFields, len(s.IgnoreFields) > 0},
			{FieldCatalog, s.Catalog != nil},
			{FieldAllowUnknownGroups, s.AllowUnknownGroups},
		} {
			if f.set {
				return bad(f.field, "", "applies to fold count only", nil)
			}
		}
	case FoldCount:
		if s.IdentityField == "" || s.GroupField == "" {
			field := FieldIdentityField
			if s.IdentityField != "" {
				field = FieldGroupField
			}
			return bad(field, "", "required by fold count", nil)
		}
		// fold.NewCount's own checks (the group field ignored, empty or
		// repeated catalog names), so that they fail here, not mid-run.
		if _, err := fold.NewCount(s.countConfig()); err != nil {
			return bad(FieldFold, FoldCount, err.Error(), err)
		}
	default:
		return bad(FieldFold, fmt.Sprintf("%q", s.Fold), "want latest or count", nil)
	}
	if s.OnBadRecord != fold.FailOnBadRecord && s.OnBadRecord != fold.SkipBadRecords {
		return bad(FieldOnBadRecord, fmt.Sprint(int(s.OnBadRecord)), "want fail or skip", nil)
	}
	switch s.End {
	case "", replay.EndHigh, replay.EndStable:
	default:
		return bad(FieldEnd, fmt.Sprintf("%q", s.End), "want high or stable", nil)
	}
	if s.StallTimeout < 0 {
		return bad(FieldStallTimeout, s.StallTimeout.String(), "must be positive", nil)
	}
	if s.Memory < 0 {
		return bad(FieldMemory, fmt.Sprint(s.Memory), "must be positive", nil)
	}
	if s.Readers < 0 || s.Readers > MaxReaders {
		return bad(FieldReaders, fmt.Sprint(s.Readers), fmt.Sprintf("want 1 to %d", MaxReaders), nil)
	}
	if !s.ValueFormat.Valid() {
		return bad(FieldValueFormat, fmt.Sprintf("%q", s.ValueFormat), "want "+decode.FormatNames, nil)
	}
	if !s.KeyFormat.Valid() {
		return bad(FieldKeyFormat, fmt.Sprintf("%q", s.KeyFormat), "want "+decode.FormatNames, nil)
	}
	if !s.UntilTimestamp.IsZero() && len(s.ToOffsets) > 0 {
		return bad(FieldUntil, "", "an end timestamp and end offsets are exclusive", nil)
	}
	for p, o := range s.ToOffsets {
		if p < 0 || o < 0 {
			return bad(FieldUntil, fmt.Sprintf("%d=%d", p, o), "partition and offset must not be negative", nil)
		}
	}
	if s.Keep < 0 {
		return bad(FieldKeep, fmt.Sprint(s.Keep), "must not be negative", nil)
	}
	if s.MaxChange != nil && (*s.MaxChange < 0 || *s.MaxChange != *s.MaxChange) {
		return bad(FieldMaxChange, fmt.Sprint(*s.MaxChange), "must be a percentage, 0 or more", nil)
	}
	if s.Fold == FoldCount && (s.Partitions != nil || s.Partitioner != "") {
		field := FieldPartitions
		if s.Partitions == nil {
			field = FieldPartitioner
		}
		return bad(field, "", "applies to fold latest only: a count table's rows are groups counted over every partition, so a shard would hold partial counts under the same keys as the others", nil)
	}
	if s.Partitions != nil {
		set := partition.FormatSet(s.Partitions)
		if len(s.Partitions) == 0 {
			return bad(FieldPartitions, "[]", "names no partition (leave it out for all)", nil)
		}
		for i, p := range s.Partitions {
			if p < 0 || p > partition.MaxSetPartition || (i > 0 && p <= s.Partitions[i-1]) {
				return bad(FieldPartitions, fmt.Sprint(s.Partitions), "want distinct partitions from 0 to "+fmt.Sprint(partition.MaxSetPartition)+", sorted (as "+set+")", nil)
			}
		}
	}
	if s.Partitioner != "" {
		p, err := partition.Parse(s.Partitioner)
		if err != nil {
			return bad(FieldPartitioner, fmt.Sprintf("%q", s.Partitioner), err.Error(), err)
		}
		if string(p) != s.Partitioner {
			return bad(FieldPartitioner, fmt.Sprintf("%q", s.Partitioner), fmt.Sprintf("write it as %q", p), nil)
		}
		if s.KeyFormat != "" && s.KeyFormat != decode.Raw {
			return bad(FieldPartitioner, s.Partitioner, fmt.Sprintf("needs key_format raw, not %s: producers hash the serialized key bytes, which a decoded key no longer is", s.KeyFormat), nil)
		}
	}
	return nil
}

func (s Spec) countConfig() fold.CountConfig {
	return fold.CountConfig{
		Topic:              s.Topic,
		IdentityField:      s.IdentityField,
		GroupField:         s.GroupField,
		IgnoreFields:       slices.Clone(s.IgnoreFields),
		Catalog:            slices.Clone(s.Catalog),
		AllowUnknownGroups: s.AllowUnknownGroups,
		OnBadRecord:        s.OnBadRecord,
	}
}

// NewFolder validates s and returns a fresh fold for one rebuild. A Folder
// holds the state of one rebuild: call NewFolder (or Options) for each run.
func (s Spec) NewFolder() (fold.Folder, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if s.Fold == FoldCount {
		f, err := fold.NewCount(s.countConfig())
		if err != nil {
			return nil, &SpecError{Table: s.TableName(), Field: FieldFold, Value: FoldCount, Reason: err.Error(), Err: err}
		}
		return f, nil
	}
	return fold.NewLatestWith(fold.LatestConfig{Topic: s.Topic, OnBadRecord: s.OnBadRecord}), nil
}

// Options returns what Rebuild needs to build s once into db: a fresh fold
// and the replay's topic, end mark and stall timeout, with the caller's
// brokers, librdkafka properties and logger. The replay starts at every
// partition's earliest retained offset; a caller that wants another start
// sets Replay.Start, and may set Replay.Progress; a Spec with a Schema
// Registry format needs the caller to set Decode.Registry. Each call returns a new
// Folder, so each rebuild must call Options again.
func (s Spec) Options(db *store.DB, brokers string, props map[string]string, log zerolog.Logger) (Options, error) {
	f, err := s.NewFolder()
	if err != nil {
		return Options{}, err
	}
	end := s.End
	if end == "" {
		end = replay.EndHigh
	}
	stored := s
	stored.Name = s.TableName()
	return Options{
		DB:    db,
		Table: s.TableName(),
		Replay: replay.Config{
			Brokers:      brokers,
			Topic:        s.Topic,
			Props:        props,
			End:          end,
			StallTimeout: s.StallTimeout,
			Until:        replay.Until{Timestamp: s.UntilTimestamp, Offsets: s.ToOffsets},
			Readers:      s.Readers,
			Partitions:   slices.Clone(s.Partitions),
			Log:          log,
		},
		Fold:       f,
		Decode:     decode.Config{Topic: s.Topic, Key: s.KeyFormat, Value: s.ValueFormat, OnBadRecord: s.OnBadRecord},
		AllowEmpty: s.AllowEmpty,
		Keep:       s.Keep,
		MaxChange:  s.MaxChange,
		Memory:     s.Memory,
		Log:        log,
		Spec:       &stored,
	}, nil
}

// DefinitionChanges returns the config file's names of the fields of the
// table's definition in which configured differs from stored, in a fixed
// order (topic, fold, key_format, value_format, identity_field,
// group_field, ignore_fields, catalog, allow_unknown_groups, partitions); nil when
// they agree. The definition is what decides which rows a record becomes:
// a table whose stored definition differs from its configured one must be
// rebuilt, never folded on two ways. The rest of a Spec (name, end,
// stall_timeout, memory, readers, on_bad_record, allow_empty, keep, max_change,
// until, partitioner) says how a run goes or how a key is found, not what
// the table is, and is not compared.
//
// Defaults compare equal to their spelled-out values (fold "" and latest,
// format "" and raw); ignore_fields and the catalog's names compare as
// sets, but no catalog (nil) differs from an empty one, which accepts no
// group.
func DefinitionChanges(stored, configured Spec) []string {
	format := func(f decode.Format) decode.Format {
		if f == "" {
			return decode.Raw
		}
		return f
	}
	set := func(s []string) []string {
		if s == nil {
			return nil
		}
		out := slices.Clone(s)
		slices.Sort(out)
		return slices.Compact(out)
	}
	sameSet := func(a, b []string) bool {
		return (a == nil) == (b == nil) && slices.Equal(set(a), set(b))
	}
	var out []string
	for _, f := range []struct {
		name string
		same bool
	}{
		{FieldTopic, stored.Topic == configured.Topic},
		{FieldFold, stored.foldName() == configured.foldName()},
		{FieldKeyFormat, format(stored.KeyFormat) == format(configured.KeyFormat)},
		{FieldValueFormat, format(stored.ValueFormat) == format(configured.ValueFormat)},
		{FieldIdentityField, stored.IdentityField == configured.IdentityField},
		{FieldGroupField, stored.GroupField == configured.GroupField},
		// An empty list ignores nothing, as no list does.
		{FieldIgnoreFields, slices.Equal(set(stored.IgnoreFields), set(configured.IgnoreFields))},
		{FieldCatalog, sameSet(stored.Catalog, configured.Catalog)},
		{FieldAllowUnknownGroups, stored.AllowUnknownGroups == configured.AllowUnknownGroups},
		// Which partitions' records the rows are of; the partitioner
		// says only where a key is looked for, and is not compared.
		{FieldPartitions, (stored.Partitions == nil) == (configured.Partitions == nil) && slices.Equal(stored.Partitions, configured.Partitions)},
	} {
		if !f.same {
			out = append(out, f.name)
		}
	}
	return out
}
