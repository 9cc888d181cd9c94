package replay

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// only is the oracle's subset: the records of the partitions in ps.
func only(rs []rec, ps ...int32) []rec {
	return slices.DeleteFunc(slices.Clone(rs), func(r rec) bool { return !slices.Contains(ps, r.P) })
}

// TestSubsetReplay: a replay over partitions 1 and 3 of a 4-partition topic
// delivers exactly their records, plans only them, counts the topic's
// partitions, and warns of nothing.
func TestSubsetReplay(t *testing.T) {
	topic := newTopic(t, 4)
	all := produceEach(t, broker, topic, 4, 40)
	c := cfg(t, topic)
	c.Partitions = []int32{1, 3}
	got, res, err := collect(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sortRecs(only(all, 1, 3)), got); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	var planned []int32
	for _, pb := range res.Plan.Partitions {
		planned = append(planned, pb.Partition)
	}
	if !slices.Equal(planned, []int32{1, 3}) || res.Plan.PartitionsOfTopic != 4 || len(res.Plan.Warnings) != 0 {
		t.Fatalf("plan of partitions %v of %d, warnings %q; want [1 3] of 4, none", planned, res.Plan.PartitionsOfTopic, res.Plan.Warnings)
	}
	if diff := cmp.Diff(map[int32]int64{1: 10, 3: 10}, res.Positions()); diff != "" {
		t.Fatalf("end positions (-want +got):\n%s", diff)
	}
}

// TestSubsetMissing: a subset naming partitions the topic lacks fails
// before a record is read, naming them and what the topic has.
func TestSubsetMissing(t *testing.T) {
	topic := newTopic(t, 4)
	c := cfg(t, topic)
	c.Partitions = []int32{2, 5, 6}
	_, _, err := collect(t, c)
	var re *Error
	if !errors.Is(err, ErrPartitionsMissing) || !errors.As(err, &re) || re.Partition != 5 {
		t.Fatalf("err = %v, want ErrPartitionsMissing at partition 5", err)
	}
	for _, want := range []string{topic, "5-6", "has 4 (0-3)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
}

// TestSubsetFollowNeverAdds: a follower over partition 0 of a 2-partition
// topic that grows to 4 keeps to partition 0 (the records written to the
// others never arrive), and its live marks count the topic's partitions,
// 2 then 4, with marks of partition 0 only.
func TestSubsetFollowNeverAdds(t *testing.T) {
	ctx := context.Background()
	topic := newTopic(t, 2)
	first := produce(t, topic, []localkafka.Record{kv(0, "a", "1"), kv(1, "b", "2")})
	var mu sync.Mutex
	var counts []int32
	var marked [][]int32
	c := FollowConfig{Config: cfg(t, topic), From: map[int32]int64{0: 0}, Interval: 20 * time.Millisecond, Refresh: 50 * time.Millisecond}
	c.Partitions = []int32{0}
	c.Live = func(m LiveMarks) {
		if m.Error != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		counts = append(counts, m.PartitionsOfTopic)
		ps := make([]int32, 0, len(m.High))
		for p := range m.High {
			ps = append(ps, p)
		}
		marked = append(marked, ps)
	}
	var log followLog
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Tail(fctx, c, log.sink) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("follow: %v", err)
		}
	}()
	log.await(t, 1, done)

	cl, err := broker.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	res, err := kadm.NewClient(cl).CreatePartitions(ctx, 2, topic)
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	later := produce(t, topic, []localkafka.Record{kv(1, "c", "3"), kv(2, "d", "4"), kv(3, "e", "5"), kv(0, "f", "6")})
	// A follower that added partitions would do so after the refresh that
	// counted 4, and deliver their records within an Interval of it: wait
	// for three refreshes past it, and for partition 0's new record.
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		i := slices.Index(counts, 4)
		n := len(counts)
		mu.Unlock()
		if i >= 0 && n >= i+4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("live marks never counted 4 partitions, three times over: %v", counts)
		}
		time.Sleep(10 * time.Millisecond)
	}
	log.await(t, 2, done)
	var got []rec
	for _, b := range log.snapshot() {
		for p := range b.Positions {
			if p != 0 {
				t.Fatalf("a batch has a position of partition %d: %v", p, b.Positions)
			}
		}
		for _, r := range b.Records {
			got = append(got, toRec(r))
		}
	}
	if diff := cmp.Diff(only(append(first, later...), 0), sortRecs(got)); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	mu.Lock()
	defer mu.Unlock()
	if counts[0] != 2 {
		t.Errorf("the first live marks counted %d partitions, want 2", counts[0])
	}
	for i, ps := range marked {
		if !slices.Equal(ps, []int32{0}) {
			t.Fatalf("live marks %d are of partitions %v, want [0]", i, ps)
		}
	}
}
