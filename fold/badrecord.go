package fold

import "fmt"

// MaxKeySize is the longest key, in bytes, a Table can store: bbolt's
// MaxKeySize (the store checks that the two agree). A record whose row or
// index key would be longer is a bad record (ReasonKeyTooLarge), found
// before the Table sees it: bbolt would fail the whole write transaction.
//
// Values have bbolt's MaxValueSize (2^31-2 bytes), which no Kafka record
// reaches: a record batch's size is an int32 that also counts its headers.
const MaxKeySize = 32768

// Reasons a record is skipped, the keys of Stats.SkippedByReason and
// DataError.Kind.
const (
	// ReasonNullKey: a latest record with a null key; always skipped.
	ReasonNullKey = "null_key"
	// ReasonEmptyKey: a latest record with a present, zero-byte key;
	// always skipped (a row needs a non-empty key).
	ReasonEmptyKey = "empty_key"
	// ReasonKeyTooLarge: a key over MaxKeySize (a latest record key, or a
	// count identity or group). A bad record.
	ReasonKeyTooLarge = "key_too_large"
	// ReasonUndecodable: a record whose key or value the --key-format or
	// --value-format cannot decode (package decode: no Schema Registry
	// frame, an unknown schema id, bytes that do not match the schema, not
	// JSON), or a count record whose value is null, not a JSON
	// object, or lacks a usable identity or group field. A bad record.
	ReasonUndecodable = "undecodable"
	// ReasonUnknownGroup: a count record whose group is outside the
	// catalog (without AllowUnknownGroups). A bad record.
	ReasonUnknownGroup = "unknown_group"
)

// OnBadRecord says what a fold does with a bad record: one that, by
// itself, cannot be folded (a *DataError). Conflicts between records (one
// identity, two contents) are never bad records: no single record is
// wrong, so they always refuse publication.
type OnBadRecord int

const (
	// FailOnBadRecord (the default) stops at the first bad record: Fold
	// returns its *DataError and the rebuild publishes nothing.
	FailOnBadRecord OnBadRecord = iota
	// SkipBadRecords leaves bad records out of the table and counts them
	// in Stats.Skipped and Stats.SkippedByReason.
	SkipBadRecords
)

// ParseOnBadRecord parses "fail" or "skip".
func ParseOnBadRecord(s string) (OnBadRecord, error) {
	switch s {
	case "fail":
		return FailOnBadRecord, nil
	case "skip":
		return SkipBadRecords, nil
	}
	return 0, fmt.Errorf("on bad record %q: want fail or skip", s)
}

// String returns "fail" or "skip".
func (o OnBadRecord) String() string {
	if o == SkipBadRecords {
		return "skip"
	}
	return "fail"
}

// skips counts skipped records by reason and applies an OnBadRecord.
type skips struct {
	on       OnBadRecord
	total    int64
	byReason map[string]int64
}

// skip counts one record skipped for reason.
func (s *skips) skip(reason string) {
	if s.byReason == nil {
		s.byReason = make(map[string]int64)
	}
	s.total++
	s.byReason[reason]++
}

// bad handles a bad record: with SkipBadRecords it counts it and returns
// nil, otherwise it returns err.
func (s *skips) bad(err *DataError) error {
	if s.on != SkipBadRecords {
		return err
	}
	s.skip(err.Kind)
	return nil
}

// reasons returns a copy of the counts by reason, nil if none.
func (s *skips) reasons() map[string]int64 {
	if len(s.byReason) == 0 {
		return nil
	}
	out := make(map[string]int64, len(s.byReason))
	for k, v := range s.byReason {
		out[k] = v
	}
	return out
}

// keyTooLarge is the reason text of a ReasonKeyTooLarge DataError.
func keyTooLarge(what string, n int) string {
	return fmt.Sprintf("%s is %d bytes, over the %d-byte key limit", what, n, MaxKeySize)
}

// MarshalText returns "fail" or "skip", so a stored table definition reads
// as the config file spells it.
func (o OnBadRecord) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText parses "fail" or "skip" (ParseOnBadRecord).
func (o *OnBadRecord) UnmarshalText(b []byte) error {
	v, err := ParseOnBadRecord(string(b))
	if err != nil {
		return err
	}
	*o = v
	return nil
}
