package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmaterialize/kmaterialize/api"
	kclient "github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/partition"
	"github.com/kmaterialize/kmaterialize/store"
)

// shardRow is the oracle of one key: where the producer put it (its
// delivery report) and its value after the last record (deleted: its last
// record was a tombstone).
type shardRow struct {
	partition int32
	value     string
	deleted   bool
}

// produceMurmur2 writes n records over keys acct-0..acct-(keys-1) with
// franz-go's Java-compatible key partitioner (murmur2, as the Java
// producer's default), every fifth a tombstone, and folds them as the
// latest fold does into the oracle, by key, with the partition each record
// was delivered to.
func produceMurmur2(t *testing.T, topic string, round, n, keys int, o map[string]shardRow) {
	t.Helper()
	cl, err := broker.Client(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Key: []byte(fmt.Sprintf("acct-%d", (i*7+round)%keys))}
		if i%5 != 4 {
			recs[i].Value = []byte(fmt.Sprintf("r%d-v%d", round, i))
		}
	}
	// Synchronously, one after the other: each key's records in order.
	for _, r := range recs {
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		k := string(r.Key)
		if old, ok := o[k]; ok && old.partition != r.Partition {
			t.Fatalf("key %s delivered to partition %d, before to %d", k, r.Partition, old.partition)
		}
		o[k] = shardRow{partition: r.Partition, value: string(r.Value), deleted: r.Value == nil}
	}
}

// shardTable is the table spec defines, rebuilt (and with f, followed) as
// cmd/kmaterialize wires it, with the definition to compare (Table.Spec).
func shardTable(spec materialize.Spec, f *FollowSettings) Table {
	spec.StallTimeout = 20 * time.Second
	if f != nil {
		tb := followedSpec(spec, *f, nil)
		tb.Spec = &spec
		return tb
	}
	return Table{Name: spec.TableName(), Topic: spec.Topic, Fold: "latest", Spec: &spec,
		Build: func(ctx context.Context, db *store.DB, log zerolog.Logger) (materialize.Report, error) {
			opts, err := spec.Options(db, broker.Addr, nil, log)
			if err != nil {
				return materialize.Report{}, err
			}
			return materialize.Rebuild(ctx, opts)
		}}
}

// apiTable is GET /v1/tables/{name}, decoded as the API's type.
func (c *client) apiTable(t *testing.T, name string) api.Table {
	t.Helper()
	r := c.get(t, "/v1/tables/"+url.PathEscape(name))
	if r.status != http.StatusOK {
		t.Fatalf("GET table %s: %d %s", name, r.status, r.body)
	}
	var tb api.Table
	if err := json.Unmarshal(r.body, &tb); err != nil {
		t.Fatal(err)
	}
	if tb.Shard == nil {
		t.Fatalf("table %s has no shard: %s", name, r.body)
	}
	return tb
}

