package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/store"
)

// holdFetches lets the first Fetch request that names topic through and
// parks every later one until the returned release is called. It makes a
// rebuild of topic stop deterministically in the middle of its read. Other
// topics' fetches pass untouched.
func holdFetches(t *testing.T, topic string) (release func()) {
	t.Helper()
	localkafka.KfakeOnly(t)
	id := broker.Cluster.TopicInfo(topic).TopicID
	var (
		mu       sync.Mutex
		seen     int
		released bool
	)
	gate := make(chan struct{})
	release = sync.OnceFunc(func() {
		mu.Lock()
		released = true
		mu.Unlock()
		close(gate)
	})
	t.Cleanup(release)
	broker.Cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		broker.Cluster.KeepControl()
		mu.Lock()
		if released {
			mu.Unlock()
			broker.Cluster.DropControl()
			return nil, nil, false
		}
		names := false
		for _, ft := range req.(*kmsg.FetchRequest).Topics {
			if ft.Topic == topic || ft.TopicID == id {
				names = true
			}
		}
		if names {
			seen++
		}
		hold := names && seen > 1
		mu.Unlock()
		if hold {
			broker.Cluster.SleepControl(func() { <-gate })
		}
		return nil, nil, false
	})
	return release
}

// generations lists the generation buckets in the file, read-only.
func generations(t *testing.T, path string) map[uint64]string {
	t.Helper()
	db, err := store.Open(path, &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[uint64]string{}
	err = db.Bolt().View(func(tx *bolt.Tx) error {
		return tx.Bucket(store.BucketGenerations).ForEachBucket(func(k []byte) error {
			out[binary.BigEndian.Uint64(k)] = string(tx.Bucket(store.BucketGenerations).Bucket(k).Get(store.KeyGenerationTable))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestKill9MidRebuild kills a rebuild process with SIGKILL while it reads.
// The previously published table stays readable and unchanged, the killed
// rebuild's unpublished generation is left behind, and the next rebuild
// removes it and publishes the table of every record.
func TestKill9MidRebuild(t *testing.T) {
	localkafka.KfakeOnly(t)
	rng := newRand(t)
	topic := newTopic(t, 1)
	db := dbPath(t)

	old := produce(t, topic, genRecords(rng, []int32{0}, 30))
	mustCLI(t, 0, rebuildArgs(topic, db)...)
	oldWant, _, _ := oracle(old, nil)
	checkTable(t, oldWant, scanTable(t, db, topic))

	// More records, one produce request (one batch) each, so that tiny
	// fetches cannot read them all at once.
	all := append([]rec(nil), old...)
	for _, r := range genRecords(rng, []int32{0}, 40) {
		all = append(all, produce(t, topic, []localkafka.Record{r})...)
	}

	release := holdFetches(t, topic)
	p := startProc(t, "--log-format", "json", "rebuild", "--brokers", broker.Addr, "--topic", topic, "--db", db,
		"--stall-timeout", "120s", "--progress-interval", "100ms",
		"-X", "max.partition.fetch.bytes=1", "-X", "fetch.max.bytes=1024", "-X", "message.max.bytes=1000")
	p.waitLine(t, 60*time.Second, "a progress line with records read", func(l string) bool {
		var m struct {
			Message string `json:"message"`
			Records int64  `json:"records"`
		}
		return json.Unmarshal([]byte(l), &m) == nil && m.Message == "progress" && m.Records > 0
	})
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != -1 {
		t.Fatalf("killed process exit code %d, want -1 (killed by a signal)", code)
	}
	release()
	if out := p.stdout.String(); strings.Contains(out, "published") {
		t.Fatalf("the killed rebuild reported a publish: %q", out)
	}

	// The old table is what readers see; the killed rebuild's generation
	// is still in the file, unpublished.
	checkTable(t, oldWant, scanTable(t, db, topic))
	tb := tablesJSON(t, db)[topic]
	if tb.Generation != 1 || tb.Records != int64(len(old)) {
		t.Fatalf("tables after the kill: generation %d, %d records; want the old generation 1 with %d records", tb.Generation, tb.Records, len(old))
	}
	if g := generations(t, db); len(g) != 2 || g[1] != topic || g[2] != topic {
		t.Fatalf("generation buckets after the kill: %v, want the published 1 and the killed rebuild's 2", g)
	}

	// The next rebuild removes the leftover and publishes every record.
	r := mustCLI(t, 0, rebuildArgs(topic, db)...)
	cleaned := false
	for _, l := range logLines(r.stderr) {
		if l["level"] == "warn" && l["generations"] == float64(1) && strings.Contains(fmt.Sprint(l["message"]), "unpublished") {
			cleaned = true
		}
	}
	if !cleaned {
		t.Fatalf("the rebuild did not report removing 1 unpublished generation:\n%s", r.stderr)
	}
	want, read, _ := oracle(all, nil)
	checkTable(t, want, scanTable(t, db, topic))
	tb = tablesJSON(t, db)[topic]
	if tb.Generation != 3 || tb.Records != read {
		t.Fatalf("tables after the rebuild: generation %d, %d records; want generation 3 with %d records", tb.Generation, tb.Records, read)
	}
	if g := generations(t, db); len(g) != 1 || g[3] != topic {
		t.Fatalf("generation buckets after the rebuild: %v, want only the published 3", g)
	}
	// And a read-write open finds nothing left to clean.
	rw, err := store.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	if n := rw.Cleaned(); n != 0 {
		t.Fatalf("Cleaned() = %d after a successful rebuild, want 0", n)
	}
}

// TestSIGINTMidRebuild: an interrupted rebuild (SIGINT while it reads)
// exits 4, publishes nothing, and drops its own generation at once (no
// leftover for the next open, unlike a kill -9).
func TestSIGINTMidRebuild(t *testing.T) {
	localkafka.KfakeOnly(t)
	rng := newRand(t)
	topic := newTopic(t, 1)
	db := dbPath(t)
	old := produce(t, topic, genRecords(rng, []int32{0}, 20))
	mustCLI(t, 0, rebuildArgs(topic, db)...)
	oldWant, _, _ := oracle(old, nil)
	for _, r := range genRecords(rng, []int32{0}, 20) {
		produce(t, topic, []localkafka.Record{r})
	}
	release := holdFetches(t, topic)
	p := startProc(t, "--log-format", "json", "rebuild", "--brokers", broker.Addr, "--topic", topic, "--db", db,
		"--stall-timeout", "120s", "--progress-interval", "100ms",
		"-X", "max.partition.fetch.bytes=1", "-X", "fetch.max.bytes=1024", "-X", "message.max.bytes=1000")
	p.waitLine(t, 60*time.Second, "a progress line with records read", func(l string) bool {
		var m struct {
			Message string `json:"message"`
			Records int64  `json:"records"`
		}
		return json.Unmarshal([]byte(l), &m) == nil && m.Message == "progress" && m.Records > 0
	})
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 4 {
		t.Fatalf("interrupted rebuild exit %d, want 4; stderr:\n%s", code, p.stderrText())
	}
	release()
	checkTable(t, oldWant, scanTable(t, db, topic))
	if tb := tablesJSON(t, db)[topic]; tb.Generation != 1 {
		t.Fatalf("generation %d after an interrupted rebuild, want 1", tb.Generation)
	}
	if g := generations(t, db); len(g) != 1 || g[1] != topic {
		t.Fatalf("generation buckets after the interrupt: %v, want only the published 1", g)
	}
}
