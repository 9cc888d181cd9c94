package client_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/serve"
)

// TestClientRangeKeysOnlyCount: Rows with From (inclusive), To
// (exclusive) and Prefix, in small pages, with and without KeysOnly, and
// Count of the same ranges, each against the oracle filtered by plain
// string comparisons.
func TestClientRangeKeysOnlyCount(t *testing.T) {
	f := newFixture(t, false)
	o := map[string]string{}
	var kv []string
	for i := 0; i < 60; i++ {
		kv = append(kv, fmt.Sprintf("%s%02d", []string{"a/", "b/", "ab/"}[i%3], i), fmt.Sprintf("v%d", i))
	}
	kv = append(kv, "b/03", "") // a tombstone
	f.produce(t, o, kv...)
	awaitReady(t, f.cl)
	var keys []string
	for k := range o {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	want := func(prefix, from, to string) []string {
		var out []string
		for _, k := range keys {
			if strings.HasPrefix(k, prefix) && (from == "" || k >= from) && (to == "" || k < to) {
				out = append(out, k)
			}
		}
		return out
	}
	for _, c := range []struct{ prefix, from, to string }{
		{"", "", ""}, {"", "ab/", "b/"}, {"", "a/10", "a/40"}, {"b/", "b/2", ""}, {"a", "", "ab/50"},
		{"", "b/", "a/"}, {"", keys[5], keys[5]}, {"", keys[5], keys[6]}, {"zz", "", ""},
	} {
		for _, keysOnly := range []bool{false, true} {
			var got []string
			_, err := f.cl.Rows(ctx(t), "t", client.RowsOptions{Prefix: []byte(c.prefix), From: []byte(c.from), To: []byte(c.to),
				KeysOnly: keysOnly, PageSize: 4, Base64: keysOnly}, func(r client.Row) error {
				if keysOnly && r.Value != nil {
					t.Errorf("keys only: row %q has a value %q", r.Key, r.Value)
				}
				if !keysOnly && string(r.Value) != o[string(r.Key)] {
					t.Errorf("row %q = %q, oracle %q", r.Key, r.Value, o[string(r.Key)])
				}
				got = append(got, string(r.Key))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want(c.prefix, c.from, c.to), got); diff != "" {
				t.Fatalf("Rows %+v keys only %v (-oracle +got):\n%s", c, keysOnly, diff)
			}
		}
		n, gen, err := f.cl.Count(ctx(t), "t", client.CountOptions{Prefix: []byte(c.prefix), From: []byte(c.from), To: []byte(c.to)})
		if err != nil {
			t.Fatal(err)
		}
		if n != int64(len(want(c.prefix, c.from, c.to))) || gen == 0 {
			t.Fatalf("Count %+v = %d (generation %d), oracle %d", c, n, gen, len(want(c.prefix, c.from, c.to)))
		}
	}
	if _, _, err := f.cl.Count(ctx(t), "nope", client.CountOptions{}); !client.IsCode(err, client.CodeTableNotFound) {
		t.Fatalf("Count of a missing table: %v, want table_not_found", err)
	}
}

// TestClientRowsByteBudget: with a page byte budget of 2500 bytes, the
// daemon ends pages of 1000-byte values after two rows (and sends a 6000
// byte value alone) with Kmaterialize-More, although the page size asked
// is 1000 rows; Rows follows the pages and reads every row (the oracle).
func TestClientRowsByteBudget(t *testing.T) {
	f := newFixtureWith(t, false, "", "", func(c *serve.Config) { c.PageMaxBytes = 2500 })
	o := map[string]string{}
	var kv []string
	for i := 0; i < 30; i++ {
		v := strings.Repeat(fmt.Sprint(i%10), 1000)
		if i == 11 {
			v = strings.Repeat("L", 6000)
		}
		kv = append(kv, fmt.Sprintf("k%02d", i), v)
	}
	f.produce(t, o, kv...)
	awaitReady(t, f.cl)
	got := map[string]string{}
	_, err := f.cl.Rows(ctx(t), "t", client.RowsOptions{PageSize: 1000}, func(r client.Row) error {
		got[string(r.Key)] = string(r.Value)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(o, got); diff != "" {
		t.Fatalf("Rows over pages of 2500 bytes (-oracle +got):\n%s", diff)
	}
}
