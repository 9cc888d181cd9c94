package store

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestWritePublishReadMatchesOracle(t *testing.T) {
	db := openTemp(t)
	o := oracle{}
	g, err := db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	writeOps(t, g, o, randomOps(t, uint64(time.Now().UnixNano()), 3000), 700)
	meta := TableMeta{
		Topic: "events", Fold: "latest", Params: map[string]string{"k": "v"},
		BuiltAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("X", 3600)), Duration: 1500 * time.Millisecond,
		Records: 3000, Skipped: 7, Extra: map[string]int64{"logical_events": 42},
	}
	if err := g.Publish(meta, nil); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	// Full scan: same rows, ascending byte order.
	keys, rows := scanAll(t, db, "t")
	if diff := cmp.Diff(map[string]string(o), map[string]string(rows)); diff != "" {
		t.Errorf("scan differs from oracle (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(o.sortedKeys(""), keys); diff != "" {
		t.Errorf("scan order (-want +got):\n%s", diff)
	}

	// Get of every present key, and of absent ones.
	for k, want := range o {
		got, err := db.Get("t", []byte(k))
		if err != nil {
			t.Fatalf("Get(%q): %v", k, err)
		}
		if got == nil || string(got) != want {
			t.Fatalf("Get(%q) = %q (nil %v), want %q", k, got, got == nil, want)
		}
	}
	for _, k := range []string{"nope", "a/", "a", "", "z99999"} {
		if _, present := o[k]; present {
			continue
		}
		_, err := db.Get("t", []byte(k))
		var kerr *KeyNotFoundError
		if !errors.Is(err, ErrKeyNotFound) || !errors.As(err, &kerr) || kerr.Table != "t" || string(kerr.Key) != k {
			t.Errorf("Get(%q) err = %v, want KeyNotFoundError for table t", k, err)
		}
	}

	// Prefix and limit, table-driven against the oracle.
	for _, tc := range []struct {
		prefix string
		limit  int
	}{
		{"", 0}, {"", 10}, {"a/", 0}, {"a", 0}, {"ab/", 5}, {"b/", -1}, {"z", 3}, {"q", 0}, {"a/0", 1000000},
	} {
		want := o.sortedKeys(tc.prefix)
		if tc.limit > 0 && len(want) > tc.limit {
			want = want[:tc.limit]
		}
		var got []string
		var prefix []byte
		if tc.prefix != "" {
			prefix = []byte(tc.prefix)
		}
		err := db.Scan("t", prefix, tc.limit, func(k, v []byte) error {
			if string(v) != o[string(k)] {
				t.Errorf("scan %q: value of %q = %q, want %q", tc.prefix, k, v, o[string(k)])
			}
			got = append(got, string(k))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("Scan(prefix %q, limit %d) (-want +got):\n%s", tc.prefix, tc.limit, diff)
		}
	}

	// An error from fn stops the scan and comes back unchanged.
	stop := errors.New("stop")
	n := 0
	if err := db.Scan("t", nil, 0, func(k, v []byte) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("Scan with failing fn: err %v after %d calls, want stop after 1", err, n)
	}

	// Metadata round-trips, with Generation and Keys filled in.
	want := meta
	want.Name, want.Generation, want.Keys = "t", g.ID(), int64(len(o))
	// A first publish adds every key.
	want.Changes = &Changes{Added: int64(len(o))}
	got, err := db.Table("t")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Table meta (-want +got):\n%s", diff)
	}
	all, err := db.Tables()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]TableMeta{want}, all); diff != "" {
		t.Errorf("Tables (-want +got):\n%s", diff)
	}

	// And it survives a close and a read-only reopen.
	path := db.Path()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	_, rows = scanAll(t, ro, "t")
	if diff := cmp.Diff(map[string]string(o), map[string]string(rows)); diff != "" {
		t.Errorf("after reopen (-want +got):\n%s", diff)
	}
	if got, err := ro.Table("t"); err != nil || !cmp.Equal(want, got) {
		t.Errorf("after reopen Table = %+v, %v", got, err)
	}
	if _, err := ro.Begin("t"); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Begin on read-only DB: %v, want ErrReadOnly", err)
	}
}

