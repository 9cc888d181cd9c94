package partition

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxSetPartition bounds a partition number in a set: Kafka's partition
// numbers are int32, and a range to 2^31-1 would be a set of billions. A
// topic with more partitions than this is far past any broker's limit.
const MaxSetPartition = 1<<20 - 1

// ErrBadSet: ParseSet was given text that is not a partition set.
var ErrBadSet = errors.New("not a partition set")

// ParseSet reads a set of partitions as a table's `partitions:` and
// `--partitions` write it: numbers and inclusive ranges, comma-separated,
// in any order: "0-5", "0,2,4", "0-2,7,9-11". Blanks around the items are
// allowed. The result is sorted and has no duplicates; an overlap ("0-3,2")
// and an empty item are refused (a typo more often than a meaning), as are
// a range that runs backwards, a negative number and one above
// MaxSetPartition. Every error matches ErrBadSet and quotes the item.
func ParseSet(s string) ([]int32, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%w: empty (give partitions as 0-5 or 0,2,4)", ErrBadSet)
	}
	var out []int32
	seen := map[int32]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		lo, hi, err := parseItem(item)
		if err != nil {
			return nil, err
		}
		for p := lo; p <= hi; p++ {
			if seen[p] {
				return nil, fmt.Errorf("%w: %q: partition %d is named twice", ErrBadSet, s, p)
			}
			seen[p] = true
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out, nil
}

// parseItem reads one item of a set: "N" or "N-M".
func parseItem(item string) (lo, hi int32, err error) {
	if item == "" {
		return 0, 0, fmt.Errorf("%w: an empty item (a stray comma?)", ErrBadSet)
	}
	a, b, isRange := strings.Cut(item, "-")
	if lo, err = parseNumber(item, strings.TrimSpace(a)); err != nil {
		return 0, 0, err
	}
	if !isRange {
		return lo, lo, nil
	}
	if hi, err = parseNumber(item, strings.TrimSpace(b)); err != nil {
		return 0, 0, err
	}
	if hi < lo {
		return 0, 0, fmt.Errorf("%w: %q runs backwards (write %d-%d)", ErrBadSet, item, hi, lo)
	}
	return lo, hi, nil
}

func parseNumber(item, s string) (int32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || s == "" || s[0] == '+' {
		return 0, fmt.Errorf("%w: %q: %q is not a partition number", ErrBadSet, item, s)
	}
	if n > MaxSetPartition {
		return 0, fmt.Errorf("%w: %q: partition %d is above %d", ErrBadSet, item, n, MaxSetPartition)
	}
	return int32(n), nil
}

// FormatSet writes ps compactly, as ParseSet reads it: runs as ranges,
// "0-2", "0-2,5", "4"; "" for no partitions. ps need not be sorted.
func FormatSet(ps []int32) string {
	s := slices.Clone(ps)
	slices.Sort(s)
	s = slices.Compact(s)
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", s[i], s[j])
		} else {
			fmt.Fprintf(&b, "%d", s[i])
		}
		i = j + 1
	}
	return b.String()
}

// Missing returns the partitions of set that a topic of count partitions
// lacks (those >= count), sorted; nil when it has them all.
func Missing(set []int32, count int32) []int32 {
	var out []int32
	for _, p := range set {
		if p >= count {
			out = append(out, p)
		}
	}
	return out
}
