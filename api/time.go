package api

import (
	"fmt"
	"time"
)

// The wire's times are RFC 3339 in UTC: nanoTime's with the nanoseconds
// (what was stored, to the digit), secondTime's to the second (moments the
// daemon reports, not data); null when zero.

func nanoTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

func secondTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339)
	return &s
}

// parseTime reads a time the wire sends in either form; null is zero.
func parseTime(field string, s *string) (time.Time, error) {
	if s == nil || *s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", field, err)
	}
	return t, nil
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
