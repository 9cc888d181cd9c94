package fold

import (
	"bytes"
	"slices"
)

// flatEvent is the count fold's fast path for the common event: one flat
// JSON object whose keys and string values are printable ASCII without
// escapes, and whose values are strings, numbers, true, false or null. For
// such a value it finds the identity and group texts and appends the
// canonical content (canonicalJSON without the ignored fields) without
// building a map per record, which is most of the fold's cost. It reports
// false for anything else (a nested value, an escape, a byte outside
// printable ASCII, a repeated key, a missing, empty or non-scalar identity
// or group, a number canonicalNumber refuses, invalid JSON), and the
// caller then takes the general path (decodeJSON), which also words the
// errors: whatever flatEvent accepts, the general path accepts with the
// same texts and content (TestFlatEventMatchesDecode).
type flatEvent struct {
	members []flatMember // reused
}

type flatMember struct {
	key, val []byte // key without quotes; val as written (a string with its quotes)
}

// parse reads value; identity and group alias value or c's buffers and are
// valid until the next call; content is appended to dst.
func (f *flatEvent) parse(value []byte, identityField, groupField string, ignore []string, dst []byte) (identity, group, content []byte, ok bool) {
	f.members = f.members[:0]
	i := skipSpace(value, 0)
	if i == len(value) || value[i] != '{' {
		return nil, nil, nil, false
	}
	i = skipSpace(value, i+1)
	if i < len(value) && value[i] == '}' {
		return nil, nil, nil, false // no identity
	}
	for {
		key, j, ok := plainString(value, i)
		if !ok {
			return nil, nil, nil, false
		}
		i = skipSpace(value, j)
		if i == len(value) || value[i] != ':' {
			return nil, nil, nil, false
		}
		i = skipSpace(value, i+1)
		start := i
		if i, ok = scalar(value, i); !ok {
			return nil, nil, nil, false
		}
		f.members = append(f.members, flatMember{key: key, val: value[start:i]})
		i = skipSpace(value, i)
		if i == len(value) {
			return nil, nil, nil, false
		}
		if value[i] == '}' {
			break
		}
		if value[i] != ',' {
			return nil, nil, nil, false
		}
		i = skipSpace(value, i+1)
	}
	if skipSpace(value, i+1) != len(value) {
		return nil, nil, nil, false // trailing data
	}
	slices.SortFunc(f.members, func(a, b flatMember) int { return bytes.Compare(a.key, b.key) })
	content = append(dst, '{')
	first := true
	for m := range f.members {
		mb := &f.members[m]
		if m > 0 && bytes.Equal(mb.key, f.members[m-1].key) {
			return nil, nil, nil, false // a repeated key: the last one wins, in record order
		}
		text, isText := mb.val, false
		switch mb.val[0] {
		case '"':
			text, isText = mb.val[1:len(mb.val)-1], true
		case 't', 'f', 'n':
		default:
			n, err := canonicalNumber(string(mb.val))
			if err != nil {
				return nil, nil, nil, false
			}
			text, isText = []byte(n), true
		}
		k := string(mb.key) // no allocation: compared only
		if k == identityField || k == groupField {
			if !isText || len(text) == 0 {
				return nil, nil, nil, false
			}
			if k == identityField {
				identity = text
			}
			if k == groupField {
				group = text
			}
		}
		if slices.Contains(ignore, k) {
			continue
		}
		if !first {
			content = append(content, ',')
		}
		first = false
		content = append(content, '"')
		content = append(content, mb.key...)
		content = append(content, '"', ':')
		if mb.val[0] == '"' || mb.val[0] == 't' || mb.val[0] == 'f' || mb.val[0] == 'n' {
			content = append(content, mb.val...)
		} else {
			content = append(content, text...)
		}
	}
	if identity == nil || group == nil {
		return nil, nil, nil, false
	}
	return identity, group, append(content, '}'), true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainString reads a string of printable ASCII without escapes at b[i],
// returning its contents and the index after its closing quote.
func plainString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c > 0x7e:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// scalar reads a plain string, a JSON number, true, false or null at b[i],
// returning the index after it.
func scalar(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		_, j, ok := plainString(b, i)
		return j, ok
	case 't':
		return literal(b, i, "true")
	case 'f':
		return literal(b, i, "false")
	case 'n':
		return literal(b, i, "null")
	}
	return number(b, i)
}

func literal(b []byte, i int, lit string) (int, bool) {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit), true
	}
	return 0, false
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at b[i].
func number(b []byte, i int) (int, bool) {
	digits := func(j int) int {
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		return j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(i)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}
