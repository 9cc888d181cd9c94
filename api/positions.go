package api

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Positions are a table's positions in its topic: per partition, the next
// offset the table would apply (its checkpoint's end), which is the offset
// of the last record it reflects plus one. A record at offset O of
// partition P is in the table once Positions[P] >= O+1 ("position units").
// In JSON it is an object keyed by the partition number as a string:
// {"0": 1201, "1": 1187}.
type Positions map[int32]int64

// MaxHeaderBytes is the longest HeaderPositions or HeaderCursor the daemon
// sends: a longer one (a table of some hundreds of partitions) is left out,
// and the table's status (GET /v1/tables/{table}) has the positions.
const MaxHeaderBytes = 4 << 10

// MaxPositionsText bounds the text ParsePositions and ParseCursor take (a
// query parameter or a body), so that a caller cannot make them allocate
// without bound: 1 MiB, some 50,000 partitions.
const MaxPositionsText = 1 << 20

// ErrBadPositions is wrapped by the errors of ParsePositions and
// ParseCursor.
var ErrBadPositions = errors.New("bad positions")

// String formats p as the HeaderPositions text: "P:POSITION" per
// partition, comma-separated, in ascending partition order ("0:1200,1:1187");
// empty positions are "".
func (p Positions) String() string {
	parts := p.partitions()
	var b strings.Builder
	b.Grow(len(parts) * 12)
	for i, part := range parts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(int64(part), 10))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(p[part], 10))
	}
	return b.String()
}

// partitions returns p's partitions in ascending order.
func (p Positions) partitions() []int32 {
	parts := make([]int32, 0, len(p))
	for part := range p {
		parts = append(parts, part)
	}
	slices.Sort(parts)
	return parts
}

// Reached reports whether p is at or past min in every partition of min;
// missing lists, in ascending order, the partitions of min that p does not
// have (a min naming one is never reached).
func (p Positions) Reached(min Positions) (reached bool, missing []int32) {
	reached = true
	for _, part := range min.partitions() {
		have, ok := p[part]
		if !ok {
			missing = append(missing, part)
			reached = false
			continue
		}
		if have < min[part] {
			reached = false
		}
	}
	return reached, missing
}

// Clone returns a copy of p (nil for nil).
func (p Positions) Clone() Positions {
	if p == nil {
		return nil
	}
	out := make(Positions, len(p))
	for k, v := range p {
		out[k] = v
	}
	return out
}

// ParsePositions reads the HeaderPositions text (and the min_positions
// query parameter): "P:POSITION,..." with P a partition (0 to 2^31-1) and
// POSITION a position (0 to 2^63-1), both decimal without sign or leading
// zeros, in any partition order, each partition once. The empty string is
// empty positions. It accepts exactly what String may produce for some
// Positions, in any order: String(ParsePositions(s)) is s sorted.
func ParsePositions(s string) (Positions, error) {
	if len(s) > MaxPositionsText {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrBadPositions, len(s), MaxPositionsText)
	}
	p := Positions{}
	if s == "" {
		return p, nil
	}
	for item := range strings.SplitSeq(s, ",") {
		ps, os, ok := strings.Cut(item, ":")
		if !ok {
			return nil, fmt.Errorf("%w: %q is not PARTITION:POSITION", ErrBadPositions, clip(item))
		}
		part, err := parseDecimal(ps, math.MaxInt32)
		if err != nil {
			return nil, fmt.Errorf("%w: partition %q: %v", ErrBadPositions, clip(ps), err)
		}
		pos, err := parseDecimal(os, math.MaxInt64)
		if err != nil {
			return nil, fmt.Errorf("%w: position %q of partition %d: %v", ErrBadPositions, clip(os), part, err)
		}
		if _, dup := p[int32(part)]; dup {
			return nil, fmt.Errorf("%w: partition %d given twice", ErrBadPositions, part)
		}
		p[int32(part)] = pos
	}
	return p, nil
}

