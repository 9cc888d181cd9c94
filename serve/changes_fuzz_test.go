package serve

import (
	"net/url"
	"testing"

	"github.com/kmaterialize/kmaterialize/api"
)

// FuzzChangesQuery: whatever the query of the changes route, parseChanges
// never panics; it accepts exactly one from= that is "now" or a cursor
// that api.ParseCursor takes (and then writes back as given) with an
// encoding parseEncoding takes, or refuses with bad_cursor or
// bad_encoding and a message.
func FuzzChangesQuery(f *testing.F) {
	c := api.Cursor{Generation: 3, Epoch: 77, Positions: api.Positions{0: 1201, 1: 1187}}.String()
	for _, s := range []string{
		"", "from=now", "from=" + c, "from=" + c + "&encoding=base64", "from=now&from=now", "from=",
		"from=AQ", "from=" + c + "A", "from=now&encoding=latin1", "from=%00", "from=NOW", "encoding=base64",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return // net/http answers such a query before the route
		}
		q, code, err := parseChanges(v)
		if err != nil {
			if (code != api.CodeBadCursor && code != api.CodeBadEncoding) || err.Error() == "" {
				t.Fatalf("query %q refused with code %q: %v", raw, code, err)
			}
			return
		}
		froms := v[api.ParamFrom]
		if len(froms) != 1 {
			t.Fatalf("query %q accepted with %d from= values", raw, len(froms))
		}
		if _, encErr := parseEncoding(v.Get("encoding")); encErr != nil {
			t.Fatalf("query %q accepted with a bad encoding", raw)
		}
		switch {
		case q.now:
			if froms[0] != api.FromNow {
				t.Fatalf("query %q: now, from %q", raw, froms[0])
			}
		case q.from.String() != froms[0]:
			t.Fatalf("query %q: from %q parsed to %+v, which writes %q", raw, froms[0], q.from, q.from.String())
		}
	})
}
