package materialize_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/exportdoc"
	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/scenario"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// countOracle is the test's own plain fold: distinct identities per group,
// content compared as re-marshalled JSON without the ignored fields. It
// returns the conflicting identity ("" if none).
func countOracle(t *testing.T, s *scenario.Scenario, vis []scenario.Visible, catalog []string) (map[string]string, string) {
	t.Helper()
	content := map[string]string{}
	group := map[string]string{}
	conflict := ""
	for _, v := range vis {
		var m map[string]any
		if err := json.Unmarshal(v.Value, &m); err != nil {
			t.Fatalf("oracle: %d@%d: %v", v.Partition, v.Offset, err)
		}
		id := m[s.IdentityField].(string)
		for _, f := range s.IgnoreFields {
			delete(m, f)
		}
		c, _ := json.Marshal(m)
		if prev, ok := content[id]; ok {
			if prev != string(c) && (conflict == "" || id < conflict) {
				conflict = id
			}
			continue
		}
		content[id] = string(c)
		group[id] = m[s.GroupField].(string)
	}
	counts := map[string]int{}
	for _, g := range catalog {
		counts[g] = 0
	}
	for _, g := range group {
		counts[g]++
	}
	rows := map[string]string{}
	for g, n := range counts {
		rows[g] = strconv.Itoa(n)
	}
	return rows, conflict
}

type votes struct {
	t       *testing.T
	db      *store.DB
	dbPath  string
	table   string
	catalog []string
}

func newVotes(t *testing.T, table string) *votes {
	path := filepath.Join(t.TempDir(), "votes.db")
	db, err := store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &votes{t: t, db: db, dbPath: path, table: table}
}

// rebuild runs the count fold exactly as the CLI configures it.
func (v *votes) rebuild(s *scenario.Scenario, topic string) (materialize.Report, error) {
	v.t.Helper()
	data, err := os.ReadFile(s.CatalogPath)
	if err != nil {
		v.t.Fatal(err)
	}
	cat, err := fold.ParseCatalog(data)
	if err != nil {
		v.t.Fatal(err)
	}
	v.catalog = cat
	f, err := fold.NewCount(fold.CountConfig{Topic: topic, IdentityField: s.IdentityField, GroupField: s.GroupField,
		IgnoreFields: s.IgnoreFields, Catalog: cat})
	if err != nil {
		v.t.Fatal(err)
	}
	log := zerolog.New(zerolog.NewTestWriter(v.t)).Level(zerolog.WarnLevel)
	return materialize.Rebuild(context.Background(), materialize.Options{
		DB: v.db, Table: v.table, Fold: f, Log: log,
		Replay: replay.Config{Brokers: broker.Addr, Topic: topic, StallTimeout: 10 * time.Second, Log: log},
	})
}

func (v *votes) rows() map[string]string {
	v.t.Helper()
	out := map[string]string{}
	if err := v.db.Scan(v.table, nil, 0, func(k, val []byte) error {
		out[string(k)] = string(val)
		return nil
	}); err != nil {
		v.t.Fatal(err)
	}
	return out
}

func (v *votes) export() []byte {
	v.t.Helper()
	var b bytes.Buffer
	if err := exportdoc.Write(v.db, v.table, &b, exportdoc.Options{}); err != nil {
		v.t.Fatal(err)
	}
	return b.Bytes()
}

func (v *votes) meta() store.TableMeta {
	v.t.Helper()
	m, err := v.db.Table(v.table)
	if err != nil {
		v.t.Fatal(err)
	}
	return m
}

func load(t *testing.T, name string) *scenario.Scenario {
	t.Helper()
	s, err := scenario.Load("../testdata", name)
	if err != nil {
		t.Fatal(err)
	}
	// A topic of this run's own (tests repeat with -count); the expected
	// messages name it.
	own := fmt.Sprintf("%s-%d-%s", strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()), topicSeq.Add(1), s.Topic)
	s.Expected.Error = strings.ReplaceAll(s.Expected.Error, s.Topic, own)
	s.Topic = own
	// Build creates the topic; a real Kafka would keep it.
	t.Cleanup(func() {
		if err := broker.DeleteTopic(context.Background(), own); err != nil {
			t.Errorf("clean up: %v", err)
		}
	})
	return s
}

