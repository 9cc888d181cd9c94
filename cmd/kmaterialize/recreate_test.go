package main

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
)

// TestUpdateRecreatedTopic: the table's topic is deleted and created again
// under the same name and grows past the checkpoint on every partition, so
// neither "partition missing" nor "checkpoint above high" can tell; the
// checkpoint's topic ID does: update exits 4 naming both IDs and the
// export is unchanged byte for byte; --rebuild-if-needed publishes exactly
// the new topic's fold.
func TestUpdateRecreatedTopic(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 2)
	db := dbPath(t)
	const table = "re"
	produce(t, topic, genRecords(rng, []int32{0, 1}, 100))
	bin(t, 0, rebuildArgs(topic, db, "--table", table)...)
	ends := map[int32]int64{}
	for _, p := range tablesJSON(t, db)[table].Partitions {
		ends[p.Partition] = p.End
	}

	was, now := recreate(t, topic, 2)
	fresh := produce(t, topic, genRecords(rng, []int32{0, 1}, 400))
	for p, end := range ends {
		if high := marksOf(t, topic)[p].High; high <= end {
			t.Fatalf("partition %d: the new topic's high %d is not past the checkpoint %d", p, high, end)
		}
	}

	before := bin(t, 0, "export", "--db", db, "--table", table).stdout
	r := bin(t, 4, updateArgs(db, table)...)
	id := func(b [16]byte) string { return base64.RawURLEncoding.EncodeToString(b[:]) }
	if want := fmt.Sprintf("topic %s was recreated: id %s, now %s", topic, id(was), id(now)); !strings.Contains(r.stderr, want) {
		t.Fatalf("refusal lacks %q:\n%s", want, r.stderr)
	}
	if after := bin(t, 0, "export", "--db", db, "--table", table).stdout; after != before {
		t.Fatalf("a refused update changed the export:\nbefore %s\nafter  %s", before, after)
	}

	bin(t, 0, updateArgs(db, table, "--rebuild-if-needed")...)
	want, _, _ := oracle(fresh, nil)
	checkTable(t, want, scanTable(t, db, table))
	sameAsRebuild(t, topic, db, table)
}
