package materialize_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// TestLatestRebuildAgainstOracle folds random events (null keys,
// tombstones, repeated keys, an aborted transaction) with a write budget
// small enough to need many write transactions, and compares the published
// table and checkpoint with a plain fold.
func TestLatestRebuildAgainstOracle(t *testing.T) {
	// Every goroutine the rebuild starts (writer stages, log forwarders,
	// librdkafka's Go side) has ended when Rebuild returns.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	topic := uniqueTopic(t, 3)
	var recs []localkafka.Record
	for i := 0; i < 3000; i++ {
		// A key lives in one partition, as Kafka's partitioners place it:
		// across partitions the latest fold promises no order.
		r := localkafka.Record{Partition: int32(rng.IntN(3))}
		if rng.IntN(50) != 0 {
			k := rng.IntN(300)
			r.Key = []byte(fmt.Sprintf("k%03d", k))
			r.Partition = int32(k % 3)
		}
		if rng.IntN(10) != 0 {
			r.Value = []byte(fmt.Sprintf("v%d", i))
		}
		recs = append(recs, r)
	}
	offs, err := broker.Produce(ctx, topic, recs)
	if err != nil {
		t.Fatal(err)
	}
	txn, err := broker.BeginTxn(ctx, topic, "latest-oracle-abort")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := txn.Produce(ctx, []localkafka.Record{{Partition: 0, Key: []byte("k001"), Value: []byte("aborted")}}); err != nil {
		t.Fatal(err)
	}
	if err := txn.End(ctx, false); err != nil {
		t.Fatal(err)
	}

	// Oracle: per partition in offset order, last value wins, nil deletes.
	type pos struct {
		p int32
		o int64
	}
	byPos := map[pos]localkafka.Record{}
	for i, r := range recs {
		byPos[pos{r.Partition, offs[i]}] = r
	}
	want := map[string]string{}
	skipped := 0
	for p := int32(0); p < 3; p++ {
		for o := int64(0); o < int64(len(recs)); o++ {
			r, ok := byPos[pos{p, o}]
			if !ok {
				continue
			}
			switch {
			case r.Key == nil:
				skipped++
			case r.Value == nil:
				delete(want, string(r.Key))
			default:
				want[string(r.Key)] = string(r.Value)
			}
		}
	}

	db, err := store.Open(filepath.Join(t.TempDir(), "t.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	rep, err := materialize.Rebuild(ctx, materialize.Options{
		DB: db, WriteBudget: 4096, Log: log,
		Replay: replay.Config{Brokers: broker.Addr, Topic: topic, BatchRecords: 100, Log: log},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	if err := db.Scan(topic, nil, 0, func(k, v []byte) error { got[string(k)] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("table (-want +got):\n%s", diff)
	}
	if rep.Meta.Records != int64(len(recs)) || rep.Meta.Skipped != int64(skipped) || rep.Meta.Keys != int64(len(want)) {
		t.Fatalf("meta %+v: want %d records, %d skipped, %d keys", rep.Meta, len(recs), skipped, len(want))
	}
	var cp checkpoint.Checkpoint
	if err := db.View(func(tx *bolt.Tx) error {
		var err error
		cp, _, err = checkpoint.Load(tx, topic)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, p := range cp.Partitions {
		hw := marksOf(t, topic)[p.Partition].High
		if p.High != hw || p.End != p.High || p.Start != 0 {
			t.Fatalf("checkpoint %+v, broker high watermark %d", p, hw)
		}
	}
}