func TestVotes(t *testing.T) {
	ctx := context.Background()
	main := load(t, "main")
	mainVis, err := main.Build(ctx, broker, "")
	if err != nil {
		t.Fatal(err)
	}
	// A paused display group with committed offsets on the topic.
	paused := map[int32]int64{1: 3, 2: 1, 3: 2}
	display := main.Topic + "-display"
	if err := broker.CommitGroupOffsets(ctx, display, main.Topic, paused); err != nil {
		t.Fatal(err)
	}
	v := newVotes(t, "studio-votes")

	// main: 8 physical records, 5 logical votes.
	rep, err := v.rebuild(main, main.Topic)
	if err != nil {
		t.Fatal(err)
	}
	want, conflict := countOracle(t, main, mainVis, v.catalog)
	if conflict != "" {
		t.Fatalf("oracle found a conflict in main: %s", conflict)
	}
	if diff := cmp.Diff(main.Expected.Rows, want); diff != "" {
		t.Fatalf("oracle disagrees with expected.json (-expected +oracle):\n%s", diff)
	}
	if diff := cmp.Diff(want, v.rows()); diff != "" {
		t.Fatalf("main rows (-want +got):\n%s", diff)
	}
	m := v.meta()
	if m.Records != int64(len(mainVis)) || m.Records != 8 || m.Extra["logical_events"] != 5 || m.Extra["duplicates_folded"] != 3 {
		t.Fatalf("meta = %+v, want 8 records, 5 logical events, 3 duplicates", m)
	}
	for _, p := range rep.Checkpoint.Partitions {
		if p.Partition == 1 && (p.Low != 2 || p.Start != 2) {
			t.Fatalf("partition 1 bounds %+v, want low and start 2", p)
		}
		if p.End != p.High {
			t.Fatalf("partition %d incomplete: %+v", p.Partition, p)
		}
	}
	exp1 := v.export()

	// Repeat: byte-identical export, counts not added to the old totals.
	if _, err := v.rebuild(main, main.Topic); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, v.rows()); diff != "" {
		t.Fatalf("main rows after a second rebuild (-want +got):\n%s", diff)
	}
	if exp2 := v.export(); sha256.Sum256(exp1) != sha256.Sum256(exp2) {
		t.Fatalf("exports differ:\n%s\n---\n%s", exp1, exp2)
	}

	// conflict: rebuilt into the main table, refused, main unchanged.
	conf := load(t, "conflict")
	confVis, err := conf.Build(ctx, broker, "")
	if err != nil {
		t.Fatal(err)
	}
	_, oracleConflict := countOracle(t, conf, confVis, v.catalog)
	before := struct {
		rows   map[string]string
		meta   store.TableMeta
		export []byte
	}{v.rows(), v.meta(), v.export()}
	_, err = v.rebuild(conf, conf.Topic)
	var ce *fold.ConflictError
	if !errors.Is(err, fold.ErrInvalidData) || !errors.As(err, &ce) || ce.Identity != oracleConflict {
		t.Fatalf("err = %v, want a conflict on %q", err, oracleConflict)
	}
	if !strings.Contains(err.Error(), conf.Expected.Error) {
		t.Fatalf("message %q lacks %q", err, conf.Expected.Error)
	}
	if diff := cmp.Diff(before.rows, v.rows()); diff != "" {
		t.Fatalf("main rows changed by a refused rebuild:\n%s", diff)
	}
	if diff := cmp.Diff(before.meta, v.meta()); diff != "" {
		t.Fatalf("main meta changed by a refused rebuild:\n%s", diff)
	}
	if !bytes.Equal(before.export, v.export()) {
		t.Fatal("main export changed by a refused rebuild")
	}

	// Data errors: each refused with partition@offset, main untouched.
	for _, name := range []string{"malformed", "missing-field", "unknown-group"} {
		s := load(t, name)
		if _, err := s.Build(ctx, broker, ""); err != nil {
			t.Fatal(err)
		}
		_, err := v.rebuild(s, s.Topic)
		var de *fold.DataError
		if !errors.Is(err, fold.ErrInvalidData) || !errors.As(err, &de) {
			t.Fatalf("%s: err = %v, want a DataError", name, err)
		}
		if !strings.Contains(err.Error(), s.Expected.Error) {
			t.Fatalf("%s: message %q lacks %q", name, err, s.Expected.Error)
		}
		if !bytes.Equal(before.export, v.export()) {
			t.Fatalf("%s: main export changed by a refused rebuild", name)
		}
	}

	// The paused group kept exactly its offsets; nobody else committed.
	groups, err := broker.GroupOffsets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Other tests' groups live on their own topics; on this test's topics
	// only the paused group has offsets.
	got := map[string]map[int32]int64{}
	for g, offs := range groups {
		for _, tp := range []string{main.Topic, conf.Topic} {
			if po := offs[tp]; len(po) > 0 {
				got[g+" on "+tp] = po
			}
		}
	}
	wantGroups := map[string]map[int32]int64{display + " on " + main.Topic: paused}
	if diff := cmp.Diff(wantGroups, got); diff != "" {
		t.Fatalf("consumer groups changed (-want +got):\n%s", diff)
	}
}

