package fold

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const topic = "studio-votes"

// parts builds partitions from JSON values: parts[p][i] is at offset i.
func parts(values ...[]string) [][]Record {
	out := make([][]Record, len(values))
	for p, vs := range values {
		for off, v := range vs {
			out[p] = append(out[p], Record{Partition: int32(p), Offset: int64(off), Key: []byte("k"), Value: []byte(v)})
		}
	}
	return out
}

// outcome is what a count fold produced: rows, or Finish's error message.
type outcome struct {
	Rows  map[string]string
	Err   string
	Extra map[string]int64
}

// oracleCount is a plain count fold written independently of Count:
// contents are compared with reflect.DeepEqual on encoding/json's decoding
// (float64 numbers), and every record is kept in memory.
func oracleCount(t *testing.T, cfg CountConfig, ps [][]Record) outcome {
	t.Helper()
	type content struct {
		v     map[string]any
		first Position
	}
	type event struct {
		group    string
		contents []content
	}
	events := map[string]*event{}
	dups := int64(0)
	for _, recs := range ps {
		for _, r := range recs {
			var m map[string]any
			if err := json.Unmarshal(r.Value, &m); err != nil {
				t.Fatalf("oracle: bad test value %s: %v", r.Value, err)
			}
			id, group := fmt.Sprint(m[cfg.IdentityField]), fmt.Sprint(m[cfg.GroupField])
			for _, f := range cfg.IgnoreFields {
				delete(m, f)
			}
			pos := Position{r.Partition, r.Offset}
			e := events[id]
			if e == nil {
				e = &event{group: group}
				events[id] = e
			}
			found := false
			for i := range e.contents {
				if reflect.DeepEqual(e.contents[i].v, m) {
					found = true
					dups++
					if pos.Partition < e.contents[i].first.Partition || pos.Partition == e.contents[i].first.Partition && pos.Offset < e.contents[i].first.Offset {
						e.contents[i].first = pos
					}
				}
			}
			if !found {
				e.contents = append(e.contents, content{m, pos})
			}
		}
	}
	var conflicting []string
	for id, e := range events {
		if len(e.contents) > 1 {
			conflicting = append(conflicting, id)
		}
	}
	out := outcome{Extra: map[string]int64{
		"logical_events": int64(len(events)), "duplicates_folded": dups, "conflicts": int64(len(conflicting)),
	}}
	if len(conflicting) > 0 {
		slices.Sort(conflicting)
		id := conflicting[0]
		var ps []Position
		for _, c := range events[id].contents {
			ps = append(ps, c.first)
		}
		slices.SortFunc(ps, func(a, b Position) int {
			if a.Partition != b.Partition {
				return int(a.Partition - b.Partition)
			}
			return int(a.Offset - b.Offset)
		})
		out.Err = fmt.Sprintf("conflicting %s %q: %s/%d@%d vs %s/%d@%d", cfg.IdentityField, id,
			topic, ps[0].Partition, ps[0].Offset, topic, ps[1].Partition, ps[1].Offset)
		if len(conflicting) > 1 {
			out.Err += fmt.Sprintf(" (and %d more conflicting identities)", len(conflicting)-1)
		}
		return out
	}
	out.Rows = map[string]string{}
	for _, g := range cfg.Catalog {
		out.Rows[g] = "0"
	}
	counts := map[string]int{}
	for _, e := range events {
		counts[e.group]++
	}
	for g, n := range counts {
		out.Rows[g] = strconv.Itoa(n)
	}
	return out
}

// runCount folds batches with a fresh Count and returns the outcome.
func runCount(t *testing.T, cfg CountConfig, batches [][]Record) outcome {
	t.Helper()
	c, err := NewCount(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tab := newMemTable()
	var records int64
	for _, b := range batches {
		records += int64(len(b))
		cp, wipe := scratchCopy(b)
		if err := c.Fold(tab, cp); err != nil {
			t.Fatalf("Fold: %v", err)
		}
		wipe()
	}
	st := c.Stats()
	if st.Records != records || st.Skipped != 0 {
		t.Errorf("Stats: records %d skipped %d, want %d and 0", st.Records, st.Skipped, records)
	}
	out := outcome{Extra: st.Extra}
	if err := c.Finish(tab); err != nil {
		var ce *ConflictError
		if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidData) {
			t.Fatalf("Finish: %v is not a *ConflictError matching ErrInvalidData", err)
		}
		if len(tab.m) != 0 {
			t.Errorf("Finish wrote rows %v despite a conflict", tab.rows())
		}
		out.Err = err.Error()
		return out
	}
	out.Rows = tab.rows()
	return out
}

