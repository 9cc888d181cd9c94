package partition

import (
	"errors"
	"hash/crc32"
	"hash/fnv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The vectors below are copied from the upstream sources' own tests:
//   - apache/kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2
//   - confluentinc/librdkafka src/rdmurmur2.c, unittest_murmur2 (Java's results)
//   - confluentinc/librdkafka src/rdfnv1a.c, unittest_fnv1a (Go's hash/fnv, made positive)
//   - confluentinc/librdkafka tests/0048-partitioner.c, do_test_partitioners
//     (the partition each partitioner must choose, 7 and 17 partitions)

func TestPartitionKafkaMurmur2Vectors(t *testing.T) {
	for key, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	} {
		if got := int32(murmur2([]byte(key))); got != want {
			t.Errorf("murmur2(%q) = %d, want %d (Kafka's UtilsTest)", key, got, want)
		}
	}
}

// librdkafka's unittest keys: the pointer offsets of its unaligned cases
// are substrings here.
var rdkafkaKeys = []string{
	"kafka",
	"giberish123456789",
	"1234", "234", "34", "4",
	"PreAmbleWillBeRemoved,ThePrePartThatIs",
	"reAmbleWillBeRemoved,ThePrePartThatIs",
	"eAmbleWillBeRemoved,ThePrePartThatIs",
	"AmbleWillBeRemoved,ThePrePartThatIs",
	"",
}

func TestPartitionLibrdkafkaMurmur2Vectors(t *testing.T) {
	want := []uint32{0xd067cf64, 0x8f552b0c, 0x9fc97b14, 0xe7c009ca, 0x873930da, 0x5a4b5ca1,
		0x78424f1c, 0x4a62b377, 0xe0e4e09e, 0x62b8b43f, 0x106e08d9}
	for i, key := range rdkafkaKeys {
		if got := murmur2([]byte(key)); got != want[i] {
			t.Errorf("murmur2(%q) = %#x, want %#x (librdkafka's unittest_murmur2)", key, got, want[i])
		}
	}
}

func TestPartitionLibrdkafkaFNV1aVectors(t *testing.T) {
	want := []uint32{0xd33c4e1, 0x77a58295, 0x23bdd03, 0x2dea3cd2, 0x740fa83e, 0x310ca263,
		0x65cbd69c, 0x6e49c79a, 0x69eed356, 0x6abcc023, 0x7ee3623b}
	for i, key := range rdkafkaKeys {
		if got := fnv1a([]byte(key)); got != want[i] {
			t.Errorf("fnv1a(%q) = %#x, want %#x (librdkafka's unittest_fnv1a)", key, got, want[i])
		}
	}
}

// TestPartitionLibrdkafkaPartitionerVectors is tests/0048-partitioner.c's
// table: the hash of each key, taken modulo the count, is the partition
// librdkafka's producer must choose. Its NULL key (random or sticky) has
// no row here; its empty key has one for murmur2 and fnv1a, and none for
// consistent (see the package doc).
func TestPartitionLibrdkafkaPartitionerVectors(t *testing.T) {
	keys := []string{"", "23456", "this is another string with more length to it perhaps", "hejsan"}
	hashes := map[Partitioner][]int64{
		Consistent: {-1, 0xb1b451d7, 0xb0150df7, 0xd077037e},
		Murmur2:    {0x106e08d9, 0x058d780f, 0x4f7703da, 0x5ec19395},
		FNV1a:      {0x7ee3623b, 0x27e6f469, 0x155e3e5f, 0x17b1e27a},
	}
	for _, n := range []int32{7, 17} {
		for p, hs := range hashes {
			for i, key := range keys {
				got, err := p.Partition([]byte(key), n)
				if hs[i] < 0 {
					if !errors.Is(err, ErrNoPartition) {
						t.Errorf("%s: Partition(%q, %d) = %d, %v; want ErrNoPartition", p, key, n, got, err)
					}
					continue
				}
				if want := int32(hs[i] % int64(n)); err != nil || got != want {
					t.Errorf("%s: Partition(%q, %d) = %d, %v; want %d (librdkafka's 0048-partitioner)", p, key, n, got, err, want)
				}
			}
		}
	}
}

// oracle is the partition the other implementations choose: franz-go's
// own Java-compatible murmur2 partitioner, and franz-go's Sarama hashers
// over the standard library's hashes (Sarama's arithmetic: the sign
// handled after the modulo, where librdkafka handles it before; they
// agree). ok is false where the producers choose no partition.
func oracle(p Partitioner, key []byte, n int32) (part int32, ok bool) {
	if key == nil || n < 1 {
		return 0, false
	}
	var h kgo.PartitionerHasher
	switch p {
	case Murmur2:
		r := &kgo.Record{Key: key}
		return int32(kgo.StickyKeyPartitioner(nil).ForTopic("t").Partition(r, int(n))), true
	case Consistent:
		if len(key) == 0 {
			return 0, false
		}
		// Unsigned modulo, as in librdkafka: on a 64-bit int,
		// SaramaHasher's int(uint32) is never negative.
		c := crc32.ChecksumIEEE(key)
		return int32(uint64(c) % uint64(n)), true
	case FNV1a:
		h = kgo.SaramaCompatHasher(func(b []byte) uint32 {
			f := fnv.New32a()
			f.Write(b)
			return f.Sum32()
		})
		return int32(h(key, int(n))), true
	}
	return 0, false
}

