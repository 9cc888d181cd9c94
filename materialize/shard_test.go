package materialize_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/store"
)

// allOffsets ends the oracle at nothing for partitions ps: every record
// of theirs counts, and none of the others'.
func allOffsets(ps ...int32) map[int32]int64 {
	out := map[int32]int64{}
	for _, p := range ps {
		out[p] = 1 << 62
	}
	return out
}

func (r *followRig) checkpointOf(table string) checkpoint.Checkpoint {
	r.t.Helper()
	var cp checkpoint.Checkpoint
	if err := r.db.ReadTable(table, func(s *store.Snapshot) error {
		var err error
		cp, _, err = checkpoint.Load(s.Tx, table)
		return err
	}); err != nil {
		r.t.Fatal(err)
	}
	return cp
}

func (r *followRig) update() error {
	_, err := materialize.Update(context.Background(), materialize.UpdateOptions{DB: r.db, Table: r.spec.TableName(), Brokers: broker.Addr, Log: r.log})
	return err
}

func (r *followRig) addPartitions(n int) {
	r.t.Helper()
	cl, err := broker.Client()
	if err != nil {
		r.t.Fatal(err)
	}
	defer cl.Close()
	res, err := kadm.NewClient(cl).CreatePartitions(context.Background(), n, r.topic)
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		r.t.Fatal(err)
	}
}

