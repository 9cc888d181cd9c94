package client_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/serve"
	"github.com/kmaterialize/kmaterialize/store"
)

func TestMinPositionsFromDelivery(t *testing.T) {
	got := client.MinPositionsFromDelivery(
		client.Delivery{Partition: 1, Offset: 1299}, client.Delivery{Partition: 4, Offset: 76},
		client.Delivery{Partition: 1, Offset: 17}, client.Delivery{Partition: 0, Offset: 0})
	if want := map[int32]int64{0: 1, 1: 1300, 4: 77}; !maps.Equal(got, want) {
		t.Fatalf("MinPositionsFromDelivery = %v, want %v", got, want)
	}
	if got := client.MinPositionsFromOffsets(map[int32]int64{2: 9}); !maps.Equal(got, map[int32]int64{2: 10}) {
		t.Fatalf("MinPositionsFromOffsets = %v", got)
	}
}

// followedTable is table "t", the latest fold of topic, followed by the
// daemon as cmd/kmaterialize wires it.
func followedTable(topic string) serve.Table {
	spec := materialize.Spec{Name: "t", Topic: topic, StallTimeout: 20 * time.Second}
	rebuild := func(ctx context.Context, db *store.DB, log zerolog.Logger, catchUp func(context.Context) (map[int32]int64, error)) (materialize.Report, error) {
		opts, err := spec.Options(db, broker.Addr, nil, log)
		if err != nil {
			return materialize.Report{}, err
		}
		opts.CatchUp = catchUp
		return materialize.Rebuild(ctx, opts)
	}
	rc := replay.Config{Brokers: broker.Addr, StallTimeout: 20 * time.Second}
	f := serve.FollowSettings{
		Run: func(ctx context.Context, db *store.DB, log zerolog.Logger, st *materialize.FollowStatus) error {
			return materialize.KeepCurrent(ctx, materialize.FollowOptions{DB: db, Spec: spec, Status: st, Log: log,
				Interval: 50 * time.Millisecond, Refresh: 100 * time.Millisecond, Replay: rc})
		},
		Live: func(ctx context.Context, db *store.DB, log zerolog.Logger, st *materialize.FollowStatus) error {
			return materialize.WatchLive(ctx, materialize.FollowOptions{DB: db, Spec: spec, Status: st, Log: log,
				Refresh: 100 * time.Millisecond, Replay: rc})
		},
		Rebuild:   rebuild,
		Retriable: materialize.FollowRetriable,
	}
	return serve.Table{Name: "t", Topic: topic, Fold: spec.Fold, Follow: &f,
		Build: func(ctx context.Context, db *store.DB, log zerolog.Logger) (materialize.Report, error) {
			return rebuild(ctx, db, log, nil)
		}}
}

