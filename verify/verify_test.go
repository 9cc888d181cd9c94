package verify_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/verify"
)

var broker *localkafka.Broker

// TestMain runs the package's tests on a kfake of the process's own, or on
// the real Kafka that KMATERIALIZE_TEST_KAFKA names (scripts/test-kafka).
func TestMain(m *testing.M) { os.Exit(localkafka.RunTests(m, &broker)) }

var topicSeq atomic.Int64

// newTopic creates a topic of its own for this run of the test.
func newTopic(t *testing.T, what string, partitions int32) string {
	t.Helper()
	name := fmt.Sprintf("verify-%s-%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "."), what, os.Getpid(), topicSeq.Add(1))
	broker.TestTopic(t, name, partitions, nil)
	return name
}

// rec is one record as the test writes it and as its oracle sees it. An
// identity (key, value, headers) always goes to one partition of a topic
// (partitionOf), so that its first position, which orders the report's
// examples, does not depend on how the reads of partitions interleave.
type rec struct {
	key, value []byte
	headers    []kgo.RecordHeader
	pos        verify.Position // filled by produce
}

func partitionOf(r rec, partitions int32) int32 {
	if r.key == nil {
		return 0
	}
	h := fnv.New32a()
	h.Write(r.key)
	return int32(h.Sum32() % uint32(partitions))
}

// produce writes recs to topic, each to partitionOf, and records where each
// landed.
func produce(t *testing.T, topic string, partitions int32, recs []rec) {
	t.Helper()
	cl, err := broker.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	krs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		krs[i] = &kgo.Record{Topic: topic, Partition: partitionOf(r, partitions), Key: r.key, Value: r.value, Headers: r.headers}
	}
	if err := cl.ProduceSync(context.Background(), krs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
	for i, kr := range krs {
		recs[i].pos = verify.Position{Partition: kr.Partition, Offset: kr.Offset}
	}
}

// generate returns n source records: keys and values from small sets (so
// that some records repeat exactly), a few null keys and values, headers
// on some, a few values over the examples' 64 bytes and a few not UTF-8.
func generate(rng *rand.Rand, n int) []rec {
	out := make([]rec, 0, n)
	for range n {
		var r rec
		if rng.IntN(20) != 0 {
			r.key = fmt.Appendf(nil, "k%02d", rng.IntN(30))
		}
		switch x := rng.IntN(40); {
		case x == 0:
			// a tombstone: nil value
		case x == 1:
			r.value = bytes.Repeat([]byte{'L'}, 64+rng.IntN(3)*40)
		case x == 2:
			r.value = []byte{0xff, 0xfe, byte(rng.IntN(4))}
		default:
			r.value = fmt.Appendf(nil, "v%d", rng.IntN(8))
		}
		for range rng.IntN(3) {
			r.headers = append(r.headers, kgo.RecordHeader{Key: fmt.Sprintf("h%d", rng.IntN(2)), Value: fmt.Appendf(nil, "%d", rng.IntN(2))})
		}
		out = append(out, r)
	}
	return out
}

// copyOf is a destination made from src by a copier that lost some records,
// wrote some twice and changed a header of some (percentages): its records
// (in write order) without positions, and how many source records it lost
// (changed ones included) and how many records it added that are no source
// record's single copy (the second copies and the changed ones).
func copyOf(rng *rand.Rand, src []rec, lose, twice, change int) (dst []rec, lost, added int) {
	for _, r := range src {
		r.pos = verify.Position{}
		switch x := rng.IntN(100); {
		case x < lose:
			lost++
		case x < lose+twice:
			dst = append(dst, r, r)
			added++
		case x < lose+twice+change:
			r.headers = append(slices.Clone(r.headers), kgo.RecordHeader{Key: "changed", Value: []byte("by the copy")})
			dst = append(dst, r)
			lost++
			added++
		default:
			dst = append(dst, r)
		}
	}
	return dst, lost, added
}

// side is one identity's records on one side: how many, and where.
type side struct {
	n   int64
	pos []verify.Position
}

// identityOf is what makes two records the same, as text.
func identityOf(r rec, byValue bool) string {
	s := func(b []byte) string {
		if b == nil {
			return "null"
		}
		return fmt.Sprintf("%q", b)
	}
	if byValue {
		return s(r.value)
	}
	id := s(r.key) + " " + s(r.value)
	for _, h := range r.headers {
		id += fmt.Sprintf(" %q=%q", h.Key, h.Value)
	}
	return id
}

// expect is the oracle: the comparison written plainly, the records of both
// sides grouped by what makes them the same and counted, and the report Run
// must give for src and dst with at most examples examples of each kind.
func expect(from, to string, src, dst []rec, byValue bool, examples int) verify.Report {
	type entry struct {
		first    rec
		src, dst side
	}
	seen := map[string]*entry{}
	var order []string
	add := func(r rec, isSrc bool) {
		id := identityOf(r, byValue)
		e := seen[id]
		if e == nil {
			e = &entry{first: r}
			seen[id] = e
			order = append(order, id)
		}
		sd := &e.dst
		if isSrc {
			sd = &e.src
		}
		sd.n++
		sd.pos = append(sd.pos, r.pos)
	}
	for _, r := range src {
		add(r, true)
	}
	for _, r := range dst {
		add(r, false)
	}
	rep := verify.Report{From: from, To: to, By: "key,value,headers", SourceRecords: int64(len(src)), DestinationRecords: int64(len(dst)),
		MissingExamples: []verify.Example{}, DuplicatedExamples: []verify.Example{}}
	if byValue {
		rep.By = "value"
	}
	var missing, dups []*entry
	for _, id := range order {
		e := seen[id]
		switch {
		case e.src.n > e.dst.n:
			rep.Missing += e.src.n - e.dst.n
			missing = append(missing, e)
		case e.dst.n > e.src.n:
			rep.Duplicated += e.dst.n - e.src.n
			dups = append(dups, e)
		}
	}
	rep.OK = rep.Missing == 0 && rep.Duplicated == 0
	sortedPos := func(ps []verify.Position) []verify.Position {
		ps = slices.Clone(ps)
		slices.SortFunc(ps, func(a, b verify.Position) int {
			if a.Partition != b.Partition {
				return int(a.Partition - b.Partition)
			}
			return int(a.Offset - b.Offset)
		})
		if len(ps) > 3 {
			ps = ps[:3]
		}
		if ps == nil {
			ps = []verify.Position{}
		}
		return ps
	}
	pick := func(es []*entry, bySource bool) []verify.Example {
		first := func(e *entry) verify.Position {
			if bySource || len(e.dst.pos) == 0 {
				return sortedPos(e.src.pos)[0]
			}
			return sortedPos(e.dst.pos)[0]
		}
		slices.SortFunc(es, func(a, b *entry) int {
			pa, pb := first(a), first(b)
			if pa.Partition != pb.Partition {
				return int(pa.Partition - pb.Partition)
			}
			return int(pa.Offset - pb.Offset)
		})
		out := []verify.Example{}
		for _, e := range es[:min(len(es), examples)] {
			k, v := e.first.key, e.first.value
			cut := len(k) > 64 || len(v) > 64
			if len(k) > 64 {
				k = k[:64] // the generated keys and long values are ASCII
			}
			if len(v) > 64 {
				v = v[:64]
			}
			ex := verify.Example{Truncated: cut, Source: sortedPos(e.src.pos), Destination: sortedPos(e.dst.pos),
				SourceCount: e.src.n, DestCount: e.dst.n}
			text := func(b []byte, b64 bool) *string {
				if b == nil {
					return nil
				}
				s := string(b)
				if b64 {
					s = base64.StdEncoding.EncodeToString(b)
				}
				return &s
			}
			b64 := !utf8.Valid(k) || !utf8.Valid(v)
			if b64 {
				ex.Encoding = "base64"
			}
			ex.Key, ex.Value = text(k, b64), text(v, b64)
			out = append(out, ex)
		}
		return out
	}
	rep.MissingExamples = pick(missing, true)
	rep.DuplicatedExamples = pick(dups, false)
	return rep
}

func run(t *testing.T, from, to string, byValue bool, examples int) verify.Report {
	t.Helper()
	rep, err := verify.Run(context.Background(), verify.Config{Brokers: broker.Addr, From: from, To: to, ByValue: byValue,
		StallTimeout: 30 * time.Second, Examples: examples, Log: zerolog.Nop()})
	if err != nil {
		t.Fatalf("verify %s -> %s: %v", from, to, err)
	}
	return rep
}

// TestRunAgainstOracle checks Run's report against the plain comparison
// over the same generated records, for a faithful copy into a topic of
// another partition count and for copies that lost, doubled and changed
// records; by key, value and headers and by value only.
func TestRunAgainstOracle(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	cases := []struct {
		name                string
		lose, twice, change int
		byValue             bool
		examples            int
	}{
		{name: "faithful"},
		{name: "lost doubled changed", lose: 6, twice: 6, change: 4, examples: 4},
		{name: "by value", lose: 6, twice: 6, change: 4, byValue: true, examples: 1000},
		{name: "lost only", lose: 10, examples: 100},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			src := generate(rng, 400)
			dst, lost, added := copyOf(rng, src, tc.lose, tc.twice, tc.change)
			from, to := newTopic(t, "from", 3), newTopic(t, "to", 2)
			produce(t, from, 3, src)
			produce(t, to, 2, dst)
			// The damage happened: the copy lost and added records
			// where, and only where, the case asks for it.
			if (tc.lose+tc.change > 0) != (lost > 0) || (tc.twice+tc.change > 0) != (added > 0) {
				t.Fatalf("the copy lost %d and added %d records; the case asks for %d%% lost, %d%% doubled, %d%% changed", lost, added, tc.lose, tc.twice, tc.change)
			}
			got := run(t, from, to, tc.byValue, tc.examples)
			if tc.examples == 0 {
				tc.examples = 5 // Run's default
			}
			want := expect(from, to, src, dst, tc.byValue, tc.examples)
			if tc.byValue {
				// By value, an example's key is that of whichever record
				// of the value was read first, and its first position
				// depends on how partitions interleave: with every example
				// shown, compare the examples' counts only.
				for _, exs := range [][]verify.Example{got.MissingExamples, got.DuplicatedExamples, want.MissingExamples, want.DuplicatedExamples} {
					for i := range exs {
						exs[i] = verify.Example{SourceCount: exs[i].SourceCount, DestCount: exs[i].DestCount}
					}
				}
				sortCounts(got.MissingExamples, want.MissingExamples, got.DuplicatedExamples, want.DuplicatedExamples)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("report (-oracle +Run):\n%s", d)
			}
			if damaged := tc.lose+tc.twice+tc.change > 0; got.OK == damaged {
				t.Fatalf("report OK = %v for a copy damaged = %v", got.OK, damaged)
			}
		})
	}
}

