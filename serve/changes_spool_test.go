package serve

// The change feed of a publish and a rollback whose changes pass the
// feeds' memory bound: spooled beside the database (store.FeedDir) and
// sent from the file, never restarting the feed.

import (
	"context"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// feedSpoolFiles lists the spooled commits in the database's FeedDir.
func feedSpoolFiles(t *testing.T, dbPath string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(store.FeedDir(dbPath), "*"+store.FeedSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestChangesSpooledRebuild: with the feeds' memory bound far below a
// rebuild's changes, a watcher of the table gets the rebuild's publish,
// then a rollback's, through their spool files without a 410: after each
// commit its copy is the oracle fold of the generation published. A
// second watcher from before the rebuild, once its spool file is cut
// short, gets an error line (internal), and the daemon logs the table and
// the file. After a shutdown and a restart no spool file is left.
func TestChangesSpooledRebuild(t *testing.T) {
	topic := unique(t, "topic")
	broker.TestTopic(t, topic, 2, nil)
	var p produced
	p.write(t, topic, keyed(0, 60, 2, 20))
	tbl := kafkaTable("t", topic, nil)
	tbl.Build = func(ctx context.Context, db *store.DB, log zerolog.Logger) (materialize.Report, error) {
		return materialize.Rebuild(ctx, materialize.Options{DB: db, Table: "t", Log: log, Keep: 1,
			Replay: replay.Config{Brokers: broker.Addr, Topic: topic, StallTimeout: 20 * time.Second, Log: log}})
	}
	cfg := baseConfig(t, tbl)
	// The rebuild changes about 100 KiB of keys and values: three times
	// what the feeds may hold in memory.
	cfg.FeedRetainBytes, cfg.FeedMaxBytes = 8<<10, 32<<10
	var logs lockedBuffer
	cfg.Log = zerolog.New(io.MultiWriter(zerolog.NewTestWriter(t), &logs)).Level(zerolog.WarnLevel)
	d := start(t, cfg)
	waitFor(t, "the first build", 60*time.Second, func() bool { return d.c.table(t, "t").Generation != nil })
	cp, cursor := list(t, d.c, "t")
	first := p.ends()
	checkCopy(t, "the list", cp, p.foldAt(first))
	fs := watch(t, d.c, "t", cursor)

	p.write(t, topic, keyed(1, 3000, 2, 2000))
	if r := d.c.post(t, "/v1/tables/t/rebuild?wait=1", ""); r.status != http.StatusOK {
		t.Fatalf("rebuild: %d %s", r.status, r.body)
	}
	st := fs.untilCommit(&cp)
	if !maps.Equal(st.Positions, p.ends()) {
		t.Fatalf("the rebuild's commit at %v, want %v", st.Positions, p.ends())
	}
	checkCopy(t, "after the rebuild", cp, p.foldAt(st.Positions))
	if len(cp.rows) < 1500 {
		t.Fatalf("the rebuilt table has %d rows: too few to pass the memory bound", len(cp.rows))
	}
	files := feedSpoolFiles(t, cfg.DBPath)
	if len(files) != 1 {
		t.Fatalf("spool files after the rebuild: %v, want the rebuild's", files)
	}

	// A watcher from before the rebuild reads the retained spooled
	// commit: cut short, it ends the stream with an error line.
	fi, err := os.Stat(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(files[0], fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	bad := watch(t, d.c, "t", cursor)
	var last api.FeedLine
	for {
		l, ok := bad.next()
		if !ok {
			break
		}
		last = l
	}
	if last.Error == nil || last.Error.Code != api.CodeInternal || strings.Contains(last.Error.Message, files[0]) {
		t.Fatalf("a watcher of a spooled commit cut short: ended with %+v, want %s without the file's path", last, api.CodeInternal)
	}
	waitFor(t, "the spool read error's log", 30*time.Second, func() bool {
		l := logs.String()
		return strings.Contains(l, "reading a spooled commit failed") && strings.Contains(l, `"table":"t"`) && strings.Contains(l, files[0])
	})

	if r := d.c.post(t, "/v1/tables/t/rollback", ""); r.status != http.StatusOK {
		t.Fatalf("rollback: %d %s", r.status, r.body)
	}
	st = fs.untilCommit(&cp)
	if !maps.Equal(st.Positions, first) {
		t.Fatalf("the rollback's commit at %v, want %v", st.Positions, first)
	}
	checkCopy(t, "after the rollback", cp, p.foldAt(first))
	if files := feedSpoolFiles(t, cfg.DBPath); len(files) == 0 {
		t.Fatal("no spool file after the rollback: its changes went through memory")
	}

	// A shutdown lets them go (and a start would remove any left: a
	// new epoch, no cursor names them).
	fs.cancel()
	d.stop(t)
	d = start(t, cfg)
	if files := feedSpoolFiles(t, cfg.DBPath); len(files) != 0 {
		t.Fatalf("spool files after a restart: %v", files)
	}
	cp2, _ := list(t, d.c, "t")
	checkCopy(t, "the list after the restart", cp2, p.foldAt(first))
}
