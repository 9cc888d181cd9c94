package api

import (
	"errors"
	"maps"
	"testing"
)

// FuzzParsePositions: any text either parses, and then formats back to
// positions that parse to the same map (String is canonical: formatting
// again gives the same text), or fails with ErrBadPositions.
func FuzzParsePositions(f *testing.F) {
	for _, s := range []string{"", "0:1200,1:1187", "4:77,1:1300", "0:5,0:6", "01:5", "2147483647:9223372036854775807",
		"2147483648:1", "0:", ":", ",", "0:1,", "-1:1", "1:+1", "\x00:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePositions(s)
		if err != nil {
			if !errors.Is(err, ErrBadPositions) || p != nil {
				t.Fatalf("ParsePositions(%q) = %v, %v: want nil and ErrBadPositions", s, p, err)
			}
			return
		}
		for part, pos := range p {
			if part < 0 || pos < 0 {
				t.Fatalf("ParsePositions(%q) = %v: a negative value", s, p)
			}
		}
		text := p.String()
		if len(text) != len(s) {
			t.Fatalf("ParsePositions(%q) formats back as %q: lengths differ (accepted a non-canonical number?)", s, text)
		}
		back, err := ParsePositions(text)
		if err != nil || !maps.Equal(back, p) || back.String() != text {
			t.Fatalf("%q -> %v -> %q -> %v, %v", s, p, text, back, err)
		}
	})
}

// FuzzParseCursor: any text either decodes to a cursor that encodes back
// to the same text, or fails with ErrBadPositions.
func FuzzParseCursor(f *testing.F) {
	for _, c := range []Cursor{{Generation: 1, Epoch: 2, Positions: Positions{}}, {Generation: 9, Epoch: 1 << 62, Positions: Positions{0: 5, 3: 1 << 40}}} {
		f.Add(c.String())
	}
	for _, s := range []string{"", "AQ", "AYAAAQA", "AQMFAgEBAAE", "====", "AQEBAQ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCursor(s)
		if err != nil {
			if !errors.Is(err, ErrBadPositions) {
				t.Fatalf("ParseCursor(%q): %v does not wrap ErrBadPositions", s, err)
			}
			return
		}
		if got := c.String(); got != s {
			t.Fatalf("ParseCursor(%q) = %v, which encodes as %q", s, c, got)
		}
		for part, pos := range c.Positions {
			if part < 0 || pos < 0 {
				t.Fatalf("ParseCursor(%q) = %v: a negative value", s, c)
			}
		}
	})
}
