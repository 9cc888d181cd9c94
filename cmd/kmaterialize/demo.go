package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
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
	st, err := demoEvents(c, b)
	if err != nil {
		return fmt.Errorf("demo: produce sample events: %w", err)
	}
	log.Info().Str(keyTopic, demoTopic).Int("records", st.records).Msg("sample events produced")

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
	if err := explainDemo(out, db, st, rep.Meta.Skipped); err != nil {
		return err
	}
	demoNextSteps(out, c.String("db"))
	return out.Flush()
}

// demoStream is what demoEvents wrote, for the explanation of the output.
type demoStream struct {
	records   int                 // every record, committed, aborted and null-keyed
	tombstone string              // the key whose last record is a tombstone
	aborted   []localkafka.Record // written in the aborted transaction
	committed []localkafka.Record // written in the committed transaction
	nullKeyed int                 // records without a key
}

// explainDemo says what the printed table shows, with the values read from
// the table itself, so that the text cannot drift from the output.
func explainDemo(out io.Writer, db *store.DB, st demoStream, skipped int64) error {
	value := func(key []byte) (string, error) {
		v, err := db.Get(demoTopic, key)
		if errors.Is(err, store.ErrKeyNotFound) {
			return "(no row)", nil
		}
		return string(v), err
	}
	fmt.Fprintf(out, "\nWhat the output shows:\n")
	if _, err := db.Get(demoTopic, []byte(st.tombstone)); !errors.Is(err, store.ErrKeyNotFound) {
		return fmt.Errorf("demo: %s should have no row after its tombstone (%v)", st.tombstone, err)
	}
	fmt.Fprintf(out, "  - %s is not in the table: its last record is a tombstone (a null value), which deletes the key.\n", st.tombstone)
	var now, never []string
	for _, r := range st.aborted {
		v, err := value(r.Key)
		if err != nil {
			return err
		}
		now = append(now, fmt.Sprintf("%s is %s", r.Key, v))
		never = append(never, string(r.Value))
	}
	fmt.Fprintf(out, "  - %s, never %s: those values were written in a transaction\n"+
		"    that was aborted; the replay reads read_committed, so aborted records never reach a table.\n",
		strings.Join(now, " and "), strings.Join(never, " or "))
	now = now[:0]
	for _, r := range st.committed {
		v, err := value(r.Key)
		if err != nil {
			return err
		}
		now = append(now, fmt.Sprintf("%s is %s", r.Key, v))
	}
	fmt.Fprintf(out, "  - %s: written in a committed transaction, they count like any other record.\n", strings.Join(now, " and "))
	fmt.Fprintf(out, "  - records skipped: %d (null_key=%d): a record without a key has no row to go to;\n"+
		"    the latest fold skips it and counts it.\n", skipped, st.nullKeyed)
	return nil
}

// demoNextSteps prints what to try next: commands that work after the demo
// has exited (its broker is gone, and its database too without --db).
func demoNextSteps(out io.Writer, keptDB string) {
	fmt.Fprintf(out, "\nNext steps (the demo's broker stops when it exits")
	if keptDB == "" {
		fmt.Fprintf(out, ", and its temporary database is removed; --db FILE keeps it")
	}
	fmt.Fprintf(out, "):\n")
	if keptDB != "" {
		fmt.Fprintf(out, "  Your copy of the table stays in %s:\n    $ kmaterialize get --db %s --table %s acct-1\n", keptDB, keptDB, demoTopic)
	}
	fmt.Fprintf(out, `  1. Start a Kafka-compatible broker that stays up, in a shell of its own (Ctrl-C stops it):
       $ kmaterialize dev broker --topic %[1]s:4
     and paste the "export KMATERIALIZE_BROKERS=..." line it prints into your shell.
  2. Write records with any Kafka producer, e.g. kcat (KEY:VALUE per line):
       $ printf 'acct-1:100.00\nacct-2:250.00\n' | kcat -b "$KMATERIALIZE_BROKERS" -P -t %[1]s -K:
  3. Rebuild the table and read it:
       $ kmaterialize rebuild --topic %[1]s --db balances.db
       $ kmaterialize get --db balances.db --table %[1]s acct-1
  4. Apply what the topic gained since, without a full rebuild:
       $ kmaterialize update --db balances.db --table %[1]s
`, demoTopic)
}

// demoEvents writes the sample stream and returns what it wrote.
func demoEvents(c *cli.Context, b *localkafka.Broker) (demoStream, error) {
	ctx := c.Context
	var st demoStream
	if err := b.CreateTopic(demoTopic, 4, nil); err != nil {
		return st, err
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
	st.nullKeyed = 1
	// A tombstone: acct-7 is closed, its row is deleted.
	recs = append(recs, acct(7))
	st.tombstone = "acct-7"
	if _, err := b.Produce(ctx, demoTopic, recs); err != nil {
		return st, err
	}
	// An aborted transaction: its balances must never appear.
	txn, err := b.BeginTxn(ctx, demoTopic, "demo-aborted")
	if err != nil {
		return st, err
	}
	bad := []localkafka.Record{acct(1), acct(2)}
	bad[0].Value, bad[1].Value = []byte("999999.00"), []byte("-1.00")
	if _, err := txn.Produce(ctx, bad); err != nil {
		return st, err
	}
	if err := txn.End(ctx, false); err != nil {
		return st, err
	}
	// A committed transaction: a transfer between two accounts; its commit
	// markers are the last offsets of partitions 0 and 1.
	// WriteTxn redoes the commit if the client turned it into an abort.
	good := []localkafka.Record{acct(4), acct(5)}
	good[0].Value, good[1].Value = []byte("350.00"), []byte("610.00")
	if _, err := b.WriteTxn(ctx, demoTopic, "demo-committed", good, true); err != nil {
		return st, err
	}
	st.records = len(recs) + len(bad) + len(good)
	st.aborted, st.committed = bad, good
	return st, nil
}
