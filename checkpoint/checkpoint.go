package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// End marks: which end of each partition a rebuild read to.
const (
	// EndHigh: the high watermark captured at the start.
	EndHigh = "high"
	// EndStable: the last stable offset captured at the start.
	EndStable = "stable"
)

// Bucket is the root of every table's checkpoint: one nested bucket per
// table, named after it (the layout is in the package doc). Package store
// creates it when it opens a file, lists it in its file layout
// (store.BucketCheckpoints is this name) and checks that each table has
// one; everything inside is this package's.
var Bucket = []byte("checkpoints")

// On-disk names inside a table's checkpoint bucket (see the package doc).
var (
	keyTopic         = []byte("topic")
	keyEndMark       = []byte("end_mark")
	bucketPartitions = []byte("partitions")
	// keyCapturedAt and keyUpdates are absent in checkpoints saved before
	// they existed: Load reads them as zero (unknown age, no update).
	keyCapturedAt = []byte("captured_at")
	keyUpdates    = []byte("updates")
	// keyTopicID is absent in checkpoints saved before it existed, by a
	// build that does not know it (an older build's update rewrites the
	// checkpoint without it), and when the broker reported no topic ID:
	// Load reads it as the zero ID (unknown).
	keyTopicID = []byte("topic_id")
	// keyPartitionsOfTopic and keySubset are absent in checkpoints saved
	// before they existed (and, for keySubset, in those of a table over
	// all partitions): Load reads them as 0 (unknown) and false.
	keyPartitionsOfTopic = []byte("partitions_of_topic")
	keySubset            = []byte("subset")
)

const topicIDLen = 16 // a KIP-516 topic ID (a UUID)

const valueLen = 32 // four big-endian int64s

// ErrInvalid is returned by Save for a checkpoint that cannot be right
// (an empty table name or topic, an unknown end mark, a duplicate or negative
// partition, negative offsets, Start > End or End > High), and by Load for a
// stored checkpoint that does not decode.
var ErrInvalid = errors.New("invalid checkpoint")

// Partition is one partition's bounds and position.
type Partition struct {
	Partition int32 `json:"partition"`
	// Low is the partition's retained low offset captured at the start.
	Low int64 `json:"low"`
	// Start is the first offset the rebuild read from.
	Start int64 `json:"start"`
	// High is the end mark captured at the start (high watermark or LSO,
	// per Checkpoint.EndMark).
	High int64 `json:"high"`
	// End is the position reached; == High when the partition is complete.
	End int64 `json:"end"`
}

// Checkpoint is one table's positions for the generation it was published
// from.
type Checkpoint struct {
	Topic string
	// EndMark is EndHigh or EndStable.
	EndMark string
	// Partitions, sorted by partition number (Load returns them sorted;
	// Save accepts any order).
	Partitions []Partition
	// CapturedAt is when the end marks were captured (the start of the
	// rebuild or update that saved it); zero when unknown (an imported
	// checkpoint, or one saved before this field existed). An update of a
	// compacted topic compares it with delete.retention.ms.
	CapturedAt time.Time
	// Updates is how many updates followed the last full rebuild (0 after a
	// rebuild or an import).
	Updates int64
	// TopicID is the topic's ID (KIP-516) when the positions were read,
	// so that a topic deleted and created again under the same name is
	// told from the one the table was read from. The zero ID is unknown
	// (a broker or protocol without topic IDs, a checkpoint saved before
	// the field existed, an import): never saved, never a mismatch.
	TopicID [16]byte
	// PartitionsOfTopic is the topic's partition count when the marks
	// were captured; 0 when unknown (saved before the field existed, an
	// import). A shard's keys are where their hash says only while the
	// count stays this one (docs/shards.md).
	PartitionsOfTopic int32
	// Subset is true when Partitions are a configured subset of the
	// topic's (a shard's), not all it had.
	Subset bool
}

