package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
)

const demoTopic = "account-balances"

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:      "demo",
		Usage:     "run a rebuild end to end against an embedded Kafka-compatible broker",
		UsageText: "kmaterialize demo [--db FILE]",
		Description: `Needs no Kafka: starts an embedded Kafka-compatible broker (kfake) on a free
loopback port, produces a sample account-balances stream over 4 partitions
(with an aborted transaction, a committed one, a null-keyed record and a
tombstone), rebuilds the table into a temporary database (or --db), and
prints the table and the tables listing.

Examples:
  $ kmaterialize demo
  $ kmaterialize demo --db /tmp/balances.db && kmaterialize get --db /tmp/balances.db --table account-balances acct-1`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "db", Usage: "keep the database at `FILE` (default: a temporary file, removed at exit)"},
			lockTimeoutFlag(),
		},
		Action: runDemo,
	}
}

func runDemo(c *cli.Context) error {
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	path := c.String("db")
	if path == "" {
		dir, err := os.MkdirTemp("", "kmaterialize-demo-")
		if err != nil {
			return fmt.Errorf("demo: temporary directory: %w", err)
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "balances.db")
	}
	b, err := localkafka.Start()
	if err != nil {
		return err
	}
	defer b.Close()
	log.Info().Str("broker", b.Addr).Msg("embedded Kafka-compatible broker (kfake) started")
	n, err := demoEvents(c, b)
	if err != nil {
		return fmt.Errorf("demo: produce sample events: %w", err)
	}
	log.Info().Str(keyTopic, demoTopic).Int("records", n).Msg("sample events produced")

	db, err := openWrite(c, path, "kmaterialize demo --db "+path)
	if err != nil {
		return err
	}
	defer db.Close()
	cfg := replay.Config{Brokers: b.Addr, Topic: demoTopic, Log: log}
	prog, err := newProgress(c, log)
	if err != nil {
		return err
	}
	cfg.Progress, cfg.ProgressInterval = prog.Update, prog.Tick()
	rep, err := materialize.Rebuild(c.Context, materialize.Options{DB: db, Replay: cfg, Log: log})
	endProgress(prog, err)
	if err != nil {
		return fmt.Errorf("demo rebuild failed: %w", err)
	}
	out := bufio.NewWriter(stdoutOf(c))
	fmt.Fprintf(out, "$ kmaterialize rebuild --brokers %s --topic %s --db %s\n", b.Addr, demoTopic, path)
	fmt.Fprintf(out, "published table %s: generation %d, %d keys, %d records read, %d skipped\n\n",
		rep.Meta.Name, rep.Meta.Generation, rep.Meta.Keys, rep.Meta.Records, rep.Meta.Skipped)
	fmt.Fprintf(out, "$ kmaterialize scan --db %s --table %s\n", path, demoTopic)
	f, _ := newRowFormatter("json", false)
	f.begin(out)
	if err := db.Scan(demoTopic, nil, 0, func(k, v []byte) error { return f.row(out, k, v) }); err != nil {
		return err
	}
	f.end(out)
	fmt.Fprintf(out, "\n$ kmaterialize tables --db %s\n", path)
	infos, err := loadTables(db)
	if err != nil {
		return err
	}
	if err := printTables(out, path, infos); err != nil {
		return err
	}
	return out.Flush()
}

// demoEvents writes the sample stream and returns how many records it wrote
// (committed, aborted and null-keyed included).
func demoEvents(c *cli.Context, b *localkafka.Broker) (int, error) {
	ctx := c.Context
	if err := b.CreateTopic(demoTopic, 4, nil); err != nil {
		return 0, err
	}
	acct := func(i int) localkafka.Record {
		return localkafka.Record{Partition: int32(i % 4), Key: []byte(fmt.Sprintf("acct-%d", i))}
	}
	var recs []localkafka.Record
	for round := 1; round <= 3; round++ {
		for i := 1; i <= 12; i++ {
			r := acct(i)
			r.Value = []byte(fmt.Sprintf("%d.00", i*100+round*10))
			recs = append(recs, r)
		}
	}
	// A record without a key: skipped by the latest fold, and counted.
	recs = append(recs, localkafka.Record{Partition: 1, Value: []byte("orphan transfer")})
	// A tombstone: acct-7 is closed, its row is deleted.
	recs = append(recs, acct(7))
	n := len(recs)
	if _, err := b.Produce(ctx, demoTopic, recs); err != nil {
		return 0, err
	}
	// An aborted transaction: its balances must never appear.
	txn, err := b.BeginTxn(ctx, demoTopic, "demo-aborted")
	if err != nil {
		return 0, err
	}
	bad := []localkafka.Record{acct(1), acct(2)}
	bad[0].Value, bad[1].Value = []byte("999999.00"), []byte("-1.00")
	if _, err := txn.Produce(ctx, bad); err != nil {
		return 0, err
	}
	if err := txn.End(ctx, false); err != nil {
		return 0, err
	}
	// A committed transaction: a transfer between two accounts; its commit
	// markers are the last offsets of partitions 0 and 1.
	// WriteTxn redoes the commit if the client turned it into an abort.
	good := []localkafka.Record{acct(4), acct(5)}
	good[0].Value, good[1].Value = []byte("350.00"), []byte("610.00")
	if _, err := b.WriteTxn(ctx, demoTopic, "demo-committed", good, true); err != nil {
		return 0, err
	}
	return n + len(bad) + len(good), nil
}
