package api

import (
	"encoding/json"
	"errors"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestPositionsText(t *testing.T) {
	p := Positions{4: 77, 0: 1200, 1: 0}
	if got, want := p.String(), "0:1200,1:0,4:77"; got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
	back, err := ParsePositions("4:77,0:1200,1:0")
	if err != nil || !maps.Equal(back, p) {
		t.Fatalf("ParsePositions = %v, %v; want %v", back, err, p)
	}
	if e, err := ParsePositions(""); err != nil || len(e) != 0 || (Positions{}).String() != "" {
		t.Fatalf("empty: %v, %v", e, err)
	}
	max := Positions{math.MaxInt32: math.MaxInt64}
	if back, err := ParsePositions(max.String()); err != nil || !maps.Equal(back, max) {
		t.Fatalf("largest values: %v, %v", back, err)
	}
	for _, bad := range []string{",", "0:1,", "0", "0:", ":1", "-1:5", "0:-5", "+1:5", "01:5", "0:05", " 0:5",
		"0:5,0:6", "2147483648:1", "0:9223372036854775808", "0:1:2", "a:b", "0:1e3"} {
		if _, err := ParsePositions(bad); !errors.Is(err, ErrBadPositions) {
			t.Errorf("ParsePositions(%q) = %v, want ErrBadPositions", bad, err)
		}
	}
	if _, err := ParsePositions(strings.Repeat("1", MaxPositionsText+1)); !errors.Is(err, ErrBadPositions) {
		t.Errorf("an over-long text: %v", err)
	}
}

func TestPositionsReached(t *testing.T) {
	have := Positions{0: 10, 1: 5}
	for _, c := range []struct {
		min     Positions
		reached bool
		missing []int32
	}{
		{Positions{}, true, nil},
		{Positions{0: 10}, true, nil},
		{Positions{0: 11}, false, nil},
		{Positions{0: 1, 1: 6}, false, nil},
		{Positions{0: 1, 7: 1, 3: 0}, false, []int32{3, 7}},
	} {
		reached, missing := have.Reached(c.min)
		if reached != c.reached || !slices.Equal(missing, c.missing) {
			t.Errorf("Reached(%v) = %v, %v; want %v, %v", c.min, reached, missing, c.reached, c.missing)
		}
	}
}

func TestPositionsJSON(t *testing.T) {
	b, err := json.Marshal(ErrorBody{Code: CodePositionsNotReached, Error: "x", Positions: Positions{1: 3, 0: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"error":"x","code":"positions_not_reached","positions":{"0":2,"1":3}}`; string(b) != want {
		t.Fatalf("got %s, want %s", b, want)
	}
	var body MinPositionsBody
	if err := json.Unmarshal([]byte(`{"min_positions":{"4":77,"1":1300}}`), &body); err != nil || !maps.Equal(body.MinPositions, Positions{1: 1300, 4: 77}) {
		t.Fatalf("MinPositionsBody: %v, %v", body, err)
	}
}

func TestCursor(t *testing.T) {
	for _, c := range []Cursor{
		{Generation: 1, Epoch: 1, Positions: Positions{}},
		{Generation: 7, Epoch: math.MaxUint64, Positions: Positions{0: 1200, 1: 1187, 31: 0}},
		{Generation: math.MaxUint64, Epoch: 9, Positions: Positions{math.MaxInt32: math.MaxInt64}},
	} {
		s := c.String()
		if strings.ContainsAny(s, "+/=") {
			t.Errorf("cursor %q is not base64url without padding", s)
		}
		back, err := ParseCursor(s)
		if err != nil || back.Generation != c.Generation || back.Epoch != c.Epoch || !maps.Equal(back.Positions, c.Positions) {
			t.Errorf("ParseCursor(%v.String()) = %v, %v", c, back, err)
		}
	}
	short := Cursor{Generation: 3, Epoch: 5, Positions: Positions{0: 100}}.String()
	for _, bad := range []string{"", "AA", "!!", short + "A", short[:len(short)-1],
		"AgEBAA",      // version 2
		"AYAAAQA",     // generation 0 in two bytes (0x80 0x00)
		"AQMFAgEBAAE", // partitions 1 then 0
	} {
		if _, err := ParseCursor(bad); !errors.Is(err, ErrBadPositions) {
			t.Errorf("ParseCursor(%q) = %v, want ErrBadPositions", bad, err)
		}
	}
}