// Save replaces table's checkpoint with cp in tx, which must be writable.
// It does not commit: call it from store.Generation.Publish's hook.
func Save(tx *bolt.Tx, table string, cp Checkpoint) error {
	if err := validate(table, cp); err != nil {
		return err
	}
	root, err := tx.CreateBucketIfNotExists(Bucket)
	if err != nil {
		return fmt.Errorf("save checkpoint of table %q: %w", table, err)
	}
	name := []byte(table)
	if err := root.DeleteBucket(name); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
		return fmt.Errorf("save checkpoint of table %q: replace: %w", table, err)
	}
	tb, err := root.CreateBucket(name)
	if err != nil {
		return fmt.Errorf("save checkpoint of table %q: %w", table, err)
	}
	if err := tb.Put(keyTopic, []byte(cp.Topic)); err != nil {
		return fmt.Errorf("save checkpoint of table %q: %w", table, err)
	}
	if err := tb.Put(keyEndMark, []byte(cp.EndMark)); err != nil {
		return fmt.Errorf("save checkpoint of table %q: %w", table, err)
	}
	if !cp.CapturedAt.IsZero() {
		v := binary.BigEndian.AppendUint64(nil, uint64(cp.CapturedAt.UnixNano()))
		if err := tb.Put(keyCapturedAt, v); err != nil {
			return fmt.Errorf("save checkpoint of table %q: %w", table, err)
		}
	}
	if cp.Updates > 0 {
		if err := tb.Put(keyUpdates, binary.BigEndian.AppendUint64(nil, uint64(cp.Updates))); err != nil {
			return fmt.Errorf("save checkpoint of table %q: %w", table, err)
		}
	}
	if cp.TopicID != ([topicIDLen]byte{}) {
		id := cp.TopicID // bbolt keeps the slice until the transaction ends
		if err := tb.Put(keyTopicID, id[:]); err != nil {
			return fmt.Errorf("save checkpoint of table %q: %w", table, err)
		}
	}
	if cp.PartitionsOfTopic > 0 {
		if err := tb.Put(keyPartitionsOfTopic, binary.BigEndian.AppendUint32(nil, uint32(cp.PartitionsOfTopic))); err != nil {
			return fmt.Errorf("save checkpoint of table %q: %w", table, err)
		}
	}
	if cp.Subset {
		if err := tb.Put(keySubset, []byte{1}); err != nil {
			return fmt.Errorf("save checkpoint of table %q: %w", table, err)
		}
	}
	pb, err := tb.CreateBucket(bucketPartitions)
	if err != nil {
		return fmt.Errorf("save checkpoint of table %q: %w", table, err)
	}
	// One backing array for all keys and values: bbolt keeps value slices
	// until the transaction ends, so they must not be reused.
	buf := make([]byte, len(cp.Partitions)*(4+valueLen))
	for i, p := range cp.Partitions {
		rec := buf[i*(4+valueLen) : (i+1)*(4+valueLen)]
		k, v := rec[:4:4], rec[4:]
		binary.BigEndian.PutUint32(k, uint32(p.Partition))
		binary.BigEndian.PutUint64(v[0:], uint64(p.Low))
		binary.BigEndian.PutUint64(v[8:], uint64(p.Start))
		binary.BigEndian.PutUint64(v[16:], uint64(p.High))
		binary.BigEndian.PutUint64(v[24:], uint64(p.End))
		if err := pb.Put(k, v); err != nil {
			return fmt.Errorf("save checkpoint of table %q: partition %d: %w", table, p.Partition, err)
		}
	}
	return nil
}

func validate(table string, cp Checkpoint) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("save checkpoint of table %q: %s: %w", table, fmt.Sprintf(format, args...), ErrInvalid)
	}
	if table == "" {
		return bad("empty table name")
	}
	if cp.Topic == "" {
		return bad("empty topic")
	}
	if cp.EndMark != EndHigh && cp.EndMark != EndStable {
		return bad("end mark %q is neither %q nor %q", cp.EndMark, EndHigh, EndStable)
	}
	if cp.Updates < 0 {
		return bad("negative update count %d", cp.Updates)
	}
	if cp.PartitionsOfTopic < 0 {
		return bad("negative partition count %d", cp.PartitionsOfTopic)
	}
	seen := make(map[int32]bool, len(cp.Partitions))
	for _, p := range cp.Partitions {
		switch {
		case p.Partition < 0:
			return bad("negative partition %d", p.Partition)
		case seen[p.Partition]:
			return bad("partition %d listed twice", p.Partition)
		case p.Low < 0 || p.Start < 0 || p.High < 0 || p.End < 0:
			return bad("partition %d: negative offset (low %d, start %d, high %d, end %d)",
				p.Partition, p.Low, p.Start, p.High, p.End)
		case p.Start > p.End:
			return bad("partition %d: start %d is past end %d", p.Partition, p.Start, p.End)
		case p.End > p.High:
			return bad("partition %d: end %d is past high %d", p.Partition, p.End, p.High)
		}
		seen[p.Partition] = true
	}
	return nil
}

