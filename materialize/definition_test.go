package materialize_test

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
)

// TestDefinitionChanges changes each field of a stored Spec, one at a
// time: a definition field is named by DefinitionChanges, any other field
// is not. Every field of Spec must be listed here, as one or the other,
// so that a field added later is classified on purpose.
func TestDefinitionChanges(t *testing.T) {
	pct := 5.0
	stored := materialize.Spec{Name: "votes", Topic: "studio-votes", Fold: materialize.FoldCount,
		IdentityField: "event_id", GroupField: "booth", IgnoreFields: []string{"sent_at", "via"},
		Catalog: []string{"b1", "b2"}, ValueFormat: decode.JSON}
	type change struct {
		name   string
		field  string // the Go field changed
		change func(*materialize.Spec)
		want   []string // nil: not a definition change
	}
	definition := []change{
		{"topic", "Topic", func(s *materialize.Spec) { s.Topic = "other" }, []string{materialize.FieldTopic}},
		{"fold", "Fold", func(s *materialize.Spec) { s.Fold = materialize.FoldLatest }, []string{materialize.FieldFold}},
		{"key_format", "KeyFormat", func(s *materialize.Spec) { s.KeyFormat = decode.JSON }, []string{materialize.FieldKeyFormat}},
		{"value_format", "ValueFormat", func(s *materialize.Spec) { s.ValueFormat = decode.Raw }, []string{materialize.FieldValueFormat}},
		{"identity_field", "IdentityField", func(s *materialize.Spec) { s.IdentityField = "id" }, []string{materialize.FieldIdentityField}},
		{"group_field", "GroupField", func(s *materialize.Spec) { s.GroupField = "room" }, []string{materialize.FieldGroupField}},
		{"ignore_fields", "IgnoreFields", func(s *materialize.Spec) { s.IgnoreFields = []string{"sent_at"} }, []string{materialize.FieldIgnoreFields}},
		{"catalog contents", "Catalog", func(s *materialize.Spec) { s.Catalog = []string{"b1", "b3"} }, []string{materialize.FieldCatalog}},
		{"catalog removed", "Catalog", func(s *materialize.Spec) { s.Catalog = nil }, []string{materialize.FieldCatalog}},
		{"catalog emptied", "Catalog", func(s *materialize.Spec) { s.Catalog = []string{} }, []string{materialize.FieldCatalog}},
		{"allow_unknown_groups", "AllowUnknownGroups", func(s *materialize.Spec) { s.AllowUnknownGroups = true }, []string{materialize.FieldAllowUnknownGroups}},
		{"partitions", "Partitions", func(s *materialize.Spec) { s.Partitions = []int32{0, 1} }, []string{materialize.FieldPartitions}},
		{"two fields, in order", "", func(s *materialize.Spec) { s.AllowUnknownGroups = true; s.Topic = "other" },
			[]string{materialize.FieldTopic, materialize.FieldAllowUnknownGroups}},
	}
	others := []change{
		{"name", "Name", func(s *materialize.Spec) { s.Name = "votes2" }, nil},
		{"on_bad_record", "OnBadRecord", func(s *materialize.Spec) { s.OnBadRecord = fold.SkipBadRecords }, nil},
		{"end", "End", func(s *materialize.Spec) { s.End = replay.EndStable }, nil},
		{"stall_timeout", "StallTimeout", func(s *materialize.Spec) { s.StallTimeout = time.Minute }, nil},
		{"allow_empty", "AllowEmpty", func(s *materialize.Spec) { s.AllowEmpty = true }, nil},
		{"memory", "Memory", func(s *materialize.Spec) { s.Memory = 1 << 20 }, nil},
		{"until_timestamp", "UntilTimestamp", func(s *materialize.Spec) { s.UntilTimestamp = time.Unix(1e9, 0) }, nil},
		{"to_offsets", "ToOffsets", func(s *materialize.Spec) { s.ToOffsets = map[int32]int64{0: 9} }, nil},
		{"keep", "Keep", func(s *materialize.Spec) { s.Keep = 3 }, nil},
		{"max_change", "MaxChange", func(s *materialize.Spec) { s.MaxChange = &pct }, nil},
		{"readers", "Readers", func(s *materialize.Spec) { s.Readers = 4 }, nil},
		// Where a key is looked for, not which rows there are.
		{"partitioner", "Partitioner", func(s *materialize.Spec) { s.Partitioner = "murmur2" }, nil},
		// Spelled-out defaults and reordered sets are the same definition.
		{"ignore_fields reordered", "", func(s *materialize.Spec) { s.IgnoreFields = []string{"via", "sent_at"} }, nil},
		{"catalog reordered", "", func(s *materialize.Spec) { s.Catalog = []string{"b2", "b1"} }, nil},
		{"key_format raw spelled out", "", func(s *materialize.Spec) { s.KeyFormat = decode.Raw }, nil},
	}
	covered := map[string]bool{}
	for _, tc := range append(definition, others...) {
		t.Run(tc.name, func(t *testing.T) {
			configured := stored
			configured.IgnoreFields = slices.Clone(stored.IgnoreFields)
			configured.Catalog = slices.Clone(stored.Catalog)
			tc.change(&configured)
			if tc.field != "" && reflect.DeepEqual(configured, stored) {
				t.Fatalf("the change left the Spec as it was")
			}
			if diff := cmp.Diff(tc.want, materialize.DefinitionChanges(stored, configured)); diff != "" {
				t.Errorf("DefinitionChanges (-want +got):\n%s", diff)
			}
			// The comparison is symmetric: a change back is as much of one.
			if diff := cmp.Diff(tc.want, materialize.DefinitionChanges(configured, stored)); diff != "" {
				t.Errorf("DefinitionChanges reversed (-want +got):\n%s", diff)
			}
		})
		covered[tc.field] = true
	}
	for _, f := range reflect.VisibleFields(reflect.TypeOf(materialize.Spec{})) {
		if !covered[f.Name] {
			t.Errorf("Spec.%s is neither a definition field nor another field of this test: classify it", f.Name)
		}
	}
	// Defaults spelled out, from an empty latest Spec.
	latest := materialize.Spec{Topic: "t"}
	spelled := materialize.Spec{Topic: "t", Fold: materialize.FoldLatest, KeyFormat: decode.Raw, ValueFormat: decode.Raw, IgnoreFields: []string{}}
	if got := materialize.DefinitionChanges(latest, spelled); got != nil {
		t.Errorf("defaults spelled out: DefinitionChanges = %q, want none", got)
	}
}
