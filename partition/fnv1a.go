package partition

import "hash/fnv"

// fnv1a is librdkafka's rd_fnv1a: the 32-bit FNV-1a hash taken as an
// int32 and negated when negative, "to match the Sarama
// NewHashPartitioner", then returned as a uint32 that the partitioner
// takes modulo the count. The negation of math.MinInt32 wraps to itself
// in C (two's complement) as in Go, so that hash stays 0x80000000.
func fnv1a(b []byte) uint32 {
	f := fnv.New32a()
	f.Write(b) // a hash.Hash never returns an error
	h := int32(f.Sum32())
	if h < 0 {
		h = -h
	}
	return uint32(h)
}