func TestVotesCheckScenario(t *testing.T) {
	s := load(t, "check")
	vis, err := s.Build(context.Background(), broker, "")
	if err != nil {
		t.Fatal(err)
	}
	v := newVotes(t, "check-votes")
	if _, err := v.rebuild(s, s.Topic); err != nil {
		t.Fatal(err)
	}
	want, _ := countOracle(t, s, vis, v.catalog)
	if diff := cmp.Diff(s.Expected.Rows, want); diff != "" {
		t.Fatalf("oracle disagrees with expected.json:\n%s", diff)
	}
	if diff := cmp.Diff(want, v.rows()); diff != "" {
		t.Fatalf("rows (-want +got):\n%s", diff)
	}
	if m := v.meta(); m.Records != 6 || m.Extra["logical_events"] != 4 {
		t.Fatalf("meta = %+v, want 6 records and 4 logical events", m)
	}
}

// TestConflictVerdictIndependentOfPartitionOrder reads the conflict
// scenario's real log with the replay, then folds it partition by partition
// in forward and in reverse order into real generations: the verdict and the
// message must be the same.
func TestConflictVerdictIndependentOfPartitionOrder(t *testing.T) {
	s := load(t, "conflict")
	topic := s.Topic + "-conflict-order"
	if _, err := s.Build(context.Background(), broker, topic); err != nil {
		t.Fatal(err)
	}
	byPart := map[int32][]fold.Record{}
	var parts []int32
	_, err := replay.Run(context.Background(), replay.Config{Brokers: broker.Addr, Topic: topic, StallTimeout: 10 * time.Second,
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)}, func(b []fold.Record) error {
		for _, r := range b {
			if _, ok := byPart[r.Partition]; !ok {
				parts = append(parts, r.Partition)
			}
			byPart[r.Partition] = append(byPart[r.Partition], r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(parts)
	v := newVotes(t, "order")
	data, err := os.ReadFile(s.CatalogPath)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := fold.ParseCatalog(data)
	if err != nil {
		t.Fatal(err)
	}
	verdict := func(order []int32) string {
		f, err := fold.NewCount(fold.CountConfig{Topic: s.Topic, IdentityField: s.IdentityField, GroupField: s.GroupField,
			IgnoreFields: s.IgnoreFields, Catalog: cat})
		if err != nil {
			t.Fatal(err)
		}
		gen, err := v.db.Begin("order")
		if err != nil {
			t.Fatal(err)
		}
		defer gen.Abort()
		for _, p := range order {
			if err := gen.Write(func(r store.Rows) error { return f.Fold(materialize.FoldTable(r), byPart[p]) }); err != nil {
				t.Fatal(err)
			}
		}
		err = gen.Write(func(r store.Rows) error { return f.Finish(materialize.FoldTable(r)) })
		if err == nil {
			t.Fatalf("order %v: no conflict found", order)
		}
		return err.Error()
	}
	reversed := slices.Clone(parts)
	slices.Reverse(reversed)
	forward, backward := verdict(parts), verdict(reversed)
	if forward != backward || !strings.Contains(forward, s.Expected.Error) {
		t.Fatalf("forward %v: %s\nreverse %v: %s\nwant both to contain %q", parts, forward, reversed, backward, s.Expected.Error)
	}
}
