package materialize

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
)

// ErrCheckpointMoved is returned (as a *CheckpointMovedError) when a
// writer of a published table (an update, a follower) is about to commit
// records it read from the table's checkpoint, and the checkpoint is no
// longer that one: another update, follower or rebuild committed
// meanwhile. Committing on top would apply records twice, or move the
// positions back. Nothing is committed; the writer can start again from
// the stored checkpoint (an update is run again, a follower follows again).
var ErrCheckpointMoved = errors.New("the table's checkpoint moved")

// Writers named by a CheckpointMovedError.
const (
	writerUpdate   = "update"
	writerFollower = "follower"
)

// CheckpointMovedError names the table, the writer refused, the positions
// it read from and those stored now. It matches ErrCheckpointMoved.
type CheckpointMovedError struct {
	Table  string
	Writer string // "update" or "follower"
	// Read is the checkpoint the writer read its records from.
	Read checkpoint.Checkpoint
	// Stored is the table's checkpoint now; Found is false when it has
	// none.
	Stored checkpoint.Checkpoint
	Found  bool
}

// Error returns e.g. `table "votes": the follower read from checkpoint
// [0:120 1:80], but the table's checkpoint is now [0:135 1:80] (another
// update, follower or rebuild committed meanwhile): nothing was committed`.
func (e *CheckpointMovedError) Error() string {
	now := "gone"
	if e.Found {
		now = "now " + positionsText(e.Stored)
	}
	return fmt.Sprintf("table %q: the %s read from checkpoint %s, but the table's checkpoint is %s "+
		"(another update, follower or rebuild committed meanwhile): nothing was committed: %v",
		e.Table, e.Writer, positionsText(e.Read), now, ErrCheckpointMoved)
}

// Is reports whether target is ErrCheckpointMoved.
func (e *CheckpointMovedError) Is(target error) bool { return target == ErrCheckpointMoved }

// positionsText is cp's end per partition, as [p:end ...].
func positionsText(cp checkpoint.Checkpoint) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, p := range cp.Partitions {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(int(p.Partition)))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(p.End, 10))
	}
	b.WriteByte(']')
	return b.String()
}

// saveCheckpointFrom saves next as table's checkpoint in tx, the
// transaction that commits the rows next describes, if the stored
// checkpoint is still from, the one the writer read those rows' records
// from; otherwise it saves nothing and returns a *CheckpointMovedError, and
// the caller's transaction must roll back.
//
// Every writer that changes a published table from its checkpoint (an
// update's publish, a follower's apply) commits through it: of two writers
// that read the same checkpoint only the first commits, so no record is
// applied twice and no position goes back. A rebuild does not: it replaces
// the generation (store.ErrGenerationChanged tells the others).
func saveCheckpointFrom(tx *bolt.Tx, table, writer string, from, next checkpoint.Checkpoint) error {
	now, ok, err := checkpoint.Load(tx, table)
	if err != nil {
		return err
	}
	if !ok || !sameCheckpoint(now, from) {
		return &CheckpointMovedError{Table: table, Writer: writer, Read: from, Stored: now, Found: ok}
	}
	return checkpoint.Save(tx, table, next)
}

// sameCheckpoint reports whether a and b record the same positions.
func sameCheckpoint(a, b checkpoint.Checkpoint) bool {
	if a.Topic != b.Topic || a.TopicID != b.TopicID || a.EndMark != b.EndMark || !a.CapturedAt.Equal(b.CapturedAt) || a.Updates != b.Updates ||
		len(a.Partitions) != len(b.Partitions) {
		return false
	}
	for i := range a.Partitions {
		if a.Partitions[i] != b.Partitions[i] {
			return false
		}
	}
	return true
}
