package replay

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors, grouped by phase. Use errors.Is on an *Error.
var (
	// ErrUnavailable is returned when the cluster cannot be reached or does
	// not answer in time: metadata or ListOffsets failed with transient
	// errors for the whole stall timeout, or no broker answered during the
	// read; also when authorization fails.
	ErrUnavailable = errors.New("kafka unavailable")
	// ErrTopicNotFound is returned when metadata says the topic does not exist.
	ErrTopicNotFound = errors.New("topic not found")
	// ErrTopicDeleted is returned (with ErrTopicNotFound) when the topic
	// was deleted while the replay read it.
	ErrTopicDeleted = errors.New("topic deleted during the replay")
	// ErrBadStart is returned when a requested start cannot be honoured: an
	// offset above the high mark, or a partition the topic does not have.
	ErrBadStart = errors.New("bad start position")
	// ErrBadEnd is returned when a requested end (Config.Until) cannot be
	// honoured: an offset above the high mark or below the start asked for,
	// a partition the topic does not have, or offsets and a timestamp given
	// together.
	ErrBadEnd = errors.New("bad end position")
	// ErrStalled is returned when no partition made progress within the
	// stall timeout before every partition reached its end.
	ErrStalled = errors.New("replay stalled")
	// ErrOpenTransaction is returned (with ErrStalled) when the stall is an
	// open transaction holding the last stable offset below the high mark.
	ErrOpenTransaction = errors.New("open transaction holds the last stable offset below the high mark")
	// ErrRecordsRemoved is returned when records the replay still had to
	// read were deleted under it (retention or DeleteRecords).
	ErrRecordsRemoved = errors.New("records removed under the replay")
	// ErrKafka is returned for any other client error during the read.
	ErrKafka = errors.New("kafka client error")
	// ErrPartitionsMissing is returned when Config.Partitions names
	// partitions the topic does not have.
	ErrPartitionsMissing = errors.New("partitions missing from the topic")
)

// Error is a replay failure with where it happened. Partition and Offset are
// -1 when they do not apply.
type Error struct {
	Op        string // "metadata", "list-offsets", "start", "read", ...
	Topic     string
	Partition int32
	Offset    int64
	Kind      error // one of the sentinels above
	Reason    error // an optional second sentinel, e.g. ErrOpenTransaction with ErrStalled, ErrTopicDeleted with ErrTopicNotFound
	Detail    string
	Err       error // the underlying cause, may be nil
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	b.WriteString(" ")
	b.WriteString(e.Topic)
	if e.Partition >= 0 {
		fmt.Fprintf(&b, "/%d", e.Partition)
	}
	if e.Offset >= 0 {
		fmt.Fprintf(&b, "@%d", e.Offset)
	}
	b.WriteString(": ")
	if e.Detail != "" {
		b.WriteString(e.Detail)
	} else {
		b.WriteString(e.Kind.Error())
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap exposes both the kind and the cause to errors.Is / errors.As.
func (e *Error) Unwrap() []error {
	errs := []error{e.Kind}
	if e.Reason != nil {
		errs = append(errs, e.Reason)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}
