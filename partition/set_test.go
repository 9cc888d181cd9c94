package partition

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseSet(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int32
	}{
		{"0-5", []int32{0, 1, 2, 3, 4, 5}},
		{"0,2,4", []int32{0, 2, 4}},
		{"4, 0-1 ,9", []int32{0, 1, 4, 9}},
		{"7", []int32{7}},
		{"3-3", []int32{3}},
	} {
		got, err := ParseSet(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseSet(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, err := ParseSet(FormatSet(got)); err != nil || !slices.Equal(back, got) {
			t.Errorf("ParseSet(FormatSet(%v)) = %v, %v", got, back, err)
		}
	}
	for _, bad := range []string{"", " ", "a", "1,", ",1", "1,,2", "-1", "5-3", "0-3,2", "1,1", "+1", "1-", "-", "1-2-3", "99999999999", strconv.Itoa(MaxSetPartition + 1)} {
		if got, err := ParseSet(bad); !errors.Is(err, ErrBadSet) {
			t.Errorf("ParseSet(%q) = %v, %v; want ErrBadSet", bad, got, err)
		}
	}
}

func TestFormatSet(t *testing.T) {
	for _, tc := range []struct {
		in   []int32
		want string
	}{
		{nil, ""},
		{[]int32{5, 0, 1, 2}, "0-2,5"},
		{[]int32{4}, "4"},
		{[]int32{1, 1, 2}, "1-2"},
	} {
		if got := FormatSet(tc.in); got != tc.want {
			t.Errorf("FormatSet(%v) = %q; want %q", tc.in, got, tc.want)
		}
	}
	if got := Missing([]int32{0, 3, 5, 6}, 5); !slices.Equal(got, []int32{5, 6}) {
		t.Errorf("Missing = %v", got)
	}
}

// FuzzParseSet: any text either is refused with ErrBadSet or is a sorted
// set without duplicates that FormatSet writes back to the same set, the
// oracle being a plain expansion of the items.
func FuzzParseSet(f *testing.F) {
	for _, s := range []string{"0-5", "0,2,4", "1-3,7", " 2 , 4-4", "0-3,2", "5-3", "1,,2", "1048575"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseSet(s)
		if err != nil {
			if !errors.Is(err, ErrBadSet) {
				t.Fatalf("ParseSet(%q): %v, not ErrBadSet", s, err)
			}
			return
		}
		if len(got) == 0 || !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
			t.Fatalf("ParseSet(%q) = %v: not a sorted set", s, got)
		}
		var want []int32
		for _, item := range strings.Split(s, ",") {
			a, b, ok := strings.Cut(strings.TrimSpace(item), "-")
			lo, _ := strconv.Atoi(strings.TrimSpace(a))
			hi := lo
			if ok {
				hi, _ = strconv.Atoi(strings.TrimSpace(b))
			}
			for p := lo; p <= hi; p++ {
				want = append(want, int32(p))
			}
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("ParseSet(%q) = %v; the items expand to %v", s, got, want)
		}
		if back, err := ParseSet(FormatSet(got)); err != nil || !slices.Equal(back, got) {
			t.Fatalf("ParseSet(FormatSet(%v)) = %v, %v", got, back, err)
		}
	})
}