// TestShard: a table over partitions 1 and 3 of a 4-partition topic holds
// exactly the oracle's rows of those partitions after a rebuild, an update
// and while followed; its checkpoint and stored definition record the
// subset and the count. Once the topic grows, its follower stops, and an
// update and a rebuild are refused, with ErrRepartitioned naming both
// counts, the rows untouched; a table over all partitions of the same
// topic rebuilds over the six.
func TestShard(t *testing.T) {
	rng := testRand(t)
	r := newFollowRig(t, 4, materialize.Spec{Name: "shard", Partitions: []int32{1, 3}, Partitioner: "murmur2"})
	r.produce(randomRecords(rng, 4, 120, "a"))
	r.rebuild()
	oracle := func() map[string]string { return r.latestOracleTo(allOffsets(1, 3)) }
	if got, want := r.rows(), oracle(); !cmp.Equal(got, want) {
		t.Fatalf("after the rebuild (-oracle +table):\n%s", cmp.Diff(want, got))
	}
	cp := r.checkpointOf("shard")
	var held []int32
	for _, p := range cp.Partitions {
		held = append(held, p.Partition)
	}
	if !slices.Equal(held, []int32{1, 3}) || cp.PartitionsOfTopic != 4 || !cp.Subset {
		t.Fatalf("checkpoint of partitions %v of %d, subset %v; want [1 3] of 4, a subset", held, cp.PartitionsOfTopic, cp.Subset)
	}
	spec, err := materialize.LoadSpec(r.db, "shard")
	if err != nil || !slices.Equal(spec.Partitions, []int32{1, 3}) || spec.Partitioner != "murmur2" {
		t.Fatalf("stored definition %+v, %v: want partitions [1 3], partitioner murmur2", spec, err)
	}

	r.produce(randomRecords(rng, 4, 80, "b"))
	if err := r.update(); err != nil {
		t.Fatal(err)
	}
	if got, want := r.rows(), oracle(); !cmp.Equal(got, want) {
		t.Fatalf("after the update (-oracle +table):\n%s", cmp.Diff(want, got))
	}
	if cp := r.checkpointOf("shard"); len(cp.Partitions) != 2 || cp.PartitionsOfTopic != 4 || !cp.Subset {
		t.Fatalf("the update's checkpoint %+v: want partitions 1 and 3 of 4, a subset", cp)
	}

	r.follow()
	r.produce(randomRecords(rng, 4, 80, "c"))
	highs := r.highs(4)
	r.awaitEnds(map[int32]int64{1: highs[1], 3: highs[3]})
	if got, want := r.rows(), oracle(); !cmp.Equal(got, want) {
		t.Fatalf("while followed (-oracle +table):\n%s", cmp.Diff(want, got))
	}
	r.addPartitions(2)
	r.produce(randomRecords(rng, 6, 60, "d"))
	err = r.awaitStop()
	// Until its refresh saw six partitions, the follower applied what 1
	// and 3 received: the table is their fold up to its checkpoint.
	ends := r.ends()
	before := r.rows()
	if want := r.latestOracleTo(ends); !cmp.Equal(before, want) || len(ends) != 2 {
		t.Fatalf("after the follower stopped at %v (-oracle +table):\n%s", ends, cmp.Diff(want, before))
	}
	var re *materialize.RepartitionedError
	if !errors.Is(err, materialize.ErrRepartitioned) || !errors.As(err, &re) || re.Recorded != 4 || re.Now != 6 || re.Op != materialize.OpFollow {
		t.Fatalf("the follower ended with %v; want ErrRepartitioned, 4 then 6", err)
	}
	for _, want := range []string{`"shard"`, r.topic, "has 6 partitions", "checkpoint 4", "drop the table"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	if err := r.update(); !errors.Is(err, materialize.ErrRepartitioned) {
		t.Fatalf("update after the growth: %v; want ErrRepartitioned", err)
	}
	opts, err := r.spec.Options(r.db, broker.Addr, nil, r.log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := materialize.Rebuild(context.Background(), opts); !errors.Is(err, materialize.ErrRepartitioned) {
		t.Fatalf("rebuild after the growth: %v; want ErrRepartitioned", err)
	}
	if got := r.rows(); !cmp.Equal(got, before) {
		t.Fatalf("a refused run changed the table (-before +after):\n%s", cmp.Diff(before, got))
	}

	whole := materialize.Spec{Name: "whole", Topic: r.topic}
	wopts, err := whole.Options(r.db, broker.Addr, nil, r.log)
	if err != nil {
		t.Fatal(err)
	}
	wopts.AllowEmpty = true
	if _, err := materialize.Rebuild(context.Background(), wopts); err != nil {
		t.Fatal(err)
	}
	if cp := r.checkpointOf("whole"); len(cp.Partitions) != 6 || cp.PartitionsOfTopic != 6 || cp.Subset {
		t.Fatalf("the whole table's checkpoint %+v: want 6 partitions of 6, not a subset", cp)
	}
	got := map[string]string{}
	if err := r.db.Scan("whole", nil, 0, func(k, v []byte) error { got[string(k)] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := r.latestOracle(); !cmp.Equal(got, want) {
		t.Fatalf("the whole table (-oracle +table):\n%s", cmp.Diff(want, got))
	}
}

// TestShardSpec: the definition's partitions and partitioner are checked:
// a set sorted and distinct, a partitioner by its canonical name, and only
// over raw keys (producers hash the serialized key).
func TestShardSpec(t *testing.T) {
	for _, tc := range []struct {
		spec  materialize.Spec
		field string // "" when valid
		msg   string
	}{
		{materialize.Spec{Topic: "t", Partitions: []int32{0, 2}, Partitioner: "consistent"}, "", ""},
		{materialize.Spec{Topic: "t", Partitioner: "fnv1a", KeyFormat: "raw"}, "", ""},
		{materialize.Spec{Topic: "t", Partitions: []int32{}}, materialize.FieldPartitions, "names no partition"},
		{materialize.Spec{Topic: "t", Partitions: []int32{2, 1}}, materialize.FieldPartitions, "sorted"},
		{materialize.Spec{Topic: "t", Partitions: []int32{1, 1}}, materialize.FieldPartitions, "distinct"},
		{materialize.Spec{Topic: "t", Partitions: []int32{-1}}, materialize.FieldPartitions, "distinct"},
		{materialize.Spec{Topic: "t", Partitioner: "random"}, materialize.FieldPartitioner, "ignores the key"},
		{materialize.Spec{Topic: "t", Partitioner: "murmur2_random"}, materialize.FieldPartitioner, `write it as "murmur2"`},
		{materialize.Spec{Topic: "t", Partitioner: "murmur2", KeyFormat: "json"}, materialize.FieldPartitioner, "serialized key bytes"},
		{materialize.Spec{Topic: "t", Fold: materialize.FoldCount, IdentityField: "id", GroupField: "g", Partitions: []int32{0}}, materialize.FieldPartitions, "partial counts"},
		{materialize.Spec{Topic: "t", Fold: materialize.FoldCount, IdentityField: "id", GroupField: "g", Partitioner: "murmur2"}, materialize.FieldPartitioner, "partial counts"},
	} {
		err := tc.spec.Validate()
		var se *materialize.SpecError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%+v: %v", tc.spec, err)
		case tc.field == "":
		case !errors.As(err, &se) || se.Field != tc.field || !errors.Is(err, materialize.ErrBadSpec) || !strings.Contains(err.Error(), tc.msg):
			t.Errorf("%+v: %v; want a %s error saying %q", tc.spec, err, tc.field, tc.msg)
		}
	}
	a := materialize.Spec{Topic: "t", Partitions: []int32{0, 1}}
	for _, tc := range []struct {
		b    materialize.Spec
		want []string
	}{
		{materialize.Spec{Topic: "t", Partitions: []int32{0, 1}, Partitioner: "murmur2"}, nil},
		{materialize.Spec{Topic: "t", Partitions: []int32{0, 2}}, []string{materialize.FieldPartitions}},
		{materialize.Spec{Topic: "t"}, []string{materialize.FieldPartitions}},
	} {
		if got := materialize.DefinitionChanges(a, tc.b); !slices.Equal(got, tc.want) {
			t.Errorf("DefinitionChanges(%v, %v) = %v, want %v", a.Partitions, tc.b.Partitions, got, tc.want)
		}
	}
}