func TestTablesSortedAndNotFound(t *testing.T) {
	db := openTemp(t)

	_, err := db.Table("x")
	var nf *TableNotFoundError
	if !errors.As(err, &nf) || !errors.Is(err, ErrTableNotFound) {
		t.Fatalf("Table on empty db: %v", err)
	}
	if want := `table "x" not found in ` + db.Path() + ` (no tables yet)`; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}

	for _, name := range []string{"b", "c", "a"} {
		g, err := db.Begin(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Publish(TableMeta{Topic: "topic-" + name}, nil); err != nil {
			t.Fatal(err)
		}
	}
	all, err := db.Tables()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range all {
		names = append(names, m.Name)
		if m.Topic != "topic-"+m.Name || m.Keys != 0 {
			t.Errorf("meta %+v", m)
		}
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, names); diff != "" {
		t.Errorf("Tables order (-want +got):\n%s", diff)
	}

	for _, call := range []func() error{
		func() error { _, err := db.Table("x"); return err },
		func() error { _, err := db.Get("x", []byte("k")); return err },
		func() error { return db.Scan("x", nil, 0, func(k, v []byte) error { return nil }) },
	} {
		err := call()
		if !errors.Is(err, ErrTableNotFound) {
			t.Fatalf("err = %v, want ErrTableNotFound", err)
		}
		if want := `table "x" not found in ` + db.Path() + ` (tables: a, b, c)`; err.Error() != want {
			t.Errorf("error = %q, want %q", err, want)
		}
	}
	// Empty table: Get says key not found, Scan calls nothing.
	if _, err := db.Get("a", []byte("k")); !errors.Is(err, ErrKeyNotFound) {
		t.Errorf("Get on empty table: %v", err)
	}
	if err := db.Scan("a", nil, 0, func(k, v []byte) error { return errors.New("called") }); err != nil {
		t.Errorf("Scan on empty table: %v", err)
	}
}

func TestGetReturnsCopy(t *testing.T) {
	db := openTemp(t)
	g, _ := db.Begin("t")
	if err := g.Write(func(tb Rows) error { return tb.Put([]byte("k"), []byte("value")) }); err != nil {
		t.Fatal(err)
	}
	if err := g.Publish(TableMeta{}, nil); err != nil {
		t.Fatal(err)
	}
	v, _ := db.Get("t", []byte("k"))
	v[0] = 'X' // would fault (read-only mmap) or corrupt if not a copy
	v2, _ := db.Get("t", []byte("k"))
	if string(v2) != "value" {
		t.Errorf("Get = %q after modifying an earlier result", v2)
	}
	if !strings.HasPrefix(string(v), "X") {
		t.Errorf("copy not modifiable")
	}
}

