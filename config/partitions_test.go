package config_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/config"
	"github.com/kmaterialize/kmaterialize/partition"
)

// TestPartitionsLoad: a table's partitions: in each form it may take (the
// set syntax, a lone number, a YAML list in any order, flow or block, an
// alias) is the sorted set, and partitioner: any of its names is the
// canonical one; a table without them holds every partition and has none.
// The oracle is the set written out by hand.
func TestPartitionsLoad(t *testing.T) {
	const head = "db: t.db\nkafka: {brokers: k:9092}\ntables:\n"
	for _, tc := range []struct {
		name        string
		fields      string
		partitions  []int32
		partitioner string
	}{
		{"absent", "", nil, ""},
		{"null", "    partitions: ~\n    partitioner: ~\n", nil, ""},
		{"range", "    partitions: 0-5\n", []int32{0, 1, 2, 3, 4, 5}, ""},
		{"list syntax", "    partitions: \"4, 0,2\"\n", []int32{0, 2, 4}, ""},
		{"ranges and numbers", "    partitions: 7,0-2,9-10\n", []int32{0, 1, 2, 7, 9, 10}, ""},
		{"one number", "    partitions: 3\n", []int32{3}, ""},
		{"flow list", "    partitions: [4, 0, 2]\n", []int32{0, 2, 4}, ""},
		{"block list", "    partitions:\n      - 1\n      - 0\n", []int32{0, 1}, ""},
		{"alias", "    partitions: &p [5, 6]\n    partitioner: consistent\n", []int32{5, 6}, "consistent"},
		{"murmur2", "    partitioner: murmur2\n", nil, "murmur2"},
		{"librdkafka name", "    partitioner: fnv1a_random\n    key_format: raw\n", nil, "fnv1a"},
		{"consistent_random", "    partitions: 0\n    partitioner: consistent_random\n", []int32{0}, "consistent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parse(t, write(t, head+"  - name: a\n    topic: t\n"+tc.fields, nil), nil)
			if err != nil {
				t.Fatal(err)
			}
			s := c.Tables[0].Spec
			if diff := cmp.Diff(tc.partitions, s.Partitions); diff != "" {
				t.Errorf("partitions (-want +got):\n%s", diff)
			}
			if s.Partitioner != tc.partitioner {
				t.Errorf("partitioner %q, want %q", s.Partitioner, tc.partitioner)
			}
		})
	}
}

// TestPartitionsErrors: a bad partitions: or partitioner: is an *Error
// (exit 2) at its line that names the table, the field and the value, and
// a partitioner over keys that are not raw is refused saying why.
func TestPartitionsErrors(t *testing.T) {
	const head = "db: t.db\nkafka: {brokers: k:9092}\ntables:\n  - name: orders\n    topic: t\n"
	for _, tc := range []struct {
		name   string
		fields string
		line   int
		want   []string
		set    bool // the error is partition.ErrBadSet
	}{
		{"not a number", "    partitions: 0-x\n", 6, []string{"tables[0].partitions", `table "orders"`, `"0-x"`, "not a partition number"}, true},
		{"empty", "    partitions: \"\"\n", 6, []string{"tables[0].partitions", `table "orders"`, "empty"}, true},
		{"overlap", "    partitions: 0-3,2\n", 6, []string{"tables[0].partitions", `"0-3,2"`, "partition 2 is named twice"}, true},
		{"backwards", "    partitions: 5-2\n", 6, []string{"tables[0].partitions", `"5-2"`, "runs backwards"}, true},
		{"negative", "    partitions: -1\n", 6, []string{"tables[0].partitions", `"-1"`}, true},
		{"too large", "    partitions: 0-2000000\n", 6, []string{"tables[0].partitions", "above"}, true},
		{"stray comma", "    partitions: 0,,2\n", 6, []string{"tables[0].partitions", "empty item"}, true},
		{"list, negative", "    partitions: [0, -3]\n", 6, []string{"tables[0].partitions", `table "orders"`, "[0 -3]", "partition -3 is negative"}, true},
		{"list, twice", "    partitions: [1, 2, 1]\n", 6, []string{"tables[0].partitions", "[1 2 1]", "partition 1 is named twice"}, true},
		{"list, too large", "    partitions: [4294967296]\n", 6, []string{"tables[0].partitions", "above"}, true},
		{"empty list", "    partitions: []\n", 6, []string{"tables[0].partitions", `table "orders"`, "empty list", "leave partitions out"}, true},
		{"list of strings", "    partitions: [0, two]\n", 6, []string{"tables[0].partitions", "item 1 is a string", "not a partition number"}, false},
		{"list of ranges", "    partitions: [0-2]\n", 6, []string{"tables[0].partitions", "item 0 is a string"}, false},
		{"nested list", "    partitions: [[0]]\n", 6, []string{"tables[0].partitions", "item 0 is a list"}, false},
		{"mapping", "    partitions: {from: 0}\n", 6, []string{"tables[0].partitions", "cannot unmarshal a mapping", "0-5"}, false},
		{"a ${ in a literal field", "    partitions: ${P}\n", 6, []string{"tables[0].partitions", "${"}, false},
		{"unknown partitioner", "    partitioner: crc32\n", 6, []string{"tables[0].partitioner", `table "orders"`, `"crc32"`, "murmur2, consistent, fnv1a"}, false},
		{"random partitioner", "    partitioner: random\n", 6, []string{"tables[0].partitioner", "ignores the key"}, false},
		{"partitioner over json keys", "    key_format: json\n    partitioner: murmur2\n", 7,
			[]string{"tables[0].partitioner", `table "orders"`, "murmur2", "key_format json", "producers hash the serialized key bytes", "key_format raw"}, false},
		{"partitioner over avro keys", "    partitioner: consistent\n    key_format: avro\nschema_registry: {url: \"http://r:8081\"}\n", 6,
			[]string{"tables[0].partitioner", "key_format avro", "serialized key bytes"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, head+tc.fields, nil)
			_, err := parse(t, path, nil)
			var ce *config.Error
			if !errors.As(err, &ce) || !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("Parse = %v, want a *config.Error", err)
			}
			if ce.Line != tc.line {
				t.Errorf("line %d, want %d (%v)", ce.Line, tc.line, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, fmt.Sprintf("%s:%d:", path, tc.line)) {
				t.Errorf("%q does not name line %d", msg, tc.line)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q does not contain %q", msg, w)
				}
			}
			if tc.set && !errors.Is(err, partition.ErrBadSet) {
				t.Errorf("%v does not match partition.ErrBadSet", err)
			}
		})
	}
}
