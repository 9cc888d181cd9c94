package fold

import (
	"errors"
	"fmt"
)

// ErrInvalidData matches, through errors.Is, every error by which a fold
// refuses publication because of the data itself: a *DataError (a record
// the fold cannot read) or a *ConflictError (one identity, two contents).
// Callers map it to exit code 3 ("data conflict: publication refused"); use
// errors.As into the two types for the details.
var ErrInvalidData = errors.New("fold: invalid data")

// Position is a record's place in its topic.
type Position struct {
	Partition int32
	Offset    int64
}

// String returns "partition@offset", e.g. "3@0".
func (p Position) String() string { return fmt.Sprintf("%d@%d", p.Partition, p.Offset) }

// Compare orders positions by partition, then offset: -1, 0 or +1.
func (p Position) Compare(q Position) int {
	switch {
	case p.Partition < q.Partition:
		return -1
	case p.Partition > q.Partition:
		return 1
	case p.Offset < q.Offset:
		return -1
	case p.Offset > q.Offset:
		return 1
	}
	return 0
}

// where formats a position with its topic: "topic/partition@offset", or
// "partition@offset" when the topic is unknown.
func where(topic string, p Position) string {
	if topic == "" {
		return p.String()
	}
	return topic + "/" + p.String()
}

// DataError is returned when a record cannot be folded (a bad record): its
// key is over MaxKeySize; or, in the count fold, its value is null, not JSON
// or not an object, it lacks the identity or group field, or one of them is
// not a string or number, or its group is outside the catalog. With
// SkipBadRecords the fold counts such a record under Kind instead.
// It matches ErrInvalidData.
type DataError struct {
	Topic     string
	Partition int32
	Offset    int64
	Kind      string // the skip reason it counts under, e.g. ReasonKeyTooLarge
	Reason    string // what is wrong, e.g. "value is not JSON"
	Err       error  // the underlying cause, if any (e.g. a JSON syntax error)
}

// Error returns e.g. `studio-votes/2@5: value is not JSON: invalid character 'x' ...`.
func (e *DataError) Error() string {
	s := where(e.Topic, Position{e.Partition, e.Offset}) + ": " + e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying cause.
func (e *DataError) Unwrap() error { return e.Err }

// Is reports whether target is ErrInvalidData.
func (e *DataError) Is(target error) bool { return target == ErrInvalidData }

// ConflictError is returned by Count.Finish when records with the same
// identity have different contents. When there are several such identities,
// it names the smallest (by bytes); First is the lowest position of any of
// that identity's records, and Second the lowest position of a record of that
// identity whose content differs from First's, so First < Second. The
// error is the same whatever order partitions were read in.
// It matches ErrInvalidData.
type ConflictError struct {
	Topic    string
	Field    string // the identity field, e.g. "event_id"
	Identity string
	First    Position
	Second   Position
	// Identities is how many identities conflict in total (at least 1).
	Identities int64
}

// Error returns e.g. `conflicting event_id "v-17": studio-votes/1@4 vs studio-votes/3@0`.
func (e *ConflictError) Error() string {
	s := fmt.Sprintf("conflicting %s %q: %s vs %s", e.Field, e.Identity, where(e.Topic, e.First), where(e.Topic, e.Second))
	if e.Identities > 1 {
		s += fmt.Sprintf(" (and %d more conflicting identities)", e.Identities-1)
	}
	return s
}

// Is reports whether target is ErrInvalidData.
func (e *ConflictError) Is(target error) bool { return target == ErrInvalidData }
