package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// TestRebuildReaders: a rebuild with --readers N builds the table a plain
// fold of the produced records gives; --readers outside 1..64 is exit 2.
func TestRebuildReaders(t *testing.T) {
	topic := newTopic(t, 5)
	var recs []localkafka.Record
	want := map[string]string{}
	for i := 0; i < 2000; i++ {
		k, v := fmt.Sprintf("k%03d", i%300), fmt.Sprintf("v%d", i)
		recs = append(recs, localkafka.Record{Partition: int32(i % 300 % 5), Key: []byte(k), Value: []byte(v)})
		want[k] = v
	}
	if _, err := broker.Produce(context.Background(), topic, recs); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"1", "2", "5", "9"} {
		db := filepath.Join(t.TempDir(), "t.db")
		mustCLI(t, 0, rebuildArgs(topic, db, "--readers", n)...)
		if diff := cmp.Diff(want, scanAll(t, db, topic)); diff != "" {
			t.Fatalf("--readers %s: table (-fold +got):\n%s", n, diff)
		}
	}
	db := filepath.Join(t.TempDir(), "t.db")
	for _, n := range []string{"0", "65", "-2"} {
		mustCLI(t, 2, rebuildArgs(topic, db, "--readers", n)...)
	}
}