func TestPartitionAgreesWithOracle(t *testing.T) {
	keys := [][]byte{{}, {0}, {0xff}, {0x80, 0, 0, 0}, []byte("acct-1"), []byte(strings.Repeat("k", 1000))}
	for i := 0; i < 2000; i++ {
		keys = append(keys, []byte{byte(i), byte(i >> 3), byte(i * 7), byte(i >> 8), byte(i * 13)}[:i%6])
	}
	for _, p := range All {
		for _, n := range []int32{1, 2, 3, 7, 16, 100, 1 << 20, 1<<31 - 1} {
			for _, key := range keys {
				want, ok := oracle(p, key, n)
				got, err := p.Partition(key, n)
				if !ok {
					if !errors.Is(err, ErrNoPartition) {
						t.Fatalf("%s: Partition(%x, %d) = %d, %v; want ErrNoPartition", p, key, n, got, err)
					}
					continue
				}
				if err != nil || got != want {
					t.Fatalf("%s: Partition(%x, %d) = %d, %v; want %d", p, key, n, got, err, want)
				}
			}
		}
	}
}

// The FNV-1a hash whose int32 is math.MinInt32 stays 0x80000000 (C's
// negation wraps it, as Go's does). The key was found by inverting FNV-1a's
// last step (its prime is odd, so invertible modulo 2^32) over a search of
// 4-byte prefixes; hash/fnv checks it here.
func TestPartitionFNV1aMinInt32(t *testing.T) {
	key := []byte{0x0e, 0x9c, 0x45, 0x01, 0x15}
	f := fnv.New32a()
	f.Write(key)
	if f.Sum32() != 0x80000000 {
		t.Fatalf("FNV-1a(%x) = %#x: the fixture is wrong", key, f.Sum32())
	}
	if got := fnv1a(key); got != 0x80000000 {
		t.Fatalf("fnv1a(%x) = %#x, want 0x80000000", key, got)
	}
	for _, n := range []int32{3, 7, 1000} {
		want, _ := oracle(FNV1a, key, n)
		if got, err := FNV1a.Partition(key, n); err != nil || got != want || got != int32(uint32(0x80000000)%uint32(n)) {
			t.Errorf("Partition(%x, %d) = %d, %v; want %d", key, n, got, err, want)
		}
	}
}

func TestPartitionRefusals(t *testing.T) {
	for _, p := range All {
		if _, err := p.Partition(nil, 7); !errors.Is(err, ErrNoPartition) || !strings.Contains(err.Error(), "null key") {
			t.Errorf("%s: a nil key: %v", p, err)
		}
		for _, n := range []int32{0, -1, -1 << 31} {
			if _, err := p.Partition([]byte("k"), n); !errors.Is(err, ErrBadPartitionCount) {
				t.Errorf("%s: %d partitions: %v", p, n, err)
			}
		}
	}
	for _, p := range []Partitioner{"", "random", "Murmur2"} {
		if _, err := p.Partition([]byte("k"), 7); !errors.Is(err, ErrUnknownPartitioner) {
			t.Errorf("%q: %v", p, err)
		}
	}
}

func TestPartitionParse(t *testing.T) {
	for in, want := range map[string]Partitioner{
		"murmur2": Murmur2, "murmur2_random": Murmur2,
		"consistent": Consistent, "consistent_random": Consistent,
		"fnv1a": FNV1a, "fnv1a_random": FNV1a,
	} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "random", "MURMUR2", "murmur3", " murmur2", "crc32"} {
		_, err := Parse(in)
		if !errors.Is(err, ErrUnknownPartitioner) || !strings.Contains(err.Error(), "murmur2, consistent, fnv1a") {
			t.Errorf("Parse(%q): %v", in, err)
		}
	}
}

// FuzzPartition: Partition never panics; with a key and a positive count
// it answers a partition in [0, n), the same on every call and the
// oracle's; otherwise it refuses with the error the case calls for.
func FuzzPartition(f *testing.F) {
	for _, k := range rdkafkaKeys {
		f.Add([]byte(k), false, int32(7), uint8(0))
	}
	f.Add([]byte(nil), true, int32(7), uint8(1))
	f.Add([]byte{0xff, 0xfe}, false, int32(-3), uint8(2))
	f.Add([]byte{0x80}, false, int32(1<<31-1), uint8(3))
	f.Fuzz(func(t *testing.T, key []byte, null bool, n int32, which uint8) {
		if null {
			key = nil
		} else if key == nil {
			key = []byte{}
		}
		p := Partitioner("random")
		if int(which) < len(All) {
			p = All[which]
		} else if which%2 == 0 {
			p = All[int(which)%len(All)]
		}
		got, err := p.Partition(key, n)
		switch want, ok := oracle(p, key, n); {
		case n < 1:
			if !errors.Is(err, ErrBadPartitionCount) {
				t.Fatalf("%s with %d partitions: %d, %v", p, n, got, err)
			}
		case p == "random":
			if !errors.Is(err, ErrUnknownPartitioner) && !errors.Is(err, ErrNoPartition) {
				t.Fatalf("unknown partitioner: %d, %v", got, err)
			}
		case !ok:
			if !errors.Is(err, ErrNoPartition) {
				t.Fatalf("%s: Partition(%x, %d) = %d, %v; want ErrNoPartition", p, key, n, got, err)
			}
		default:
			if err != nil || got < 0 || got >= n || got != want {
				t.Fatalf("%s: Partition(%x, %d) = %d, %v; want %d", p, key, n, got, err, want)
			}
			if again, err := p.Partition(key, n); err != nil || again != got {
				t.Fatalf("%s: Partition(%x, %d) again = %d, %v; first %d", p, key, n, again, err, got)
			}
		}
	})
}