// sortCounts orders examples reduced to their counts, for a comparison that
// does not depend on which examples were picked first.
func sortCounts(lists ...[]verify.Example) {
	for _, l := range lists {
		slices.SortFunc(l, func(a, b verify.Example) int {
			if a.SourceCount != b.SourceCount {
				return int(a.SourceCount - b.SourceCount)
			}
			return int(a.DestCount - b.DestCount)
		})
	}
}

// TestRunMissingTopic: a topic that does not exist ends the check with
// replay's typed error, naming the topic.
func TestRunMissingTopic(t *testing.T) {
	from := newTopic(t, "from", 1)
	produce(t, from, 1, []rec{{key: []byte("k"), value: []byte("v")}})
	to := fmt.Sprintf("verify-absent-%d-%d", os.Getpid(), topicSeq.Add(1))
	_, err := verify.Run(context.Background(), verify.Config{Brokers: broker.Addr, From: from, To: to,
		StallTimeout: 30 * time.Second, Log: zerolog.Nop()})
	if !errors.Is(err, replay.ErrTopicNotFound) {
		t.Fatalf("err = %v, want replay.ErrTopicNotFound", err)
	}
	if !strings.Contains(err.Error(), to) {
		t.Fatalf("err %q does not name the topic %s", err, to)
	}
}
