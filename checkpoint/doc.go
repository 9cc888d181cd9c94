// Package checkpoint owns each table's per-partition replay positions and
// bounds, kept in their own bucket and written in the same bbolt transaction
// as the publish of the table they describe.
//
// # Basics
//
// A Checkpoint records, for the generation a table was last published from,
// the topic, the end mark used ("high" or "stable"), and for every partition
// the retained low and the high mark captured at the start, the first offset
// read and the position reached. A later rebuild can start from it.
//
// Save, Load and Delete take a *bolt.Tx, never open their own: call Save from
// the hook of store.Generation.Publish so that rows and positions commit
// together, and Load inside store.DB.View for a view consistent with the
// table.
//
// # Format
//
// Under Bucket ("checkpoints", store.BucketCheckpoints), each table has a
// nested bucket named after the table, holding:
//
//	topic        -> the topic name (UTF-8)
//	end_mark     -> "high" or "stable"
//	captured_at  -> when the end marks were captured: Unix nanoseconds,
//	                big-endian int64; absent when unknown (imported)
//	updates      -> updates since the last full rebuild, big-endian
//	                int64; absent for 0
//	topic_id     -> the topic's ID (KIP-516) when the positions were
//	                read: 16 bytes, the UUID's most significant 8 first;
//	                absent when unknown (a broker without topic IDs, an
//	                import, a checkpoint saved before it existed)
//	partitions_of_topic -> the topic's partition count when the marks
//	                were captured: big-endian uint32; absent when unknown
//	subset       -> 0x01 when partitions/ are a configured subset of the
//	                topic's (a shard); absent for a table over all
//	partitions/  -> 4-byte big-endian partition number ->
//	                32 bytes: Low, Start, High, End, each a big-endian int64
//
// Keys sort by partition number for the partitions that exist (>= 0).
//
// A kept generation (store.Generation.Keep) holds a copy of its table's
// bucket, as it was while the generation was published, under KeptBucket
// ("checkpoint") in the generation's bucket. Keep writes it, Restore puts
// it back as the table's checkpoint on a rollback, Drop removes it, LoadKept
// reads it; store finds the generation's bucket and calls them in its
// transaction. This package imports none of ours, so that store can: the
// layout, the kept copy's included, has one owner.
//
// topic_id, partitions_of_topic and subset were added without a format
// version bump: a build that does not
// know it ignores it, and its update, which rewrites the checkpoint, drops
// it; the next publish by a build that knows it records it again.
//
// # Caveats
//
// Save replaces a table's checkpoint entirely: a partition absent from the
// new checkpoint is gone. Nothing here talks to Kafka; whether a checkpoint
// still fits the topic (partition count, retained low) is for the caller.
package checkpoint