// TestRowsAfterPagesLikeOracle pages through a table with RowsAfter, with and
// without a prefix and with an after key that is absent, present, below and
// above the prefix, and compares each page with the oracle's sorted keys.
func TestRowsAfterPagesLikeOracle(t *testing.T) {
	db := openTemp(t)
	o := oracle{}
	g, err := db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	writeOps(t, g, o, randomOps(t, uint64(time.Now().UnixNano()), 2000), 500)
	if err := g.Publish(TableMeta{Topic: "x", Fold: "latest"}, nil); err != nil {
		t.Fatal(err)
	}
	// want is the oracle's answer: keys with prefix, above after, at most limit.
	want := func(prefix, after string, limit int) []string {
		var out []string
		for _, k := range o.sortedKeys(prefix) {
			if after != "" && k <= after {
				continue
			}
			if limit > 0 && len(out) == limit {
				break
			}
			out = append(out, k)
		}
		return out
	}
	got := func(prefix, after string, limit int) []string {
		var out []string
		err := db.ReadTable("t", func(s *Snapshot) error {
			return s.RowsAfter([]byte(prefix), []byte(after), limit, func(k, v []byte) error {
				if string(v) != o[string(k)] {
					t.Errorf("row %q = %q, oracle %q", k, v, o[string(k)])
				}
				out = append(out, string(k))
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	keys := o.sortedKeys("")
	if len(keys) < 10 {
		t.Fatalf("only %d keys", len(keys))
	}
	for _, c := range []struct{ prefix, after string }{
		{"", ""}, {"", keys[3]}, {"", keys[3] + "\x00"}, {"", "zzzz"},
		{"a/", ""}, {"a/", "a/0100"}, {"a/", "a/"}, {"a/", "0"}, {"a/", "b"}, {"ab/", "a/0001"},
	} {
		for _, limit := range []int{0, 1, 7} {
			if diff := cmp.Diff(want(c.prefix, c.after, limit), got(c.prefix, c.after, limit)); diff != "" {
				t.Errorf("prefix %q after %q limit %d (-want +got):\n%s", c.prefix, c.after, limit, diff)
			}
		}
	}
	// Paging with the last key of each page visits every row once.
	var all []string
	after := ""
	for {
		page := got("", after, 13)
		all = append(all, page...)
		if len(page) < 13 {
			break
		}
		after = page[len(page)-1]
	}
	if diff := cmp.Diff(keys, all); diff != "" {
		t.Errorf("paged scan (-want +got):\n%s", diff)
	}
}

// TestRangeRowsLikeOracle: every combination of prefix, From (inclusive),
// To (exclusive), after and limit gives the oracle's rows, filtered by a
// plain comparison of strings; Count agrees; paging a range with after
// visits each of its rows once.
func TestRangeRowsLikeOracle(t *testing.T) {
	db := openTemp(t)
	o := oracle{}
	g, err := db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	writeOps(t, g, o, randomOps(t, uint64(time.Now().UnixNano()), 2000), 500)
	if err := g.Publish(TableMeta{Topic: "x", Fold: "latest"}, nil); err != nil {
		t.Fatal(err)
	}
	keys := o.sortedKeys("")
	if len(keys) < 20 {
		t.Fatalf("only %d keys", len(keys))
	}
	want := func(prefix, from, to, after string, limit int) []string {
		var out []string
		for _, k := range keys {
			if !strings.HasPrefix(k, prefix) || (from != "" && k < from) || (to != "" && k >= to) || (after != "" && k <= after) {
				continue
			}
			if limit > 0 && len(out) == limit {
				break
			}
			out = append(out, k)
		}
		return out
	}
	got := func(r Range, after string, limit int) []string {
		var out []string
		err := db.ReadTable("t", func(s *Snapshot) error {
			return s.RangeAfter(r, []byte(after), limit, func(k, v []byte) error {
				if string(v) != o[string(k)] {
					t.Errorf("row %q = %q, oracle %q", k, v, o[string(k)])
				}
				out = append(out, string(k))
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// Bounds: absent, present keys, keys between two present ones, and
	// strings outside every key.
	bounds := []string{"", keys[2], keys[len(keys)/2], keys[5] + "\x00", "a/", "ab", "z", "0"}
	prefixes := []string{"", "a/", "z", "q"}
	cases := 0
	for _, prefix := range prefixes {
		for _, from := range bounds {
			for _, to := range bounds {
				for _, after := range []string{"", keys[3], keys[len(keys)/2] + "\x00"} {
					for _, limit := range []int{0, 7} {
						r := Range{Prefix: []byte(prefix), From: []byte(from), To: []byte(to)}
						if diff := cmp.Diff(want(prefix, from, to, after, limit), got(r, after, limit)); diff != "" {
							t.Fatalf("prefix %q from %q to %q after %q limit %d (-want +got):\n%s", prefix, from, to, after, limit, diff)
						}
						cases++
					}
				}
				r := Range{Prefix: []byte(prefix), From: []byte(from), To: []byte(to)}
				var n int64
				if err := db.ReadTable("t", func(s *Snapshot) (err error) { n, err = s.Count(r); return err }); err != nil {
					t.Fatal(err)
				}
				in := want(prefix, from, to, "", 0)
				if n != int64(len(in)) {
					t.Fatalf("Count(prefix %q from %q to %q) = %d, oracle %d", prefix, from, to, n, len(in))
				}
				set := map[string]bool{}
				for _, k := range in {
					set[k] = true
				}
				for _, k := range keys {
					if r.Contains([]byte(k)) != set[k] {
						t.Fatalf("Contains(%q) of prefix %q from %q to %q = %v, oracle %v", k, prefix, from, to, !set[k], set[k])
					}
				}
			}
		}
	}
	t.Logf("%d range cases", cases)

	// Paging a range with the last key of each page visits its rows once.
	r := Range{From: []byte(keys[4]), To: []byte(keys[len(keys)-4])}
	var all []string
	after := ""
	for {
		page := got(r, after, 11)
		all = append(all, page...)
		if len(page) < 11 {
			break
		}
		after = page[len(page)-1]
	}
	if diff := cmp.Diff(want("", keys[4], keys[len(keys)-4], "", 0), all); diff != "" {
		t.Errorf("paged range (-want +got):\n%s", diff)
	}
	// ScanRange is the same over the DB.
	var viaDB []string
	if err := db.ScanRange("t", r, 0, func(k, _ []byte) error { viaDB = append(viaDB, string(k)); return nil }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(all, viaDB); diff != "" {
		t.Errorf("ScanRange (-RangeAfter pages +ScanRange):\n%s", diff)
	}
}
