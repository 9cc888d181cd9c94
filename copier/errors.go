package copier

import "errors"

// Sentinel errors. The CLI maps them to exit codes.
var (
	// ErrFenced is returned when another copier with the same
	// transactional.id (or group.instance.id) took over.
	ErrFenced = errors.New("fenced by another copier with the same transactional id")
	// ErrBadDestination is returned when the destination has fewer
	// partitions than the source and Repartition is off.
	ErrBadDestination = errors.New("destination has fewer partitions than the source")
	// ErrStalled is returned when the group's committed offsets stopped
	// moving before reaching the end offsets captured at start (for example
	// an open transaction on the source).
	ErrStalled = errors.New("copy stalled before the end offsets")
	// ErrUnauthorized is returned when the brokers refuse the copier's
	// transactional id, group or topics (an authorization error).
	ErrUnauthorized = errors.New("not authorized")
	// ErrFatal is returned for a fatal client error other than fencing.
	ErrFatal = errors.New("fatal kafka error")
	// ErrInterrupted is returned when a bounded copy was stopped by a
	// signal before reaching its end (what was committed stays committed).
	ErrInterrupted = errors.New("copy interrupted before the end offsets")
)
