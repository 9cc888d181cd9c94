package checkpoint_test

import (
	"encoding/binary"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/store"
)

func TestCheckTable(t *testing.T) {
	db := openTemp(t)
	good := checkpoint.Checkpoint{Topic: "orders", EndMark: checkpoint.EndHigh, Partitions: []checkpoint.Partition{{Partition: 0, Low: 0, Start: 0, High: 10, End: 10}}}
	err := db.Bolt().Update(func(tx *bolt.Tx) error {
		if err := checkpoint.Save(tx, "a", good); err != nil {
			return err
		}
		if err := checkpoint.Save(tx, "b", good); err != nil {
			return err
		}
		if err := checkpoint.Save(tx, "c", good); err != nil {
			return err
		}
		// c: a partition whose end is past its high mark, written raw
		// (Save refuses it).
		v := make([]byte, checkpoint.ValueLen)
		binary.BigEndian.PutUint64(v[16:], 5)
		binary.BigEndian.PutUint64(v[24:], 9)
		return tx.Bucket(store.BucketCheckpoints).Bucket([]byte("c")).Bucket(checkpoint.BucketPartitions).Put([]byte{0, 0, 0, 0}, v)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		meta store.TableMeta
		want string // "" for no problem
	}{
		{store.TableMeta{Name: "a", Topic: "orders"}, ""},
		{store.TableMeta{Name: "b", Topic: "payments"}, `checkpoint is of topic "orders", the table of topic "payments"`},
		{store.TableMeta{Name: "c", Topic: "orders"}, "end 9 is past high 5"},
		{store.TableMeta{Name: "d", Topic: "orders"}, "no checkpoint"},
	} {
		var got []string
		if err := db.View(func(tx *bolt.Tx) error { got = store.CheckCheckpoint(tx, tc.meta); return nil }); err != nil {
			t.Fatal(err)
		}
		if tc.want == "" {
			if len(got) != 0 {
				t.Errorf("table %s: problems %q, want none", tc.meta.Name, got)
			}
			continue
		}
		if len(got) != 1 || !strings.Contains(got[0], tc.want) {
			t.Errorf("table %s: problems %q, want one saying %q", tc.meta.Name, got, tc.want)
		}
	}
}
