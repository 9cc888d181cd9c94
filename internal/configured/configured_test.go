package configured

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/config"
	"github.com/kmaterialize/kmaterialize/internal/cpushare"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/store"
)

var broker *localkafka.Broker

func TestMain(m *testing.M) { os.Exit(localkafka.RunTests(m, &broker)) }

// TestTablesAndUpdate: the table of a config file, built by Tables' Build,
// holds the last value of each key of its topic; Update then applies what
// the topic gained, reading only that. The values come from a plain map
// folded here. The build and the update take turns on a share of one
// slot and read at a lower priority, as in a daemon on two cores.
func TestTablesAndUpdate(t *testing.T) {
	topic := fmt.Sprintf("configured-%d", os.Getpid())
	broker.TestTopic(t, topic, 1, nil)
	want := map[string]string{}
	produce := func(kv ...string) {
		t.Helper()
		var recs []localkafka.Record
		for i := 0; i < len(kv); i += 2 {
			recs = append(recs, localkafka.Record{Key: []byte(kv[i]), Value: []byte(kv[i+1])})
			want[kv[i]] = kv[i+1]
		}
		if _, err := broker.Produce(context.Background(), topic, recs); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	doc := fmt.Sprintf("db: t.db\nkafka:\n  brokers: %s\ntables:\n  - name: t\n    topic: %s\n    fold: latest\n", broker.Addr, topic)
	cfg, err := config.Parse([]byte(doc), config.ParseOptions{Path: filepath.Join(dir, "c.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	cpu := cpushare.NewLowered(1)
	tables := Tables(cfg, cpu)
	if len(tables) != 1 || tables[0].Name != "t" || tables[0].Topic != topic || tables[0].Follow != nil || tables[0].Spec == nil {
		t.Fatalf("tables %+v: want t of %s, not followed, with its spec", tables, topic)
	}
	db, err := store.Open(cfg.DB, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	log := zerolog.New(zerolog.NewTestWriter(t))
	check := func(what string) {
		t.Helper()
		got := map[string]string{}
		err := db.ReadTable("t", func(snap *store.Snapshot) error {
			return snap.Rows(nil, 0, func(k, v []byte) error {
				got[string(k)] = string(bytes.Clone(v))
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: rows %v, want %v", what, got, want)
		}
	}

	produce("a", "1", "b", "1", "a", "2")
	if _, err := tables[0].Build(context.Background(), db, log); err != nil {
		t.Fatal(err)
	}
	check("after the build")

	produce("b", "2", "c", "1")
	rep, err := Update(cfg, cpu)(context.Background(), db, "t", false, log)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Replay.Records != 2 {
		t.Fatalf("the update read %d records, want the 2 produced since the build", rep.Replay.Records)
	}
	check("after the update")

	// An update of a table the file lacks fails, naming it.
	if _, err := Update(cfg, cpu)(context.Background(), db, "nope", false, log); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("update of a missing table: %v, want an error naming it", err)
	}
}