var votesCatalog = []string{"cedar", "maple", "willow"}

func TestCount(t *testing.T) {
	base := CountConfig{Topic: topic, IdentityField: "event_id", GroupField: "booth"}
	with := func(f func(*CountConfig)) CountConfig { c := base; f(&c); return c }
	objCatalog, err := ParseCatalog([]byte(`{"willow": {"floor": 2}, "cedar": 1, "maple": null}`))
	if err != nil {
		t.Fatal(err)
	}
	eightVotes := parts(
		[]string{`{"event_id":"v-1","booth":"cedar","voter":"u-1"}`, `{"event_id":"v-2","booth":"maple","voter":"u-2"}`, `{"event_id":"v-1","booth":"cedar","voter":"u-1"}`},
		[]string{`{"event_id":"v-3","booth":"cedar","voter":"u-3"}`, `{"voter":"u-2","booth":"maple","event_id":"v-2"}`, `{"event_id":"v-4","booth":"maple","voter":"u-4"}`},
		[]string{`{"event_id":"v-5","booth":"cedar","voter":"u-5"}`, `{ "event_id" : "v-3", "booth":"cedar", "voter":"u-3" }`},
	)
	sentAt := parts(
		[]string{`{"event_id":"v-1","booth":"cedar","sent_at":"2026-01-01T10:00:00Z"}`},
		[]string{`{"event_id":"v-1","booth":"cedar","sent_at":"2026-01-01T10:00:07Z"}`, `{"event_id":"v-2","booth":"maple","sent_at":1}`},
	)
	// v-17: content A at 1@4 (lowest A) and 2@1; content B at 3@0 (lowest B) and 3@2.
	pad := `{"event_id":"pad-%d","booth":"cedar"}`
	conflict := parts(
		[]string{`{"event_id":"v-1","booth":"cedar"}`},
		[]string{fmt.Sprintf(pad, 0), fmt.Sprintf(pad, 1), fmt.Sprintf(pad, 2), fmt.Sprintf(pad, 3), `{"event_id":"v-17","booth":"cedar"}`},
		[]string{fmt.Sprintf(pad, 3), `{"event_id":"v-17","booth":"cedar"}`},
		[]string{`{"event_id":"v-17","booth":"maple"}`, `{"event_id":"v-1","booth":"cedar"}`, `{"event_id":"v-17","booth":"maple"}`},
	)
	twoConflicts := parts(
		[]string{`{"event_id":"v-9","booth":"cedar"}`, `{"event_id":"v-10","booth":"cedar"}`},
		[]string{`{"event_id":"v-9","booth":"maple"}`, `{"event_id":"v-10","booth":"cedar","x":1}`},
	)
	threeContents := parts(
		[]string{`{"event_id":"e","booth":"cedar"}`, `{"event_id":"e","booth":"willow"}`},
		[]string{`{"event_id":"e","booth":"maple"}`, `{"event_id":"e","booth":"cedar"}`},
		[]string{`{"event_id":"e","booth":"cedar","n":1}`},
	)
	numbers := parts(
		[]string{`{"event_id":17,"booth":"cedar","w":1.0,"tags":["a",{"y":2,"x":1}]}`, `{"event_id":18,"booth":"maple","w":2}`},
		[]string{`{"booth":"cedar","event_id":17.0,"tags":["a",{"x":1,"y":20e-1}],"w":10E-1}`},
	)

	tests := []struct {
		name string
		cfg  CountConfig
		in   [][]Record
		want *outcome // checked in addition to the oracle, when set
	}{
		{"eight records five votes", with(func(c *CountConfig) { c.Catalog = votesCatalog }), eightVotes,
			&outcome{Rows: map[string]string{"cedar": "3", "maple": "2", "willow": "0"},
				Extra: map[string]int64{"logical_events": 5, "duplicates_folded": 3, "conflicts": 0}}},
		{"no catalog", base, eightVotes,
			&outcome{Rows: map[string]string{"cedar": "3", "maple": "2"},
				Extra: map[string]int64{"logical_events": 5, "duplicates_folded": 3, "conflicts": 0}}},
		{"catalog as object", with(func(c *CountConfig) { c.Catalog = objCatalog }), eightVotes,
			&outcome{Rows: map[string]string{"cedar": "3", "maple": "2", "willow": "0"},
				Extra: map[string]int64{"logical_events": 5, "duplicates_folded": 3, "conflicts": 0}}},
		{"allow unknown groups", with(func(c *CountConfig) { c.Catalog = []string{"cedar", "oak"}; c.AllowUnknownGroups = true }), eightVotes,
			&outcome{Rows: map[string]string{"cedar": "3", "maple": "2", "oak": "0"},
				Extra: map[string]int64{"logical_events": 5, "duplicates_folded": 3, "conflicts": 0}}},
		{"ignored send time", with(func(c *CountConfig) { c.IgnoreFields = []string{"sent_at"} }), sentAt,
			&outcome{Rows: map[string]string{"cedar": "1", "maple": "1"},
				Extra: map[string]int64{"logical_events": 2, "duplicates_folded": 1, "conflicts": 0}}},
		{"send time not ignored", base, sentAt,
			&outcome{Err: `conflicting event_id "v-1": studio-votes/0@0 vs studio-votes/1@0`,
				Extra: map[string]int64{"logical_events": 2, "duplicates_folded": 0, "conflicts": 1}}},
		{"conflict", base, conflict,
			&outcome{Err: `conflicting event_id "v-17": studio-votes/1@4 vs studio-votes/3@0`,
				Extra: map[string]int64{"logical_events": 6, "duplicates_folded": 4, "conflicts": 1}}},
		{"two conflicts, smallest identity", base, twoConflicts,
			&outcome{Err: `conflicting event_id "v-10": studio-votes/0@1 vs studio-votes/1@1 (and 1 more conflicting identities)`,
				Extra: map[string]int64{"logical_events": 2, "duplicates_folded": 0, "conflicts": 2}}},
		{"three contents", base, threeContents,
			&outcome{Err: `conflicting event_id "e": studio-votes/0@0 vs studio-votes/0@1`,
				Extra: map[string]int64{"logical_events": 1, "duplicates_folded": 1, "conflicts": 1}}},
		{"numbers and key order", base, numbers,
			&outcome{Rows: map[string]string{"cedar": "1", "maple": "1"},
				Extra: map[string]int64{"logical_events": 2, "duplicates_folded": 1, "conflicts": 0}}},
		{"empty", with(func(c *CountConfig) { c.Catalog = votesCatalog }), nil,
			&outcome{Rows: map[string]string{"cedar": "0", "maple": "0", "willow": "0"},
				Extra: map[string]int64{"logical_events": 0, "duplicates_folded": 0, "conflicts": 0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := oracleCount(t, tc.cfg, tc.in)
			if tc.want != nil {
				if d := cmp.Diff(*tc.want, want); d != "" {
					t.Fatalf("oracle disagrees with the stated expectation (-stated +oracle):\n%s", d)
				}
			}
			forward := slices.Clone(tc.in)
			reverse := slices.Clone(tc.in)
			slices.Reverse(reverse)
			orders := map[string][][]Record{"forward": forward, "reverse": reverse}
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 7))
			for i := range 5 {
				orders[fmt.Sprintf("random-%d", i)] = interleave(rng, tc.in, 1+rng.IntN(3))
			}
			for name, batches := range orders {
				got := runCount(t, tc.cfg, batches)
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("%s order (-oracle +got):\n%s", name, d)
				}
			}
		})
	}
}

