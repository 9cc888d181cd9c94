// Package record owns the Kafka record as the rest of kmaterialize sees it:
// its position, key, value and headers. It depends on nothing, so that the
// reader (package replay) hands out records without importing the folding
// package and the folds (package fold) read them without knowing Kafka.
// Who owns a record's bytes when is stated once, in package fold's
// "Record bytes" section.
package record

import "time"

// Record is one Kafka record: position, key and value.
// A nil Key is a null key; a nil Value is a null value (a tombstone). An empty,
// non-nil slice is a present but empty key or value.
type Record struct {
	Partition int32
	Offset    int64
	Timestamp time.Time
	Key       []byte
	Value     []byte
	// Headers are the record's headers, filled only when the reader was
	// asked for them (replay.Config.Headers); folds need not look.
	Headers []Header
}

// Header is one record header.
type Header struct {
	Key   string
	Value []byte
}
