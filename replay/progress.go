package replay

import "time"

// PartitionState is where one partition's replay stands.
type PartitionState string

const (
	StateReading PartitionState = "reading"
	StateDone    PartitionState = "done"
	// StateWaiting: the consumer is at the last stable offset, below the
	// high mark, because a transaction is still open.
	StateWaiting PartitionState = "waiting"
)

// PartitionProgress is one partition's position against its end mark.
type PartitionProgress struct {
	Partition int32
	Start     int64
	Position  int64
	End       int64
	State     PartitionState
}

// Progress is a snapshot handed to Config.Progress.
type Progress struct {
	Topic      string
	Records    int64
	Elapsed    time.Duration
	Partitions []PartitionProgress
}