// parseDecimal reads a decimal at most max without sign or leading zeros.
func parseDecimal(s string, max int64) (int64, error) {
	if s == "" {
		return 0, errors.New("empty")
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, errors.New("leading zero")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("not a decimal number")
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > max {
		return 0, fmt.Errorf("above %d", max)
	}
	return n, nil
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// Cursor is what the HeaderCursor names: the state of a table an answer
// was read from. A change feed (GET .../changes?from=CURSOR, next) resumes
// after it; its text is opaque to clients.
type Cursor struct {
	// Generation is the published generation the answer was read from.
	Generation uint64
	// Epoch is the daemon's epoch of the table when it answered: chosen at
	// random (never 0) when the daemon starts, and changed by a rollback,
	// after which positions may go back. A cursor of another epoch cannot
	// be resumed from.
	Epoch uint64
	// Positions are the table's positions in that answer.
	Positions Positions
}

// cursorVersion is the first byte of an encoded cursor.
const cursorVersion = 1

// String encodes c: base64url (no padding) of a version byte, then the
// generation, the epoch, the partition count, and each partition (in
// ascending order) with its position, all unsigned varints.
func (c Cursor) String() string {
	return base64.RawURLEncoding.EncodeToString(c.encode())
}

func (c Cursor) encode() []byte {
	parts := c.Positions.partitions()
	b := make([]byte, 0, 1+3*binary.MaxVarintLen64+len(parts)*(binary.MaxVarintLen32+binary.MaxVarintLen64))
	b = append(b, cursorVersion)
	b = binary.AppendUvarint(b, c.Generation)
	b = binary.AppendUvarint(b, c.Epoch)
	b = binary.AppendUvarint(b, uint64(len(parts)))
	for _, part := range parts {
		b = binary.AppendUvarint(b, uint64(part))
		b = binary.AppendUvarint(b, uint64(c.Positions[part]))
	}
	return b
}

// ParseCursor decodes what Cursor.String encodes, and only that: any other
// text (another version, trailing bytes, varints not in their shortest
// form, partitions out of order, values out of range) is an error
// wrapping ErrBadPositions. ParseCursor(c.String()) is c.
func ParseCursor(s string) (Cursor, error) {
	bad := func(what string) (Cursor, error) {
		return Cursor{}, fmt.Errorf("%w: cursor %q: %s", ErrBadPositions, clip(s), what)
	}
	if len(s) > MaxPositionsText {
		return bad("too long")
	}
	// The decoder skips '\r' and '\n': only the alphabet is a cursor.
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return bad("not base64url")
		}
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return bad("not base64url")
	}
	if len(b) == 0 || b[0] != cursorVersion {
		return bad("unknown version")
	}
	rest := b[1:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(rest)
		if n <= 0 {
			return 0, false
		}
		rest = rest[n:]
		return v, true
	}
	var c Cursor
	var n uint64
	var ok bool
	if c.Generation, ok = next(); !ok {
		return bad("truncated")
	}
	if c.Epoch, ok = next(); !ok {
		return bad("truncated")
	}
	if n, ok = next(); !ok {
		return bad("truncated")
	}
	if n > uint64(len(rest))/2 {
		return bad("more partitions than bytes")
	}
	c.Positions = make(Positions, n)
	last := int64(-1)
	for i := uint64(0); i < n; i++ {
		part, ok1 := next()
		pos, ok2 := next()
		if !ok1 || !ok2 {
			return bad("truncated")
		}
		if part > math.MaxInt32 || pos > math.MaxInt64 || int64(part) <= last {
			return bad("partitions out of order or out of range")
		}
		last = int64(part)
		c.Positions[int32(part)] = int64(pos)
	}
	if len(rest) != 0 {
		return bad("trailing bytes")
	}
	if string(c.encode()) != string(b) {
		return bad("not in its shortest form")
	}
	return c, nil
}

// Read-your-writes: the query parameters of a read that waits for
// positions (GET .../keys/{key}, .../rows, .../count), and their bound.
const (
	// ParamMinPositions is the positions (ParsePositions' text) a read
	// waits for; a POST of the same route may send them as a
	// MinPositionsBody instead.
	ParamMinPositions = "min_positions"
	// ParamWait is how long it waits for them: a Go duration ("2s",
	// "500ms"), 0 (the default: answer at once) to MaxWait.
	ParamWait = "wait"
	// MaxWait is the longest wait a read takes.
	MaxWait = 30 * time.Second
	// MaxMinPositionsBody bounds a MinPositionsBody, in bytes.
	MaxMinPositionsBody = 1 << 20
)

// MinPositionsBody is the JSON body of a POST of a read route that waits
// for positions too many for its query: {"min_positions": {"1": 1300}}.
type MinPositionsBody struct {
	MinPositions Positions `json:"min_positions"`
}
