package partition

import (
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
)

// Partitioner names how producers place a keyed record. The zero value is
// no partitioner: its Partition refuses every key.
type Partitioner string

// The partitioners (see the package doc for which producers use which).
const (
	Murmur2    Partitioner = "murmur2"
	Consistent Partitioner = "consistent"
	FNV1a      Partitioner = "fnv1a"
)

// All are the partitioners, in the order the messages list them.
var All = []Partitioner{Murmur2, Consistent, FNV1a}

// Errors, each returned (wrapped, with the detail) when:
var (
	// ErrUnknownPartitioner: Parse was given a name that is none of All
	// (or their librdkafka names), or Partition was called on one.
	ErrUnknownPartitioner = errors.New("unknown partitioner")
	// ErrNoPartition: the key is one producers do not hash (a null key;
	// an empty key under Consistent), so it has no partition of its own.
	ErrNoPartition = errors.New("the key has no partition")
	// ErrBadPartitionCount: the partition count is not positive.
	ErrBadPartitionCount = errors.New("the partition count must be at least 1")
)

// librdkafka's names for the same placement of keyed records: the
// "_random" variants differ only in what they do with null keys (and, for
// consistent_random, empty keys), which have no partition here anyway.
var aliases = map[string]Partitioner{
	"murmur2_random":    Murmur2,
	"consistent_random": Consistent,
	"fnv1a_random":      FNV1a,
}

// Names is the list of valid names, for messages and help texts:
// "murmur2, consistent, fnv1a".
func Names() string {
	s := make([]string, len(All))
	for i, p := range All {
		s[i] = string(p)
	}
	return strings.Join(s, ", ")
}

// Parse returns the partitioner named s: one of Names, or librdkafka's
// "murmur2_random", "consistent_random" or "fnv1a_random" (which place
// every key with a partition as their plain names do). Any other name,
// "random" and the empty name included, is refused with
// ErrUnknownPartitioner.
func Parse(s string) (Partitioner, error) {
	for _, p := range All {
		if s == string(p) {
			return p, nil
		}
	}
	if p, ok := aliases[s]; ok {
		return p, nil
	}
	why := ""
	if s == "random" {
		why = ": librdkafka's random partitioner ignores the key, so a key has no partition"
	}
	return "", fmt.Errorf("%w %q%s (valid: %s, or librdkafka's murmur2_random, consistent_random, fnv1a_random)", ErrUnknownPartitioner, s, why, Names())
}

// String is the partitioner's name.
func (p Partitioner) String() string { return string(p) }

// Partition returns the partition in [0, partitions) that a producer
// using p writes a record with key to. key is the serialized key, as the
// producer sends it; nil is a null key and is refused (ErrNoPartition), as
// is an empty key under Consistent (see the package doc).
func (p Partitioner) Partition(key []byte, partitions int32) (int32, error) {
	if partitions < 1 {
		return 0, fmt.Errorf("%w: %d", ErrBadPartitionCount, partitions)
	}
	if key == nil {
		return 0, fmt.Errorf("%w: a null key is not hashed by the producers' defaults, which spread keyless records (librdkafka's plain murmur2, consistent and fnv1a put it where the empty key goes)", ErrNoPartition)
	}
	n := uint32(partitions)
	switch p {
	case Murmur2:
		// Java: Utils.toPositive(Utils.murmur2(key)) % n, the mask
		// leaving a non-negative int; librdkafka masks the same bit of
		// its uint32 and takes the unsigned modulo, the same number.
		return int32((murmur2(key) & 0x7fffffff) % n), nil
	case Consistent:
		if len(key) == 0 {
			return 0, fmt.Errorf("%w: librdkafka's consistent_random spreads empty keys as it spreads null keys (plain consistent puts them on partition 0)", ErrNoPartition)
		}
		// rd_crc32(key) % partition_cnt: a uint32 modulo an int32 is
		// unsigned in C, so a hash with the high bit set stays positive.
		return int32(crc32.ChecksumIEEE(key) % n), nil
	case FNV1a:
		return int32(fnv1a(key) % n), nil
	}
	return 0, fmt.Errorf("%w %q (valid: %s)", ErrUnknownPartitioner, string(p), Names())
}
