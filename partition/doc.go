// Package partition owns the producers' partitioners: given a record's
// serialized key and a topic's partition count, the partition a producer
// configured with that partitioner writes the record to, computed exactly
// as the producer computes it. It is the first building block of sharding
// a table by partition (issue 25): a shard that holds some partitions can
// answer which one a key lives in only if it hashes as the producers did.
//
// A table's partitioner is configured, never guessed: the same key goes to
// different partitions under different partitioners, and nothing in a
// record says which one placed it.
//
// # The partitioners
//
//   - [Murmur2]: Kafka's Java producer (Utils.murmur2 of the key, the sign
//     bit masked, modulo the count: BuiltInPartitioner.partitionForKey),
//     franz-go (its default UniformBytesPartitioner and
//     StickyKeyPartitioner(nil) hash keys with the same murmur2 and mask)
//     and librdkafka's "murmur2_random" and "murmur2" (rd_murmur2 & 0x7fffffff,
//     unsigned modulo).
//   - [Consistent]: librdkafka's default, "consistent_random", and
//     "consistent": the CRC-32 (IEEE) of the key, unsigned modulo the count.
//   - [FNV1a]: librdkafka's "fnv1a_random" and "fnv1a": 32-bit FNV-1a of the
//     key taken as an int32, negated when negative (to match Sarama's
//     default hash partitioner), as an unsigned value modulo the count.
//
// # Null and empty keys
//
// Producers hash the serialized key bytes; a null key (no key at all, a nil
// slice here) is not a key. The Java producer and franz-go give keyless
// records to their sticky partitioner (a random partition, kept for a
// batch); so do librdkafka's "_random" partitioners, the default among
// them (rd_kafka_msg_partitioner sends a NULL key to
// rd_kafka_msg_sticky_partition). librdkafka's plain "murmur2",
// "consistent" and "fnv1a" are the exception: rd_kafka_topic.c marks them
// so that the sticky partitioner is skipped, and the NULL key is hashed as
// zero bytes, landing where the empty key lands ("NULL keys are mapped to
// single partition", CONFIGURATION.md). Which one a producer used is not
// in the record, so a null key has no partition here:
// [Partitioner.Partition] refuses it ([ErrNoPartition]); a caller that
// knows its producers use a plain setting asks for the empty key instead.
//
// An empty key (zero bytes, not null) is hashed by the Java producer,
// franz-go and librdkafka's murmur2 and fnv1a partitioners like any other
// key (confluent-kafka-go passes an empty non-nil []byte as a non-NULL
// pointer of length 0). librdkafka's consistent_random, the default,
// treats an empty key as it treats a null one (sticky, random), while plain
// "consistent" puts it on partition 0 (the CRC-32 of nothing is 0). The
// two cannot be told apart from the records, so [Consistent] refuses an
// empty key too ([ErrNoPartition]).
//
// producers_test.go checks all of this against the producers themselves.
package partition
