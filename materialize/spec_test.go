package materialize_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// TestSpecValidate checks that each invalid Spec is a *SpecError naming
// the field at fault, and that valid ones pass.
func TestSpecValidate(t *testing.T) {
	count := materialize.Spec{Name: "votes", Topic: "studio-votes", Fold: "count", IdentityField: "event_id", GroupField: "booth"}
	with := func(f func(*materialize.Spec)) materialize.Spec { s := count; f(&s); return s }
	for _, tc := range []struct {
		name  string
		spec  materialize.Spec
		field string // "" = valid
	}{
		{"latest defaults", materialize.Spec{Topic: "t"}, ""},
		{"count", count, ""},
		{"count full", with(func(s *materialize.Spec) {
			s.IgnoreFields = []string{"sent_at"}
			s.Catalog = []string{"a", "b"}
			s.AllowUnknownGroups = true
			s.OnBadRecord = fold.SkipBadRecords
			s.End = replay.EndStable
			s.StallTimeout = time.Minute
			s.AllowEmpty = true
		}), ""},
		{"no topic", materialize.Spec{Name: "x"}, materialize.FieldTopic},
		{"unknown fold", materialize.Spec{Topic: "t", Fold: "sum"}, materialize.FieldFold},
		{"latest with identity", materialize.Spec{Topic: "t", IdentityField: "id"}, materialize.FieldIdentityField},
		{"latest with group", materialize.Spec{Topic: "t", Fold: "latest", GroupField: "g"}, materialize.FieldGroupField},
		{"latest with ignore", materialize.Spec{Topic: "t", IgnoreFields: []string{"x"}}, materialize.FieldIgnoreFields},
		{"latest with empty catalog", materialize.Spec{Topic: "t", Catalog: []string{}}, materialize.FieldCatalog},
		{"latest with unknown groups", materialize.Spec{Topic: "t", AllowUnknownGroups: true}, materialize.FieldAllowUnknownGroups},
		{"count without identity", with(func(s *materialize.Spec) { s.IdentityField = "" }), materialize.FieldIdentityField},
		{"count without group", with(func(s *materialize.Spec) { s.GroupField = "" }), materialize.FieldGroupField},
		{"count ignoring its group", with(func(s *materialize.Spec) { s.IgnoreFields = []string{"booth"} }), materialize.FieldFold},
		{"count with a repeated catalog name", with(func(s *materialize.Spec) { s.Catalog = []string{"a", "a"} }), materialize.FieldFold},
		{"bad on_bad_record", materialize.Spec{Topic: "t", OnBadRecord: 7}, materialize.FieldOnBadRecord},
		{"bad end", materialize.Spec{Topic: "t", End: "low"}, materialize.FieldEnd},
		{"negative stall", materialize.Spec{Topic: "t", StallTimeout: -time.Second}, materialize.FieldStallTimeout},
		{"negative memory", materialize.Spec{Topic: "t", Memory: -1}, materialize.FieldMemory},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				if _, err := tc.spec.NewFolder(); err != nil {
					t.Fatalf("NewFolder of a valid spec: %v", err)
				}
				return
			}
			var se *materialize.SpecError
			if !errors.As(err, &se) || !errors.Is(err, materialize.ErrBadSpec) {
				t.Fatalf("Validate = %v, want a *SpecError", err)
			}
			if se.Field != tc.field || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Validate = %q (field %q), want field %q named", err, se.Field, tc.field)
			}
			if _, ferr := tc.spec.NewFolder(); !errors.Is(ferr, materialize.ErrBadSpec) {
				t.Fatalf("NewFolder of an invalid spec = %v", ferr)
			}
		})
	}
}

