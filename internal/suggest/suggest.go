// Package suggest finds the name a user probably meant: the "did you mean"
// of unknown commands, flags and config fields.
//
// The rule is edit distance (Levenshtein with swaps, over bytes) with a bound that grows
// with the name's length, so that a typo of one or two characters is found
// and an unrelated name is not; a name that starts exactly one candidate
// (an abbreviation) is that candidate.
package suggest

import "strings"

// Nearest returns the candidate closest to name, or "" when none is close
// enough to be a likely typo. Ties go to the earlier candidate, so the
// answer is the same on every run. Comparison ignores ASCII case.
func Nearest(name string, candidates []string) string {
	name = strings.ToLower(name)
	if name == "" {
		return ""
	}
	best, bestD := "", maxDistance(name)+1
	prefixed, nPrefixed := "", 0
	for _, c := range candidates {
		lc := strings.ToLower(c)
		if lc == name {
			return c
		}
		if d := distance(name, lc); d < bestD {
			best, bestD = c, d
		}
		if strings.HasPrefix(lc, name) {
			prefixed = c
			nPrefixed++
		}
	}
	if best != "" {
		return best
	}
	if nPrefixed == 1 && len(name) >= 3 {
		return prefixed
	}
	return ""
}

// maxDistance is how many edits still make a typo of a name this long: one
// for short names, about one in three characters for longer ones, at most 3.
func maxDistance(name string) int {
	return min(max(1, len(name)/3), 3)
}

// distance is the optimal-string-alignment distance of a and b: the fewest
// single-byte insertions, deletions, substitutions and swaps of two
// neighbours that turn one into the other (Levenshtein, with the swap that
// is the commonest typo counted as one edit).
func distance(a, b string) int {
	// Three rows of the table: i-2, i-1, i.
	rows := [3][]int{make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)}
	for j := range rows[1] {
		rows[1][j] = j
	}
	for i := 1; i <= len(a); i++ {
		pp, prev, cur := rows[0], rows[1], rows[2]
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], pp[j-2]+1)
			}
		}
		rows[0], rows[1], rows[2] = prev, cur, pp
	}
	return rows[1][len(b)]
}
