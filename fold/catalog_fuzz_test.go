package fold

import (
	"encoding/json"
	"slices"
	"testing"
)

// FuzzParseCatalog: whatever the bytes of a count table's catalog file,
// ParseCatalog never panics; it fails, or returns non-empty names, which
// written back as a JSON array parse to the same names in the same order
// (distinct: an array that names one twice is refused).
func FuzzParseCatalog(f *testing.F) {
	for _, s := range []string{`["cedar","oak"]`, `{"oak":1,"cedar":null}`, `[]`, `{}`, `["a","a"]`, `[""]`, `[1]`, `"x"`, `{"":1}`, `["\u00e9"]`, `[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		names, err := ParseCatalog(data)
		if err != nil {
			return
		}
		if names == nil {
			t.Fatalf("%q: a nil catalog and no error", data)
		}
		seen := map[string]bool{}
		for _, n := range names {
			if n == "" || seen[n] {
				t.Fatalf("%q: name %q empty or repeated in %q", data, n, names)
			}
			seen[n] = true
		}
		b, err := json.Marshal(names)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseCatalog(b)
		if err != nil || !slices.Equal(names, again) {
			t.Fatalf("%q -> %q -> %s -> %q, %v", data, names, b, again, err)
		}
	})
}