// Load returns table's checkpoint as of tx; ok is false (and err nil) if the
// table has none.
func Load(tx *bolt.Tx, table string) (cp Checkpoint, ok bool, err error) {
	root := tx.Bucket(Bucket)
	if root == nil {
		return Checkpoint{}, false, nil
	}
	tb := root.Bucket([]byte(table))
	if tb == nil {
		return Checkpoint{}, false, nil
	}
	return decode(tb, table)
}

// decode reads a table's checkpoint bucket.
func decode(tb *bolt.Bucket, table string) (cp Checkpoint, ok bool, err error) {
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("load checkpoint of table %q: %s: %w", table, fmt.Sprintf(format, args...), ErrInvalid)
	}
	cp.Topic = string(tb.Get(keyTopic))
	cp.EndMark = string(tb.Get(keyEndMark))
	if v := tb.Get(keyCapturedAt); v != nil {
		if len(v) != 8 {
			return Checkpoint{}, false, corrupt("captured_at has %d bytes, want 8", len(v))
		}
		cp.CapturedAt = time.Unix(0, int64(binary.BigEndian.Uint64(v))).UTC()
	}
	if v := tb.Get(keyUpdates); v != nil {
		if len(v) != 8 {
			return Checkpoint{}, false, corrupt("updates has %d bytes, want 8", len(v))
		}
		cp.Updates = int64(binary.BigEndian.Uint64(v))
	}
	if v := tb.Get(keyTopicID); v != nil {
		if len(v) != topicIDLen {
			return Checkpoint{}, false, corrupt("topic_id has %d bytes, want %d", len(v), topicIDLen)
		}
		copy(cp.TopicID[:], v)
	}
	if v := tb.Get(keyPartitionsOfTopic); v != nil {
		if len(v) != 4 || int32(binary.BigEndian.Uint32(v)) < 0 {
			return Checkpoint{}, false, corrupt("partitions_of_topic is %x, want a 4-byte count", v)
		}
		cp.PartitionsOfTopic = int32(binary.BigEndian.Uint32(v))
	}
	if v := tb.Get(keySubset); v != nil {
		if len(v) != 1 || v[0] != 1 {
			return Checkpoint{}, false, corrupt("subset is %x, want 01", v)
		}
		cp.Subset = true
	}
	pb := tb.Bucket(bucketPartitions)
	if pb == nil {
		return Checkpoint{}, false, corrupt("no partitions bucket")
	}
	err = pb.ForEach(func(k, v []byte) error {
		if len(k) != 4 || len(v) != valueLen {
			return corrupt("entry %x has %d-byte key and %d-byte value", k, len(k), len(v))
		}
		cp.Partitions = append(cp.Partitions, Partition{
			Partition: int32(binary.BigEndian.Uint32(k)),
			Low:       int64(binary.BigEndian.Uint64(v[0:])),
			Start:     int64(binary.BigEndian.Uint64(v[8:])),
			High:      int64(binary.BigEndian.Uint64(v[16:])),
			End:       int64(binary.BigEndian.Uint64(v[24:])),
		})
		return nil
	})
	if err != nil {
		return Checkpoint{}, false, err
	}
	// Keys are big-endian and Save rejects negative partitions, so bbolt's
	// order is already numeric; sort anyway so a hand-edited file cannot
	// break the promise.
	slices.SortFunc(cp.Partitions, func(a, b Partition) int { return int(a.Partition) - int(b.Partition) })
	return cp, true, nil
}

// Delete removes table's checkpoint in tx; a table without one is not an
// error.
func Delete(tx *bolt.Tx, table string) error {
	root := tx.Bucket(Bucket)
	if root == nil {
		return nil
	}
	err := root.DeleteBucket([]byte(table))
	if err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
		return fmt.Errorf("delete checkpoint of table %q: %w", table, err)
	}
	return nil
}

// Validate reports (wrapping ErrInvalid) what Save would refuse in cp, for a
// caller that checks a checkpoint from elsewhere (an imported document)
// before it starts work.
func Validate(table string, cp Checkpoint) error { return validate(table, cp) }