// TestSpecFolderMatchesFoldPackage checks that a Spec builds the fold the
// fold package builds from the same parameters (name and parameters as
// stored in table metadata), and Options carries the replay settings.
func TestSpecFolderMatchesFoldPackage(t *testing.T) {
	spec := materialize.Spec{Name: "votes", Topic: "studio-votes", Fold: "count", IdentityField: "event_id", GroupField: "booth",
		IgnoreFields: []string{"sent_at", "client"}, Catalog: []string{"b1", "b2", "b3"}, AllowUnknownGroups: true,
		OnBadRecord: fold.SkipBadRecords, End: replay.EndStable, StallTimeout: 7 * time.Second, AllowEmpty: true}
	direct, err := fold.NewCount(fold.CountConfig{Topic: "studio-votes", IdentityField: "event_id", GroupField: "booth",
		IgnoreFields: []string{"sent_at", "client"}, Catalog: []string{"b1", "b2", "b3"}, AllowUnknownGroups: true,
		OnBadRecord: fold.SkipBadRecords})
	if err != nil {
		t.Fatal(err)
	}
	opts, err := spec.Options(nil, "b:9092", map[string]string{"client.id": "x"}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if opts.Fold.Name() != direct.Name() {
		t.Fatalf("fold %q, want %q", opts.Fold.Name(), direct.Name())
	}
	if diff := cmp.Diff(direct.Params(), opts.Fold.Params()); diff != "" {
		t.Fatalf("fold params (-fold package +spec):\n%s", diff)
	}
	r := opts.Replay
	if opts.Table != "votes" || r.Topic != "studio-votes" || r.Brokers != "b:9092" || r.Props["client.id"] != "x" ||
		r.End != replay.EndStable || r.StallTimeout != 7*time.Second || !opts.AllowEmpty {
		t.Fatalf("options %+v", opts)
	}
	// Each call makes a fresh fold: a fold holds one rebuild's state.
	again, err := spec.Options(nil, "b:9092", nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if again.Fold == opts.Fold {
		t.Fatal("Options returned the same Folder twice")
	}
	latest, err := materialize.Spec{Topic: "account-balances"}.Options(nil, "b", nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if latest.Fold.Name() != "latest" || latest.Table != "account-balances" || latest.Replay.End != replay.EndHigh {
		t.Fatalf("latest defaults: table %q fold %q end %q", latest.Table, latest.Fold.Name(), latest.Replay.End)
	}
}

// TestSpecRebuildAgainstOracle rebuilds a count table from a Spec (skip
// bad records, a catalog, an ignored field) and compares its rows with a
// plain count of distinct event ids per booth.
func TestSpecRebuildAgainstOracle(t *testing.T) {
	ctx := context.Background()
	topic := uniqueTopic(t, 2)
	var recs []localkafka.Record
	ids := map[string]string{} // event id -> booth
	for i := 0; i < 200; i++ {
		id := fmt.Sprintf("e%03d", i%150) // 50 retried events, same content
		booth := fmt.Sprintf("b%d", (i%150)%4)
		ids[id] = booth
		v := fmt.Sprintf(`{"event_id":%q,"booth":%q,"sent_at":%d}`, id, booth, i)
		recs = append(recs, localkafka.Record{Partition: int32(i % 2), Key: []byte(id), Value: []byte(v)})
	}
	recs = append(recs, localkafka.Record{Partition: 1, Key: []byte("bad"), Value: []byte("not json")})
	if _, err := broker.Produce(ctx, topic, recs); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"b9": "0"} // a catalog group with no vote
	n := map[string]int{}
	for _, b := range ids {
		n[b]++
	}
	for b, c := range n {
		want[b] = strconv.Itoa(c)
	}

	db, err := store.Open(filepath.Join(t.TempDir(), "t.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	spec := materialize.Spec{Name: "votes", Topic: topic, Fold: "count", IdentityField: "event_id", GroupField: "booth",
		IgnoreFields: []string{"sent_at"}, Catalog: []string{"b0", "b1", "b2", "b3", "b9"},
		OnBadRecord: fold.SkipBadRecords, End: replay.EndStable, StallTimeout: 20 * time.Second}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	opts, err := spec.Options(db, broker.Addr, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := materialize.Rebuild(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	if err := db.Scan("votes", nil, 0, func(k, v []byte) error { got[string(k)] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("table (-oracle +got):\n%s", diff)
	}
	if rep.Meta.Skipped != 1 || rep.Meta.Topic != topic || rep.Checkpoint.EndMark != string(replay.EndStable) {
		t.Fatalf("meta %+v, checkpoint end %q: want 1 skipped, end stable", rep.Meta, rep.Checkpoint.EndMark)
	}
}

// TestSpecStored: the definition a rebuild stores reads back equal
// (LoadSpec), an empty catalog included; a table published without one is
// ErrNoSpec.
func TestSpecStored(t *testing.T) {
	topic := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	broker.TestTopic(t, topic, 1, nil)
	if _, err := broker.Produce(context.Background(), topic, []localkafka.Record{
		{Key: []byte("k"), Value: []byte(`{"id":"1","g":"a"}`)}}); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(filepath.Join(t.TempDir(), "t.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	spec := materialize.Spec{Name: "votes", Topic: topic, Fold: materialize.FoldCount, IdentityField: "id", GroupField: "g",
		IgnoreFields: []string{"x"}, Catalog: []string{}, AllowUnknownGroups: true, OnBadRecord: fold.SkipBadRecords,
		End: replay.EndStable, StallTimeout: 20 * time.Second}
	opts, err := spec.Options(db, broker.Addr, nil, zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := materialize.Rebuild(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	got, err := materialize.LoadSpec(db, "votes")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(spec, got); diff != "" || got.Catalog == nil {
		t.Fatalf("stored definition (-rebuilt +loaded):\n%s (catalog nil: %v)", diff, got.Catalog == nil)
	}

	// Options without a Spec, and a count fold: nothing to store.
	opts, err = spec.Options(db, broker.Addr, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	opts.Spec, opts.Table = nil, "bare"
	if _, err := materialize.Rebuild(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	if _, err := materialize.LoadSpec(db, "bare"); !errors.Is(err, materialize.ErrNoSpec) {
		t.Fatalf("LoadSpec of a table without a definition: %v, want ErrNoSpec", err)
	}
	if _, err := materialize.LoadSpec(db, "absent"); !errors.Is(err, store.ErrTableNotFound) {
		t.Fatalf("LoadSpec of no table: %v", err)
	}
}
