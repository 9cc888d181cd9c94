package client_test

// Tests of the cluster client's routing against shard daemons simulated
// by HTTP handlers that answer as docs/shards.md says a shard answers (421
// key_not_here, a 404 with Kmaterialize-Partial, 409 repartitioned, 503),
// over data split by the producers' partitioner. The routing is checked
// against an oracle (the whole table, a plain map); real daemons, killed
// with SIGKILL, are in cmd/kmaterialize/cluster_test.go.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/partition"
)

// fakeShard is one simulated daemon holding table "t" over some partitions
// of a topic of count partitions.
type fakeShard struct {
	name        string
	count       int32
	partitioner partition.Partitioner // "" none
	subset      bool

	mu        sync.Mutex
	set       []int32
	rows      map[string]string // only the keys of set's partitions
	positions api.Positions
	status    int // 0: answers; else every table read answers it (503, 409)
	code      string
	mins      []string // the min_positions of the key reads it got
	reads     int
}

func (f *fakeShard) holds(p int32) bool { return slices.Contains(f.set, p) }

func (f *fakeShard) answerError(w http.ResponseWriter, status int, b api.ErrorBody, h map[string]string) {
	for k, v := range h {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(b)
}

func (f *fakeShard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	pos := f.positions.String()
	switch {
	case r.URL.Path == "/v1/tables":
		t := api.Table{Name: "t", Topic: "topic", State: api.StateFollowing, Generation: 1, Keys: int64(len(f.rows)),
			Shard: &api.Shard{Subset: f.subset, PartitionSet: slices.Clone(f.set), PartitionsOfTopic: f.count, Partitioner: string(f.partitioner)}}
		for _, p := range f.set {
			t.Partitions = append(t.Partitions, api.Partition{Partition: p, End: f.positions[p], High: f.positions[p]})
		}
		json.NewEncoder(w).Encode(map[string]any{"tables": []api.Table{t}})
		return
	case r.URL.Path == "/readyz":
		json.NewEncoder(w).Encode(map[string]any{"tables": []any{}})
		return
	case f.status != 0:
		f.answerError(w, f.status, api.ErrorBody{Code: f.code, Error: f.name + " says " + f.code}, nil)
		return
	}
	if min := r.URL.Query().Get(api.ParamMinPositions); min != "" || strings.Contains(r.URL.Path, "/keys/") {
		f.mins = append(f.mins, min)
		want, err := api.ParsePositions(min)
		if err != nil {
			f.answerError(w, 400, api.ErrorBody{Code: api.CodeBadPositions, Error: err.Error()}, nil)
			return
		}
		for p := range want {
			if !f.holds(p) {
				f.answerError(w, 400, api.ErrorBody{Code: api.CodeBadPositions, Error: fmt.Sprintf("partition %d is not the table's", p)}, nil)
				return
			}
		}
		if ok, _ := f.positions.Reached(want); !ok {
			f.answerError(w, 409, api.ErrorBody{Code: api.CodePositionsNotReached, Error: "not reached", Positions: f.positions.Clone()}, nil)
			return
		}
	}
	w.Header().Set(api.HeaderGeneration, "1")
	w.Header().Set(api.HeaderPositions, pos)
	if key, ok := strings.CutPrefix(r.URL.Path, "/v1/tables/t/keys/"); ok {
		f.reads++
		if f.partitioner != "" {
			p, _ := f.partitioner.Partition([]byte(key), f.count)
			if !f.holds(p) {
				f.answerError(w, http.StatusMisdirectedRequest, api.ErrorBody{Code: api.CodeKeyNotHere, Error: "not here", Partition: &p, PartitionSet: f.set}, nil)
				return
			}
		}
		v, ok := f.rows[key]
		if !ok {
			h := map[string]string{api.HeaderGeneration: "1", api.HeaderPositions: pos}
			if f.subset && f.partitioner == "" {
				h[api.HeaderPartial] = "true"
			}
			f.answerError(w, 404, api.ErrorBody{Code: api.CodeKeyNotFound, Error: "key not found", PartitionSet: f.set}, h)
			return
		}
		w.Write([]byte(v))
		return
	}
	if r.URL.Path == "/v1/tables/t/rows" {
		q := r.URL.Query()
		keys := make([]string, 0, len(f.rows))
		for k := range f.rows {
			if strings.HasPrefix(k, q.Get("prefix")) && k > q.Get("after") {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		limit, _ := strconv.Atoi(q.Get("limit"))
		if len(keys) > limit {
			keys = keys[:limit]
			w.Header().Set(api.HeaderMore, "true")
		}
		for _, k := range keys {
			b, _ := json.Marshal(map[string]string{"key": k, "value": f.rows[k]})
			w.Write(append(b, '\n'))
		}
		return
	}
	http.NotFound(w, r)
}

// fakeCluster is shards over one table, with the oracle of the whole table.
type fakeCluster struct {
	want    map[string]string
	shards  []*fakeShard
	servers []*httptest.Server
	daemons []client.ClusterDaemon
}

// newFakeCluster splits n keys over count partitions by p (murmur2 when
// "", for the data; the shards say p) and gives each set of sets its
// shards, in order.
func newFakeCluster(t *testing.T, n int, count int32, p partition.Partitioner, sets ...[]int32) *fakeCluster {
	t.Helper()
	fc := &fakeCluster{want: map[string]string{}}
	rng := rand.New(rand.NewSource(int64(n)))
	for i := range n {
		fc.want[fmt.Sprintf("k%04d", i)] = fmt.Sprintf("v%d", rng.Intn(1_000_000))
	}
	place := p
	if place == "" {
		place = partition.Murmur2
	}
	for i, set := range sets {
		f := &fakeShard{name: fmt.Sprintf("d%d", i), count: count, partitioner: p, subset: len(set) < int(count),
			set: set, rows: map[string]string{}, positions: api.Positions{}}
		for _, q := range set {
			f.positions[q] = 100
		}
		for k, v := range fc.want {
			if q, _ := place.Partition([]byte(k), count); f.holds(q) {
				f.rows[k] = v
			}
		}
		srv := httptest.NewServer(f)
		t.Cleanup(srv.Close)
		fc.shards, fc.servers = append(fc.shards, f), append(fc.servers, srv)
		fc.daemons = append(fc.daemons, client.ClusterDaemon{Name: f.name, Address: srv.URL})
	}
	return fc
}

func (fc *fakeCluster) cluster(t *testing.T, o *client.ClusterOptions) *client.Cluster {
	t.Helper()
	cl, err := client.NewCluster(fc.daemons, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// checkGets reads every key of the oracle and some absent ones.
func checkGets(t *testing.T, cl *client.Cluster, want map[string]string) {
	t.Helper()
	ctx := context.Background()
	for k, v := range want {
		got, err := cl.Get(ctx, "t", []byte(k), client.GetOptions{})
		if err != nil {
			t.Fatalf("Get %q: %v", k, err)
		}
		if string(got.Value.Value) != v {
			t.Fatalf("Get %q = %q from %s, want %q", k, got.Value.Value, got.Daemon, v)
		}
	}
	for _, k := range []string{"absent", "k9999x", "zz"} {
		if _, err := cl.Get(ctx, "t", []byte(k), client.GetOptions{}); !client.IsCode(err, client.CodeKeyNotFound) {
			t.Fatalf("Get absent %q: %v, want key_not_found", k, err)
		}
	}
}

func scanAll(t *testing.T, cl *client.Cluster, o client.RowsOptions) ([]string, map[string]string) {
	t.Helper()
	var keys []string
	got := map[string]string{}
	err := cl.Rows(context.Background(), "t", o, func(r client.Row) error {
		keys = append(keys, string(r.Key))
		got[string(r.Key)] = string(r.Value)
		return nil
	})
	if err != nil {
		t.Fatalf("Rows: %v", err)
	}
	if !slices.IsSorted(keys) || len(slices.Compact(slices.Clone(keys))) != len(keys) {
		t.Fatalf("Rows: keys not strictly ascending: %v", keys)
	}
	return keys, got
}

// TestClusterShardsAndReplicas: two shards of a murmur2 table, one of
// them with two replicas: every key read equals the oracle's, reads are
// shared by the replicas, a replica gone or answering 503 is passed over,
// and the merged scan is the oracle's table.
func TestClusterShardsAndReplicas(t *testing.T) {
	fc := newFakeCluster(t, 300, 4, partition.Murmur2, []int32{0, 1}, []int32{0, 1}, []int32{2, 3})
	cl := fc.cluster(t, nil)
	checkGets(t, cl, fc.want)
	if fc.shards[0].reads == 0 || fc.shards[1].reads == 0 {
		t.Fatalf("replica reads %d and %d: want both replicas asked", fc.shards[0].reads, fc.shards[1].reads)
	}
	_, got := scanAll(t, cl, client.RowsOptions{PageSize: 7})
	if diff := cmp.Diff(fc.want, got); diff != "" {
		t.Fatalf("scan (-oracle +cluster):\n%s", diff)
	}
	keys, _ := scanAll(t, cl, client.RowsOptions{PageSize: 3, Limit: 25, Prefix: []byte("k01")})
	var wantKeys []string
	for k := range fc.want {
		if strings.HasPrefix(k, "k01") {
			wantKeys = append(wantKeys, k)
		}
	}
	sort.Strings(wantKeys)
	if diff := cmp.Diff(wantKeys[:25], keys); diff != "" {
		t.Fatalf("scan with prefix and limit (-oracle +cluster):\n%s", diff)
	}
	if n, err := cl.Count(context.Background(), "t", client.CountOptions{}); err == nil {
		t.Fatalf("Count of fakes without a count route: %d, want an error", n)
	}

	// One replica gone: the other answers every read of its shard.
	fc.servers[0].Close()
	checkGets(t, cl, fc.want)
	_, got = scanAll(t, cl, client.RowsOptions{PageSize: 50})
	if diff := cmp.Diff(fc.want, got); diff != "" {
		t.Fatalf("scan after a replica went (-oracle +cluster):\n%s", diff)
	}
	st, err := cl.Tables(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Tables) != 1 || !st.Tables[0].FullyServed || len(st.Tables[0].Holes) != 0 {
		t.Fatalf("Tables with a replica down: %+v, want fully served", st.Tables)
	}

	// The other shard's only daemon answers 503: its keys are unserved,
	// the first shard's still read.
	fc.shards[2].mu.Lock()
	fc.shards[2].status, fc.shards[2].code = 503, api.CodeShuttingDown
	fc.shards[2].mu.Unlock()
	for k, v := range fc.want {
		p, _ := partition.Murmur2.Partition([]byte(k), 4)
		got, err := cl.Get(context.Background(), "t", []byte(k), client.GetOptions{})
		switch {
		case p >= 2 && !errors.Is(err, client.ErrUnserved):
			t.Fatalf("Get %q (partition %d, its shard answers 503): %v, want ErrUnserved", k, p, err)
		case p < 2 && (err != nil || string(got.Value.Value) != v):
			t.Fatalf("Get %q: %q, %v; want %q", k, got.Value.Value, err, v)
		}
	}
	if err := cl.Rows(context.Background(), "t", client.RowsOptions{}, func(client.Row) error { return nil }); !errors.Is(err, client.ErrUnserved) {
		t.Fatalf("Rows with a shard answering 503: %v, want ErrUnserved", err)
	}

	// The shard's daemon gone: Tables shows partitions 2 and 3 as holes.
	fc.servers[2].Close()
	st, err = cl.Tables(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if tb := st.Tables[0]; tb.FullyServed || !slices.Equal(tb.Holes, []int32{2, 3}) {
		t.Fatalf("Tables with a shard gone: holes %v, fully served %v; want holes [2 3]", tb.Holes, tb.FullyServed)
	}
	if err := cl.Rows(context.Background(), "t", client.RowsOptions{}, func(client.Row) error { return nil }); !errors.Is(err, client.ErrUnserved) {
		t.Fatalf("Rows with a hole: %v, want ErrUnserved", err)
	}
}

// TestClusterNoPartitioner: shards that cannot place a key answer a key
// they lack 404 with Kmaterialize-Partial, and the cluster asks the next;
// a key none has is a clean not-found, but not while a shard is down.
func TestClusterNoPartitioner(t *testing.T) {
	fc := newFakeCluster(t, 200, 3, "", []int32{0}, []int32{1}, []int32{2})
	cl := fc.cluster(t, nil)
	checkGets(t, cl, fc.want)
	_, got := scanAll(t, cl, client.RowsOptions{PageSize: 9})
	if diff := cmp.Diff(fc.want, got); diff != "" {
		t.Fatalf("scan (-oracle +cluster):\n%s", diff)
	}
	fc.servers[1].Close()
	if _, err := cl.Get(context.Background(), "t", []byte("absent"), client.GetOptions{}); !errors.Is(err, client.ErrUnserved) || client.IsCode(err, client.CodeKeyNotFound) {
		t.Fatalf("Get absent with a shard down: %v, want ErrUnserved (the key may be in its partition)", err)
	}
}

// TestClusterStaleRouting: the shards swap partitions after the cluster
// learned them; a read answered 421 key_not_here is routed again, once,
// to the holder the refreshed routes name. 409 repartitioned is returned.
func TestClusterStaleRouting(t *testing.T) {
	fc := newFakeCluster(t, 100, 4, partition.Murmur2, []int32{0, 1}, []int32{2, 3})
	cl := fc.cluster(t, &client.ClusterOptions{MaxAge: 1 << 62})
	checkGets(t, cl, fc.want)
	a, b := fc.shards[0], fc.shards[1]
	a.mu.Lock()
	b.mu.Lock()
	a.set, b.set = b.set, a.set
	a.rows, b.rows = b.rows, a.rows
	a.positions, b.positions = b.positions, a.positions
	a.mu.Unlock()
	b.mu.Unlock()
	checkGets(t, cl, fc.want)

	b.mu.Lock()
	b.status, b.code = http.StatusConflict, api.CodeRepartitioned
	b.mu.Unlock()
	for k := range fc.want {
		if p, _ := partition.Murmur2.Partition([]byte(k), 4); p < 2 {
			_, err := cl.Get(context.Background(), "t", []byte(k), client.GetOptions{})
			var de *client.DaemonError
			if !client.IsCode(err, api.CodeRepartitioned) || !errors.As(err, &de) || de.Daemon != b.name {
				t.Fatalf("Get %q of a repartitioned shard: %v, want its 409 repartitioned", k, err)
			}
			break
		}
	}
}

// TestClusterPositions: the caller's min_positions are split by shard; a
// read that moves to a replica behind the positions already read asks it
// for them, and is answered by the replica that has them: the positions
// of the answers never go back.
func TestClusterPositions(t *testing.T) {
	fc := newFakeCluster(t, 60, 4, partition.Murmur2, []int32{0, 1}, []int32{0, 1}, []int32{2, 3})
	ahead, behind, other := fc.shards[0], fc.shards[1], fc.shards[2]
	ahead.positions = api.Positions{0: 500, 1: 500}
	cl := fc.cluster(t, nil)
	ctx := context.Background()

	var k01, k23 string
	for k := range fc.want {
		if p, _ := partition.Murmur2.Partition([]byte(k), 4); p < 2 {
			k01 = k
		} else {
			k23 = k
		}
	}
	if _, err := cl.Get(ctx, "t", []byte(k23), client.GetOptions{MinPositions: map[int32]int64{0: 1, 3: 7}}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(other.mins, []string{"3:7"}) {
		t.Fatalf("the shard of 2-3 was asked min_positions %q, want only its partition (3:7)", other.mins)
	}
	last := api.Positions{}
	for i := range 20 {
		v, err := cl.Get(ctx, "t", []byte(k01), client.GetOptions{})
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		for p, n := range v.Positions {
			if n < last[p] {
				t.Fatalf("read %d from %s at %v: partition %d went back from %d", i, v.Daemon, v.Positions, p, last[p])
			}
			last[p] = max(last[p], n)
		}
	}
	if last[0] != 500 {
		t.Fatalf("never read at the replica ahead: %v", last)
	}
	// The replica behind was asked for the positions read, at most once
	// (then it is asked after the other, which answers).
	if asked := slices.Index(behind.mins, "0:500,1:500"); asked < 0 || len(behind.mins) > 2 {
		t.Fatalf("the replica behind got min_positions %q, want 0:500,1:500 at most once after a plain read", behind.mins)
	}
	if got := cl.Positions("t"); got[0] != 500 || got[3] != 100 {
		t.Fatalf("Positions = %v", got)
	}
	cl.ForgetPositions("t")
	if got := cl.Positions("t"); got != nil {
		t.Fatalf("Positions after ForgetPositions = %v", got)
	}
}

// TestNewClusterRefuses addresses NewCluster cannot use.
func TestNewClusterRefuses(t *testing.T) {
	for _, ds := range [][]client.ClusterDaemon{
		nil,
		{{Address: ""}},
		{{Address: "/a.sock"}, {Address: "/a.sock"}},
		{{Name: "x", Address: "/a.sock"}, {Name: "x", Address: "/b.sock"}},
		{{Address: "/a.sock", Token: "t"}},
		{{Address: "ftp://h:1"}},
	} {
		if _, err := client.NewCluster(ds, nil); err == nil {
			t.Errorf("NewCluster(%+v): no error", ds)
		}
	}
}
