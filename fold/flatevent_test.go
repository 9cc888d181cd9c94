package fold

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// slowEvent is the general path's answer for value: the identity and group
// texts and the canonical content, or ok false when the general path
// refuses the value.
func slowEvent(value []byte, idField, groupField string, ignore []string) (id, group, content []byte, ok bool) {
	v, err := decodeJSON(value)
	if err != nil {
		return nil, nil, nil, false
	}
	obj, isObj := v.(map[string]any)
	if !isObj {
		return nil, nil, nil, false
	}
	i, err := fieldText(obj, idField)
	if err != nil {
		return nil, nil, nil, false
	}
	g, err := fieldText(obj, groupField)
	if err != nil {
		return nil, nil, nil, false
	}
	c, err := appendObject(nil, obj, ignore)
	if err != nil {
		return nil, nil, nil, false
	}
	return []byte(i), []byte(g), c, true
}

// checkFlat asserts the property flatEvent promises: whatever it accepts,
// the general path accepts with the same identity, group and content.
func checkFlat(t *testing.T, f *flatEvent, value []byte) bool {
	t.Helper()
	ignore := []string{"sent_at", "z"}
	id, g, c, ok := f.parse(value, "id", "g", ignore, nil)
	if !ok {
		return false
	}
	sid, sg, sc, sok := slowEvent(value, "id", "g", ignore)
	if !sok {
		t.Fatalf("flatEvent accepted %q, the general path refuses it", value)
	}
	if !bytes.Equal(id, sid) || !bytes.Equal(g, sg) || !bytes.Equal(c, sc) {
		t.Fatalf("value %q:\nflat:    id %q group %q content %s\ngeneral: id %q group %q content %s", value, id, g, c, sid, sg, sc)
	}
	return true
}

// TestFlatEventMatchesDecode generates flat and not-so-flat event values
// (whitespace, numbers in many spellings, ignored fields, repeated keys,
// escapes, non-ASCII, nesting, truncation) and checks the fast path
// against the general one; it also checks that the fast path does take
// the common shapes, so the comparison is not vacuous.
func TestFlatEventMatchesDecode(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	var f flatEvent
	for _, v := range []string{
		`{"id":"e1","g":"b1"}`,
		` { "g" : "b1" , "id" : 17.0 , "sent_at":"x", "n": -0.50e+2, "t": true, "f": false, "z": null } `,
		`{"id":1e3,"g":2,"a":0}`,
	} {
		if !checkFlat(t, &f, []byte(v)) {
			t.Fatalf("flatEvent refused the common shape %s", v)
		}
	}
	for _, v := range []string{
		`{"id":"e1","g":"b1","id":"e2"}`, `{"id":"e\u0031","g":"b"}`, `{"id":"é","g":"b"}`, `{"id":"e","g":"b","n":{"a":1}}`,
		`{"id":"e","g":"b","n":[1]}`, `{"id":"e","g":"b"`, `{"id":"e","g":"b"} x`, `{"id":"","g":"b"}`, `{"id":true,"g":"b"}`,
		`{"id":"e","g":"b","n":01}`, `{"id":"e","g":"b","n":1.}`, `{"id":"e","g":"b","n":-}`, `{"id":"e","g":"b","n":1e}`,
		`{"id":"e","g":"b","n":tru}`, `{"id":"e","g":"b",}`, `{}`, `[]`, `"x"`, ``, `{"id":"e","g":"b","n":1e99999999999999}`,
	} {
		if checkFlat(t, &f, []byte(v)) {
			t.Fatalf("flatEvent accepted %s, which it must leave to the general path", v)
		}
	}
	pieces := []string{`"e1"`, `"b2"`, `17`, `17.0`, `1.7e1`, `-0`, `0.000`, `1E+2`, `true`, `false`, `null`, `"a b"`, `""`,
		`"\"q"`, `"ü"`, `{"x":1}`, `[1,2]`, `01`, `1.`, `"x\ty"`}
	keys := []string{"id", "g", "sent_at", "z", "a", "b", "id", "ä", `i\u0064`}
	space := []string{"", " ", "\n", "\t ", "\r\n"}
	accepted := 0
	for range 20000 {
		var b bytes.Buffer
		b.WriteString(space[rng.IntN(len(space))] + "{")
		n := rng.IntN(6)
		fields := []string{"id", "g"}
		for range n {
			fields = append(fields, keys[rng.IntN(len(keys))])
		}
		rng.Shuffle(len(fields), func(i, j int) { fields[i], fields[j] = fields[j], fields[i] })
		for i, k := range fields {
			if i > 0 {
				b.WriteString(space[rng.IntN(len(space))] + ",")
			}
			fmt.Fprintf(&b, `%s"%s"%s:%s%s`, space[rng.IntN(len(space))], k, space[rng.IntN(len(space))], space[rng.IntN(len(space))], pieces[rng.IntN(len(pieces))])
		}
		b.WriteString(space[rng.IntN(len(space))] + "}" + space[rng.IntN(len(space))])
		v := b.Bytes()
		if rng.IntN(20) == 0 {
			v = v[:rng.IntN(len(v)+1)]
		}
		if checkFlat(t, &f, v) {
			accepted++
		}
	}
	if accepted < 500 {
		t.Fatalf("flatEvent took only %d of 20000 generated values: the comparison is nearly vacuous", accepted)
	}
	t.Logf("flatEvent took %d of 20000", accepted)
}

// FuzzFlatEvent: whatever flatEvent accepts, the general path accepts with
// the same identity, group and content.
func FuzzFlatEvent(f *testing.F) {
	f.Add([]byte(`{"id":"e1","g":"b1","sent_at":"x","n":1.50}`))
	f.Add([]byte(` {"g":2,"id":-0.0e+0} `))
	f.Fuzz(func(t *testing.T, value []byte) {
		var fe flatEvent
		checkFlat(t, &fe, value)
	})
}
