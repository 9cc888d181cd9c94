package fold

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// decodeJSON decodes one JSON value, keeping numbers as json.Number, and
// refuses trailing data after it. An object with a repeated key keeps the
// last occurrence, as encoding/json does.
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty input")
		}
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err == nil {
			return nil, fmt.Errorf("trailing data after the value at byte %d", dec.InputOffset())
		}
		return nil, err
	}
	return v, nil
}

// CanonicalJSON returns the canonical form of one JSON value (see
// canonicalJSON): the form in which decoded record values are stored
// (package decode), so that two texts of the same value are the same row.
func CanonicalJSON(data []byte) ([]byte, error) { return canonicalJSON(data) }

// canonicalJSON returns the canonical form of one JSON value: no whitespace,
// object keys sorted by their bytes, strings re-escaped minimally, and
// numbers in the canonical text of canonicalNumber. Two JSON texts that
// denote the same value have the same canonical form, and canonicalJSON is
// idempotent.
func canonicalJSON(data []byte) ([]byte, error) {
	v, err := decodeJSON(data)
	if err != nil {
		return nil, err
	}
	return appendCanonical(nil, v)
}

// appendCanonical appends the canonical JSON text of v, a value as
// decodeJSON returns it, to buf.
func appendCanonical(buf []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(buf, "null"...), nil
	case bool:
		if v {
			return append(buf, "true"...), nil
		}
		return append(buf, "false"...), nil
	case string:
		return appendString(buf, v), nil
	case json.Number:
		n, err := canonicalNumber(string(v))
		if err != nil {
			return nil, err
		}
		return append(buf, n...), nil
	case []any:
		buf = append(buf, '[')
		for i, e := range v {
			if i > 0 {
				buf = append(buf, ',')
			}
			var err error
			if buf, err = appendCanonical(buf, e); err != nil {
				return nil, err
			}
		}
		return append(buf, ']'), nil
	case map[string]any:
		return appendObject(buf, v, nil)
	default:
		return nil, fmt.Errorf("unexpected JSON value of type %T", v)
	}
}

// appendObject appends the canonical text of object m, leaving out the keys
// in skip, to buf.
func appendObject(buf []byte, m map[string]any, skip []string) ([]byte, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		if !slices.Contains(skip, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	buf = append(buf, '{')
	for i, k := range keys {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendString(buf, k)
		buf = append(buf, ':')
		var err error
		if buf, err = appendCanonical(buf, m[k]); err != nil {
			return nil, err
		}
	}
	return append(buf, '}'), nil
}

// appendString appends s as a JSON string: only '"', '\\' and control
// characters are escaped. s is valid UTF-8 when it comes from decodeJSON;
// any invalid byte is written as U+FFFD, as encoding/json decodes it.
func appendString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				buf = append(buf, '\\', c)
			case c == '\n':
				buf = append(buf, '\\', 'n')
			case c == '\r':
				buf = append(buf, '\\', 'r')
			case c == '\t':
				buf = append(buf, '\\', 't')
			case c < 0x20:
				buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				buf = append(buf, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf = utf8.AppendRune(buf, utf8.RuneError)
		} else {
			buf = append(buf, s[i:i+size]...)
		}
		i += size
	}
	return append(buf, '"')
}

// canonicalNumber returns the canonical text of the JSON number s, so that
// numbers with the same decimal value have the same text: 1, 1.0, 10e-1 and
// 0.1e1 are all "1"; -0 is "0"; 1.50 is "1.5"; 1e30 is "1e30".
//
// The value is sign × digits × 10^exp, with no leading or trailing zeros in
// digits. It is written as an integer when exp >= 0 and the integer has at
// most 21 digits, as a decimal fraction when -exp <= len(digits)+6, and as
// "d.ddde±N" otherwise. The text is valid JSON, and canonicalNumber of it
// returns it unchanged.
func canonicalNumber(s string) (string, error) {
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	mant, expText, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	if intPart == "" || !allDigits(intPart) || !allDigits(frac) {
		return "", fmt.Errorf("invalid JSON number %q", s)
	}
	exp := int64(0)
	if hasExp {
		var err error
		if exp, err = strconv.ParseInt(strings.TrimPrefix(expText, "+"), 10, 64); err != nil || exp > 1<<40 || exp < -1<<40 {
			return "", fmt.Errorf("JSON number exponent out of range: %q", s)
		}
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	exp -= int64(len(frac))
	if digits == "" {
		return "0", nil
	}
	trimmed := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(trimmed))
	digits = trimmed

	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	n := int64(len(digits))
	switch {
	case exp >= 0 && n+exp <= 21:
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", int(exp)))
	case exp < 0 && -exp <= n+6:
		point := n + exp // digits before the decimal point
		if point > 0 {
			b.WriteString(digits[:point])
			b.WriteByte('.')
			b.WriteString(digits[point:])
		} else {
			b.WriteString("0.")
			b.WriteString(strings.Repeat("0", int(-point)))
			b.WriteString(digits)
		}
	default:
		b.WriteByte(digits[0])
		if n > 1 {
			b.WriteByte('.')
			b.WriteString(digits[1:])
		}
		b.WriteByte('e')
		b.WriteString(strconv.FormatInt(exp+n-1, 10))
	}
	return b.String(), nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