// errorBody decodes r's error body as the API's type.
func (r response) errorBody(t *testing.T) api.ErrorBody {
	t.Helper()
	r.apiErr(t)
	var e api.ErrorBody
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

// keyPartition is GET .../partition?key=K.
func (c *client) keyPartition(t *testing.T, table, key string) (response, api.KeyPartition) {
	t.Helper()
	r := c.get(t, "/v1/tables/"+url.PathEscape(table)+"/partition?"+url.Values{"key": {key}}.Encode())
	var kp api.KeyPartition
	if r.status == http.StatusOK {
		if err := json.Unmarshal(r.body, &kp); err != nil {
			t.Fatal(err)
		}
	}
	return r, kp
}

// TestShardKeyReads: a 4-partition topic written by a murmur2-partitioning
// producer, served by three tables: "shard" over partitions 0,1 with
// partitioner murmur2, "blind" over 0,1 without a partitioner, "all" over
// every partition with murmur2. Against the oracle of the producer's
// delivery reports: each table shows its shard; every key of partitions 0
// and 1 answers its value (404 when deleted) on both subsets; every key of
// 2 and 3 answers 421 key_not_here with its partition on "shard", and 404
// with Kmaterialize-Partial and the partition set on "blind"; "all"
// answers every key as always; the partition route agrees with the
// producer and partition.Murmur2 and says whether the table holds it;
// /readyz names the subsets' partitions; the Go client's Partition and
// errors say the same.
func TestShardKeyReads(t *testing.T) {
	topic := unique(t, "topic")
	broker.TestTopic(t, topic, 4, nil)
	o := map[string]shardRow{}
	produceMurmur2(t, topic, 1, 300, 80, o)

	cfg := baseConfig(t,
		shardTable(materialize.Spec{Name: "shard", Topic: topic, Partitions: []int32{0, 1}, Partitioner: "murmur2"}, nil),
		shardTable(materialize.Spec{Name: "blind", Topic: topic, Partitions: []int32{0, 1}}, nil),
		shardTable(materialize.Spec{Name: "all", Topic: topic, Partitioner: "murmur2"}, nil))
	d := start(t, cfg)
	c := d.c
	waitFor(t, "the three tables published", 60*time.Second, func() bool { return c.get(t, "/readyz").status == http.StatusOK })

	want := map[string]api.Shard{
		"shard": {Subset: true, PartitionSet: []int32{0, 1}, PartitionsOfTopic: 4, Partitioner: "murmur2"},
		"blind": {Subset: true, PartitionSet: []int32{0, 1}, PartitionsOfTopic: 4},
		"all":   {PartitionSet: []int32{0, 1, 2, 3}, PartitionsOfTopic: 4, Partitioner: "murmur2"},
	}
	for name, w := range want {
		if diff := cmp.Diff(w, *c.apiTable(t, name).Shard); diff != "" {
			t.Errorf("table %s: shard (-want +got):\n%s", name, diff)
		}
	}
	var list struct{ Tables []api.Table }
	if err := json.Unmarshal(c.get(t, "/v1/tables").body, &list); err != nil {
		t.Fatal(err)
	}
	for _, tb := range list.Tables {
		if diff := cmp.Diff(want[tb.Name], *tb.Shard); diff != "" {
			t.Errorf("GET /v1/tables: table %s: shard (-want +got):\n%s", tb.Name, diff)
		}
	}
	var ready struct{ Tables []api.ReadyTable }
	if err := json.Unmarshal(c.get(t, "/readyz").body, &ready); err != nil {
		t.Fatal(err)
	}
	for _, rt := range ready.Tables {
		if w := want[rt.Name]; !slices.Equal(rt.PartitionSet, map[bool][]int32{true: w.PartitionSet}[w.Subset]) {
			t.Errorf("/readyz: table %s: partition_set %v, want %v", rt.Name, rt.PartitionSet, w.PartitionSet)
		}
	}

	held := func(p int32) bool { return p == 0 || p == 1 }
	for _, k := range sortedShardKeys(o) {
		row := o[k]
		if p, err := partition.Murmur2.Partition([]byte(k), 4); err != nil || p != row.partition {
			t.Fatalf("key %s: partition.Murmur2 says %d (%v), the producer chose %d", k, p, err, row.partition)
		}
		for _, table := range []string{"shard", "blind", "all"} {
			r := c.get(t, "/v1/tables/"+table+"/keys/"+url.PathEscape(k))
			partial := r.header.Get(api.HeaderPartial)
			switch {
			case table == "shard" && !held(row.partition):
				e := r.errorBody(t)
				if r.status != http.StatusMisdirectedRequest || e.Code != api.CodeKeyNotHere || e.Partition == nil ||
					*e.Partition != row.partition || !slices.Equal(e.PartitionSet, []int32{0, 1}) {
					t.Errorf("%s key %s (partition %d): %d %s; want 421 key_not_here with its partition", table, k, row.partition, r.status, r.body)
				}
			case table == "blind" && (!held(row.partition) || row.deleted):
				e := r.errorBody(t)
				if r.status != http.StatusNotFound || e.Code != api.CodeKeyNotFound || partial != "true" || !slices.Equal(e.PartitionSet, []int32{0, 1}) {
					t.Errorf("%s key %s (partition %d): %d %s=%q %s; want 404 key_not_found, partial, partition_set [0 1]", table, k, row.partition, r.status, api.HeaderPartial, partial, r.body)
				}
			case row.deleted:
				if r.status != http.StatusNotFound || r.errorBody(t).Code != api.CodeKeyNotFound || partial != "" {
					t.Errorf("%s key %s (deleted): %d %s=%q %s; want 404 key_not_found, not partial", table, k, r.status, api.HeaderPartial, partial, r.body)
				}
			default:
				if r.status != http.StatusOK || string(r.body) != row.value {
					t.Errorf("%s key %s (partition %d): %d %q, want %q", table, k, row.partition, r.status, r.body, row.value)
				}
			}
		}
		for _, table := range []string{"shard", "all"} {
			r, kp := c.keyPartition(t, table, k)
			w := api.KeyPartition{Table: table, Partitioner: "murmur2", PartitionsOfTopic: 4, Partition: row.partition, Held: table == "all" || held(row.partition)}
			if r.status != http.StatusOK || kp != w {
				t.Errorf("%s partition of %s: %d %s, want %+v", table, k, r.status, r.body, w)
			}
		}
	}

	// A key elsewhere is answered at once, whatever min_positions asks
	// for; a key here waits for them as on any table.
	for _, k := range sortedShardKeys(o) {
		r := c.get(t, "/v1/tables/shard/keys/"+url.PathEscape(k)+"?min_positions=0:999999")
		if row := o[k]; held(row.partition) {
			if r.status != http.StatusConflict || r.apiErr(t).Code != api.CodePositionsNotReached {
				t.Errorf("shard key %s (partition %d) with min_positions out of reach: %d %s, want 409 positions_not_reached", k, row.partition, r.status, r.body)
			}
		} else if r.status != http.StatusMisdirectedRequest || r.apiErr(t).Code != api.CodeKeyNotHere {
			t.Errorf("shard key %s (partition %d) with min_positions: %d %s, want 421 key_not_here", k, row.partition, r.status, r.body)
		}
	}

	// The partition route's refusals.
	for _, c2 := range []struct {
		table, query string
		status       int
		code         string
	}{
		{"blind", "key=acct-1", http.StatusBadRequest, api.CodeNoPartitioner},
		{"nope", "key=acct-1", http.StatusNotFound, api.CodeTableNotFound},
		{"shard", "", http.StatusBadRequest, api.CodeBadKey},
		{"shard", "key=a&key=b", http.StatusBadRequest, api.CodeBadKey},
		{"shard", "key=%21%21&encoding=base64", http.StatusBadRequest, api.CodeBadKey},
		{"shard", "key=a&encoding=latin1", http.StatusBadRequest, api.CodeBadEncoding},
		{"shard", "key=a&limit=1", http.StatusBadRequest, api.CodeBadRequest},
	} {
		r := c.get(t, "/v1/tables/"+c2.table+"/partition?"+c2.query)
		if r.status != c2.status || r.apiErr(t).Code != c2.code {
			t.Errorf("%s partition?%s: %d %s, want %d %s", c2.table, c2.query, r.status, r.body, c2.status, c2.code)
		}
	}
	// encoding=base64 names the same key; the empty key is a key
	// murmur2 places.
	if r, kp := c.keyPartition(t, "shard", ""); r.status != http.StatusOK || kp.Partition != mustPartition(t, partition.Murmur2, "", 4) {
		t.Errorf("partition of the empty key: %d %s", r.status, r.body)
	}
	r := c.get(t, "/v1/tables/shard/partition?key=YWNjdC0x&encoding=base64") // acct-1
	var kp api.KeyPartition
	if r.status != http.StatusOK || json.Unmarshal(r.body, &kp) != nil || kp.Partition != o["acct-1"].partition {
		t.Errorf("partition of base64 acct-1: %d %s, want partition %d", r.status, r.body, o["acct-1"].partition)
	}

	// The Go client.
	cl := kclient.Dial(cfg.Socket)
	defer cl.Close()
	ctx := context.Background()
	for _, k := range sortedShardKeys(o) {
		row := o[k]
		got, err := cl.Partition(ctx, "shard", []byte(k))
		if err != nil || got.Partition != row.partition || got.Held != held(row.partition) {
			t.Errorf("client Partition(%s): %+v, %v; want partition %d", k, got, err, row.partition)
		}
		_, _, err = cl.Get(ctx, "shard", []byte(k))
		if p, set, ok := kclient.NotHere(err); ok != !held(row.partition) || (ok && (p != row.partition || !slices.Equal(set, []int32{0, 1}))) {
			t.Errorf("client Get(shard, %s): %v; NotHere %d %v %v", k, err, p, set, ok)
		}
		_, _, err = cl.Get(ctx, "blind", []byte(k))
		if kclient.IsPartial(err) != (!held(row.partition) || row.deleted) {
			t.Errorf("client Get(blind, %s): %v; IsPartial %v", k, err, kclient.IsPartial(err))
		}
	}
	if _, err := cl.Partition(ctx, "blind", []byte("acct-1")); !kclient.IsCode(err, kclient.CodeNoPartitioner) {
		t.Errorf("client Partition(blind): %v, want %s", err, kclient.CodeNoPartitioner)
	}
}

func mustPartition(t *testing.T, p partition.Partitioner, key string, n int32) int32 {
	t.Helper()
	got, err := p.Partition([]byte(key), n)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func sortedShardKeys(o map[string]shardRow) []string {
	ks := make([]string, 0, len(o))
	for k := range o {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestShardRepartitioned: a followed subset table ("shard", partitions 0,1
// of 4, murmur2) and a followed table over all partitions ("all") of the
// same topic; the topic grows to 6 partitions (CreatePartitions). The
// subset table shows repartitioned with the live count, its key reads and
// partition route answer 409 repartitioned and /readyz names it; a shard
// not followed ("once", partitions 2,3) shows it once its next rebuild has
// failed naming both counts, and answers 409 from then on; "all"
// picks up the new partitions and answers every key of the oracle,
// records written to the new partitions included.
func TestShardRepartitioned(t *testing.T) {
	topic := unique(t, "topic")
	broker.TestTopic(t, topic, 4, nil)
	o := map[string]shardRow{}
	produceMurmur2(t, topic, 1, 120, 40, o)

	f := FollowSettings{MaxLag: 1 << 20}
	cfg := baseConfig(t,
		shardTable(materialize.Spec{Name: "shard", Topic: topic, Partitions: []int32{0, 1}, Partitioner: "murmur2"}, &f),
		shardTable(materialize.Spec{Name: "all", Topic: topic}, &f),
		shardTable(materialize.Spec{Name: "once", Topic: topic, Partitions: []int32{2, 3}, Partitioner: "murmur2"}, nil))
	d := start(t, cfg)
	c := d.c
	waitFor(t, "both tables published and following", 60*time.Second, func() bool { return c.get(t, "/readyz").status == http.StatusOK })
	for k, row := range o {
		if row.partition > 1 || row.deleted {
			continue
		}
		if r := c.get(t, "/v1/tables/shard/keys/"+url.PathEscape(k)); r.status != http.StatusOK || string(r.body) != row.value {
			t.Fatalf("shard key %s before the growth: %d %s, want %q", k, r.status, r.body, row.value)
		}
	}

	adm, err := broker.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	res, err := kadm.NewClient(adm).CreatePartitions(context.Background(), 2, topic)
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatalf("CreatePartitions: %v", err)
	}
	// Records in the new partitions, by the manual partitioner (the
	// keys' murmur2 partitions under 6 are not the point).
	var recs []*kgo.Record
	for p := int32(4); p < 6; p++ {
		for i := range 5 {
			k := fmt.Sprintf("new-%d-%d", p, i)
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Key: []byte(k), Value: []byte("v-" + k)})
		}
	}
	waitFor(t, "the new partitions' leaders", 60*time.Second, func() bool {
		return len(marksOf(t, topic)) == 6
	})
	if err := adm.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		o[string(r.Key)] = shardRow{partition: r.Partition, value: string(r.Value)}
	}

	waitFor(t, "shard repartitioned", 60*time.Second, func() bool { return c.apiTable(t, "shard").Shard.Repartitioned })
	sh := *c.apiTable(t, "shard").Shard
	if w := (api.Shard{Subset: true, PartitionSet: []int32{0, 1}, PartitionsOfTopic: 4, Partitioner: "murmur2", Repartitioned: true, LiveCount: 6}); !cmp.Equal(w, sh) {
		t.Errorf("shard after the growth: %s", cmp.Diff(w, sh))
	}
	for _, k := range sortedShardKeys(o) {
		r := c.get(t, "/v1/tables/shard/keys/"+url.PathEscape(k))
		if r.status != http.StatusConflict || r.apiErr(t).Code != api.CodeRepartitioned {
			t.Errorf("shard key %s after the growth: %d %s, want 409 repartitioned", k, r.status, r.body)
		}
	}
	if r, _ := c.keyPartition(t, "shard", "acct-1"); r.status != http.StatusConflict || r.apiErr(t).Code != api.CodeRepartitioned {
		t.Errorf("shard partition route after the growth: %d %s, want 409 repartitioned", r.status, r.body)
	}
	r := c.get(t, "/readyz")
	var notReady []api.ReadyTable
	if r.status == http.StatusServiceUnavailable {
		notReady = r.errorBody(t).Tables
	}
	if len(notReady) != 1 || notReady[0].Name != "shard" || !slices.Equal(notReady[0].PartitionSet, []int32{0, 1}) {
		t.Errorf("/readyz after the growth: %d %s, want 503 naming shard with its partitions", r.status, r.body)
	}

	// A shard not followed learns it from its next run, which fails.
	if tb := c.apiTable(t, "once"); tb.Shard.Repartitioned {
		t.Errorf("once repartitioned before a run saw it: %+v", *tb.Shard)
	}
	if r := c.do(t, "POST", "/v1/tables/once/rebuild?wait=1", nil); r.status != http.StatusOK || !bytes.Contains(r.body, []byte("the topic has 6 partitions, the table's checkpoint 4")) {
		t.Errorf("rebuild of once after the growth: %d %s, want its failure naming both counts", r.status, r.body)
	}
	if w, got := (api.Shard{Subset: true, PartitionSet: []int32{2, 3}, PartitionsOfTopic: 4, Partitioner: "murmur2", Repartitioned: true, LiveCount: 6}), *c.apiTable(t, "once").Shard; !cmp.Equal(w, got) {
		t.Errorf("once after its failed rebuild: %s", cmp.Diff(w, got))
	}
	if r := c.get(t, "/v1/tables/once/keys/acct-1"); r.status != http.StatusConflict || r.apiErr(t).Code != api.CodeRepartitioned {
		t.Errorf("once key after its failed rebuild: %d %s, want 409 repartitioned", r.status, r.body)
	}

	waitFor(t, "all over the 6 partitions", 60*time.Second, func() bool {
		return slices.Equal(c.apiTable(t, "all").Shard.PartitionSet, []int32{0, 1, 2, 3, 4, 5})
	})
	waitFor(t, "all answers the new partitions' keys", 60*time.Second, func() bool {
		return c.get(t, "/v1/tables/all/keys/new-5-4").status == http.StatusOK
	})
	for _, k := range sortedShardKeys(o) {
		row := o[k]
		r := c.get(t, "/v1/tables/all/keys/"+url.PathEscape(k))
		switch {
		case row.deleted && r.status != http.StatusNotFound:
			t.Errorf("all key %s (deleted): %d %s", k, r.status, r.body)
		case !row.deleted && (r.status != http.StatusOK || string(r.body) != row.value):
			t.Errorf("all key %s: %d %q, want %q", k, r.status, r.body, row.value)
		}
	}
	if tb := c.apiTable(t, "all"); tb.Shard.Subset || tb.Shard.Repartitioned {
		t.Errorf("all after the growth: shard %+v", *tb.Shard)
	}
}