func TestCountDataErrors(t *testing.T) {
	good := `{"event_id":"v-1","booth":"cedar"}`
	tests := []struct {
		name   string
		cfg    func(*CountConfig)
		value  string
		null   bool
		reason string // the whole message after "studio-votes/2@5: ", or its prefix ending in "..."
	}{
		{"null value", nil, "", true, "value is null"},
		{"not JSON", nil, `{"event_id":`, false, "value is not JSON: ..."},
		{"trailing data", nil, good + ` {}`, false, "value is not JSON: trailing data ..."},
		{"empty value", nil, ``, false, "value is not JSON: empty input"},
		{"array", nil, `["v-1"]`, false, "value is a JSON array, not an object"},
		{"string", nil, `"v-1"`, false, "value is a JSON string, not an object"},
		{"missing identity", nil, `{"booth":"cedar"}`, false, `field "event_id" is missing`},
		{"missing group", nil, `{"event_id":"v-1"}`, false, `field "booth" is missing`},
		{"identity is bool", nil, `{"event_id":true,"booth":"cedar"}`, false, `field "event_id" is a JSON boolean, not a string or number`},
		{"identity is null", nil, `{"event_id":null,"booth":"cedar"}`, false, `field "event_id" is a JSON null, not a string or number`},
		{"group is object", nil, `{"event_id":"v-1","booth":{}}`, false, `field "booth" is a JSON object, not a string or number`},
		{"empty identity", nil, `{"event_id":"","booth":"cedar"}`, false, `field "event_id" is empty`},
		{"unknown group", func(c *CountConfig) { c.Catalog = votesCatalog }, `{"event_id":"v-1","booth":"oak"}`, false,
			`group "oak" is not in the catalog (use --allow-unknown-groups to accept it)`},
		{"empty catalog", func(c *CountConfig) { c.Catalog = []string{} }, good, false,
			`group "cedar" is not in the catalog (use --allow-unknown-groups to accept it)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := CountConfig{Topic: topic, IdentityField: "event_id", GroupField: "booth"}
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			c, err := NewCount(cfg)
			if err != nil {
				t.Fatal(err)
			}
			bad := Record{Partition: 2, Offset: 5}
			if !tc.null {
				bad.Value = []byte(tc.value)
			}
			err = c.Fold(newMemTable(), []Record{bad})
			var de *DataError
			if !errors.As(err, &de) || !errors.Is(err, ErrInvalidData) {
				t.Fatalf("Fold = %v, want a *DataError matching ErrInvalidData", err)
			}
			if de.Topic != topic || de.Partition != 2 || de.Offset != 5 {
				t.Errorf("DataError at %s/%d@%d, want %s/2@5", de.Topic, de.Partition, de.Offset, topic)
			}
			msg := strings.TrimPrefix(err.Error(), "studio-votes/2@5: ")
			if prefix, ok := strings.CutSuffix(tc.reason, "..."); ok {
				if !strings.HasPrefix(msg, prefix) || msg == prefix {
					t.Errorf("message %q, want %q followed by details", err, prefix)
				}
			} else if msg != tc.reason {
				t.Errorf("message %q, want %q", err, "studio-votes/2@5: "+tc.reason)
			}
			var ce *ConflictError
			if errors.As(err, &ce) {
				t.Errorf("a DataError is also a ConflictError")
			}
		})
	}
}

func TestCountDataErrorInBatch(t *testing.T) {
	// The error names the bad record even when it is not the first of its batch.
	c, err := NewCount(CountConfig{Topic: topic, IdentityField: "event_id", GroupField: "booth"})
	if err != nil {
		t.Fatal(err)
	}
	batch := parts(nil, nil, []string{`{"event_id":"a","booth":"x"}`, `{"event_id":"a","booth":"x"}`, `not json`})[2]
	err = c.Fold(newMemTable(), batch)
	var de *DataError
	if !errors.As(err, &de) || de.Partition != 2 || de.Offset != 2 {
		t.Fatalf("Fold = %v, want a DataError at 2@2", err)
	}
	if !strings.HasPrefix(err.Error(), "studio-votes/2@2: value is not JSON: invalid character") {
		t.Errorf("message %q", err)
	}
}

func TestNewCountErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  CountConfig
		want string
	}{
		{"no identity", CountConfig{GroupField: "booth"}, "identity field is required"},
		{"no group", CountConfig{IdentityField: "event_id"}, "group field is required"},
		{"group ignored", CountConfig{IdentityField: "id", GroupField: "booth", IgnoreFields: []string{"booth"}}, `group field "booth" cannot be ignored`},
		{"empty catalog name", CountConfig{IdentityField: "id", GroupField: "booth", Catalog: []string{"a", ""}}, "empty group name"},
		{"repeated catalog name", CountConfig{IdentityField: "id", GroupField: "booth", Catalog: []string{"a", "a"}}, `names group "a" twice`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewCount(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewCount = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestParseCatalog(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{`["cedar","maple","willow"]`, []string{"cedar", "maple", "willow"}, ""},
		{`["willow","cedar"]`, []string{"willow", "cedar"}, ""},
		{`{"willow":1,"cedar":{"x":[1]},"maple":null}`, []string{"cedar", "maple", "willow"}, ""},
		{` [] `, []string{}, ""},
		{`{}`, []string{}, ""},
		{`["a",1]`, nil, "catalog entry 1 is a JSON number, not a string"},
		{`["a","a"]`, nil, `catalog names "a" twice`},
		{`["a",""]`, nil, "catalog entry 1 is an empty name"},
		{`"cedar"`, nil, "catalog is a JSON string; want an array of group names or an object whose keys are the names"},
		{`cedar,maple`, nil, "catalog is not JSON: "},
		{``, nil, "catalog is not JSON: empty input"},
		{`["a"] ["b"]`, nil, "catalog is not JSON: trailing data"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseCatalog([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("ParseCatalog = %v, %v; want an error starting %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got == nil || !slices.Equal(got, tc.want) {
				t.Errorf("ParseCatalog = %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestCountParams(t *testing.T) {
	c, err := NewCount(CountConfig{IdentityField: "event_id", GroupField: "booth", IgnoreFields: []string{"sent_at", "attempt", "sent_at"}, Catalog: votesCatalog})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"identity_field": "event_id", "group_field": "booth", "ignore_fields": "attempt,sent_at", "catalog_size": "3", "allow_unknown_groups": "false"}
	if d := cmp.Diff(want, c.Params()); d != "" {
		t.Errorf("Params (-want +got):\n%s", d)
	}
	c, _ = NewCount(CountConfig{IdentityField: "id", GroupField: "g", AllowUnknownGroups: true})
	want = map[string]string{"identity_field": "id", "group_field": "g", "ignore_fields": "", "allow_unknown_groups": "true"}
	if d := cmp.Diff(want, c.Params()); d != "" {
		t.Errorf("Params without catalog (-want +got):\n%s", d)
	}
	if c.Name() != "count" {
		t.Errorf("Name = %q", c.Name())
	}
}

func TestCountIndexOnDisk(t *testing.T) {
	// Identities live in the table's "identity" index, not in the fold.
	c, _ := NewCount(CountConfig{IdentityField: "id", GroupField: "g"})
	tab := newMemTable()
	var batch []Record
	for i := range 1000 {
		batch = append(batch, Record{Offset: int64(i), Value: []byte(fmt.Sprintf(`{"id":"e%d","g":"x"}`, i))})
	}
	if err := c.Fold(tab, batch); err != nil {
		t.Fatal(err)
	}
	if got := tab.indexNames(); !slices.Equal(got, []string{"identity"}) {
		t.Fatalf("indexes %v", got)
	}
	if n := len(tab.indexes["identity"].m); n != 1000 {
		t.Errorf("identity index has %d entries, want 1000", n)
	}
	if len(c.counts) != 1 {
		t.Errorf("fold keeps %d groups in memory, want 1", len(c.counts))
	}
}

func BenchmarkCountFold(b *testing.B) {
	c, _ := NewCount(CountConfig{IdentityField: "event_id", GroupField: "booth", IgnoreFields: []string{"sent_at"}})
	tab := newMemTable()
	batch := make([]Record, 1000)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		for i := range batch {
			batch[i] = Record{Offset: int64(n), Value: []byte(fmt.Sprintf(`{"event_id":"v-%d","booth":"b%d","voter":"u-%d","sent_at":"2026-01-01T10:00:0%dZ"}`, n/2, n/2%7, n/2, n%2))}
			n++
		}
		if err := c.Fold(tab, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkCountFoldHeld is the count fold as a rebuild runs it (sorted
// externally): the JSON checks, the canonical content and its hash, and
// the identities held in memory; one distinct identity per record.
func BenchmarkCountFoldHeld(b *testing.B) {
	c, _ := NewCount(CountConfig{IdentityField: "id", GroupField: "g"})
	c.SortExternally(64 << 20)
	batch := make([]Record, 1000)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		for i := range batch {
			batch[i] = Record{Offset: int64(n), Value: fmt.Appendf(nil, `{"id":"key-%08d","g":"g%02d","pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`, n, n%100)}
			n++
		}
		if err := c.Fold(nil, batch); err != nil {
			b.Fatal(err)
		}
		if c.Full() {
			c.Reset()
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}