// TestReadYourWrites: a producer writes a key of its own per partition,
// one record at a time, and reads it back through the daemon that follows
// the topic, with MinPositionsFromDelivery of the record's delivery report
// and a wait: it always reads the value it just wrote (the oracle: the
// last value written), never the one before, and the answer's positions
// include the record. Then a read past every record times out with a
// *PositionsNotReachedError naming the table's positions (the oracle:
// each partition's last offset + 1), which Count and Rows report too; a
// partition the table lacks and a wait over 30s are refused.
func TestReadYourWrites(t *testing.T) {
	topic := fmt.Sprintf("client-ryw-%d-%d", os.Getpid(), seq.Add(1))
	broker.TestTopic(t, topic, 2, nil)
	oracle := map[int32]int64{}
	write := func(p int32, value string) client.Delivery {
		t.Helper()
		offs, err := broker.Produce(context.Background(), topic, []localkafka.Record{{Partition: p, Key: []byte(fmt.Sprintf("acct-%d", p)), Value: []byte(value)}})
		if err != nil {
			t.Fatal(err)
		}
		oracle[p] = offs[0] + 1
		return client.Delivery{Partition: p, Offset: offs[0]}
	}
	write(0, "v0")
	write(1, "v0")
	f := newFixtureWith(t, false, "", "", func(cfg *serve.Config) { cfg.Tables = []serve.Table{followedTable(topic)} })
	f.producedOnce.Do(func() { close(f.produced) })
	cl := f.cl
	awaitReady(t, cl)

	for i := 1; i <= 40; i++ {
		p := int32(i % 2)
		value := fmt.Sprintf("v%d", i)
		d := write(p, value)
		v, err := cl.GetWith(ctx(t), "t", []byte(fmt.Sprintf("acct-%d", p)), client.GetOptions{MinPositions: client.MinPositionsFromDelivery(d), Wait: 20 * time.Second})
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if string(v.Value) != value {
			t.Fatalf("write %d to partition %d at offset %d: read %q, want %q (positions %v)", i, p, d.Offset, v.Value, value, v.Positions)
		}
		if v.Positions[p] < d.Offset+1 || v.Generation == 0 || v.Cursor == "" {
			t.Fatalf("write %d: read at %+v, want partition %d at %d or more", i, v.ReadInfo, p, d.Offset+1)
		}
	}

	// Every record is applied (the last read of each partition waited for
	// its last record): the table is at the oracle.
	past := maps.Clone(oracle)
	past[0] += 5
	_, err := cl.GetWith(ctx(t), "t", []byte("acct-0"), client.GetOptions{MinPositions: past, Wait: 30 * time.Millisecond})
	var nr *client.PositionsNotReachedError
	if !errors.As(err, &nr) || !client.IsCode(err, client.CodePositionsNotReached) {
		t.Fatalf("a read past the table: %v, want a *PositionsNotReachedError", err)
	}
	if !maps.Equal(nr.Positions, oracle) || !maps.Equal(nr.Min, past) {
		t.Fatalf("PositionsNotReachedError %+v, want positions %v", nr, oracle)
	}
	n, ri, err := cl.CountWith(ctx(t), "t", client.CountOptions{MinPositions: oracle, Wait: time.Second})
	if err != nil || n != 2 || !maps.Equal(ri.Positions, oracle) {
		t.Fatalf("CountWith = %d, %+v, %v; want 2 at %v", n, ri, err, oracle)
	}
	if _, _, err := cl.CountWith(ctx(t), "t", client.CountOptions{MinPositions: past, Wait: 10 * time.Millisecond}); !errors.As(err, &nr) {
		t.Fatalf("CountWith past the table: %v", err)
	}
	var pages []client.ReadInfo
	rows := 0
	_, err = cl.Rows(ctx(t), "t", client.RowsOptions{PageSize: 1, MinPositions: oracle, Wait: time.Second,
		OnPage: func(ri client.ReadInfo) { pages = append(pages, ri) }}, func(client.Row) error { rows++; return nil })
	if err != nil || rows != 2 || len(pages) != 2 {
		t.Fatalf("Rows: %d rows, %d pages, %v", rows, len(pages), err)
	}
	for _, ri := range pages {
		if !maps.Equal(ri.Positions, oracle) {
			t.Fatalf("a page read at %v, want %v", ri.Positions, oracle)
		}
	}
	if _, err := cl.GetWith(ctx(t), "t", []byte("acct-0"), client.GetOptions{MinPositions: map[int32]int64{5: 1}}); !client.IsCode(err, client.CodeBadPositions) {
		t.Fatalf("a partition the table lacks: %v, want bad_positions", err)
	}
	if _, err := cl.GetWith(ctx(t), "t", []byte("acct-0"), client.GetOptions{MinPositions: oracle, Wait: 31 * time.Second}); err == nil {
		t.Fatal("a wait over 30s was sent")
	}
	// Many partitions go as a POST body: the table has two, so this one
	// is refused, by the body's route.
	many := map[int32]int64{}
	for p := int32(0); p < 1000; p++ {
		many[p] = 1
	}
	_, err = cl.GetWith(ctx(t), "t", []byte("acct-0"), client.GetOptions{MinPositions: many})
	if !client.IsCode(err, client.CodeBadPositions) {
		t.Fatalf("1000 partitions: %v, want bad_positions", err)
	}
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Method != "POST" {
		t.Fatalf("1000 partitions were sent by %s, want POST", ce.Method)
	}
	_, err = cl.GetWith(ctx(t), "t", []byte("absent"), client.GetOptions{MinPositions: oracle})
	if !client.IsCode(err, client.CodeKeyNotFound) || !errors.As(err, &ce) || !maps.Equal(ce.Read.Positions, oracle) {
		t.Fatalf("an absent key: %v, want key_not_found read at %v", err, oracle)
	}
}
