package main

// Process test of follow mode: the daemon follows a count table while
// votes keep arriving and is killed with SIGKILL at random points, again
// and again. After every kill the file must hold exactly the count oracle
// of the records below its checkpoint (nothing lost, nothing counted
// twice), and at the end the daemon serves the oracle of every record.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// voteRec is one vote as the broker stored it.
type voteRec struct {
	p     int32
	o     int64
	id    string
	booth string
}

// countOracleBelow is the count fold written plainly: each event id counts
// once toward its booth, among the records below ends (per partition).
func countOracleBelow(votes []voteRec, ends map[int32]int64) map[string]string {
	booth := map[string]string{}
	for _, v := range votes {
		if end, ok := ends[v.p]; ok && v.o < end {
			booth[v.id] = v.booth
		}
	}
	n := map[string]int{}
	for _, b := range booth {
		n[b]++
	}
	out := map[string]string{}
	for b, c := range n {
		out[b] = strconv.Itoa(c)
	}
	return out
}

// TestFollowKill9Loop: a daemon following a count table is stopped 14 times
// at random points, 12 times with SIGKILL and twice with SIGTERM (a clean
// restart), most of them at a random time after it applies, every fourth at
// a random time after it starts, while a producer keeps writing votes,
// retries of earlier votes among them (same event id and booth, another
// partition and sent_at). After each kill the table in the file equals the
// count oracle over the records below its checkpoint, which never goes
// back; the kills must land while the daemon follows (the checkpoint moved
// between most of them). Finally a daemon catches up and serves the oracle
// over every record.
func TestFollowKill9Loop(t *testing.T) {
	const parts = 3
	topic := newTopic(t, parts)
	rng := newRand(t)
	dir := t.TempDir()
	cfgPath, db := filepath.Join(dir, "kmaterialize.yaml"), filepath.Join(dir, "tables.db")
	sock := filepath.Join(dir, "tables.db.sock")
	doc := fmt.Sprintf(`db: tables.db
kafka:
  brokers: %s
tables:
  - name: votes
    topic: %s
    fold: count
    identity_field: event_id
    group_field: booth
    ignore_fields: [sent_at]
    stall_timeout: 60s
    follow: true
    follow_interval: 50ms
`, broker.Addr, topic)
	if err := os.WriteFile(cfgPath, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}

	pcl, err := broker.Client(kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	var mu sync.Mutex
	var votes []voteRec
	send := func(rng *rand.Rand, n int) error {
		recs := make([]localkafka.Record, n)
		for i := range recs {
			id := rng.Intn(5000)
			v, _ := json.Marshal(map[string]any{"event_id": fmt.Sprintf("e%d", id), "booth": fmt.Sprintf("b%d", id%7), "sent_at": rng.Int()})
			recs[i] = localkafka.Record{Partition: int32(rng.Intn(parts)), Key: []byte(fmt.Sprintf("e%d", id)), Value: v}
		}
		// Held across the produce: a snapshot taken after a kill then
		// waits for a produce in flight, whose records the daemon may
		// have applied before it died.
		mu.Lock()
		defer mu.Unlock()
		krs := make([]*kgo.Record, len(recs))
		for i, r := range recs {
			krs[i] = &kgo.Record{Topic: topic, Partition: r.Partition, Key: r.Key, Value: r.Value}
		}
		if err := pcl.ProduceSync(context.Background(), krs...).FirstErr(); err != nil {
			return err
		}
		offs := make([]int64, len(krs))
		for i, kr := range krs {
			offs[i] = kr.Offset
		}
		for i, r := range recs {
			var m map[string]any
			_ = json.Unmarshal(r.Value, &m)
			votes = append(votes, voteRec{p: r.Partition, o: offs[i], id: m["event_id"].(string), booth: m["booth"].(string)})
		}
		return nil
	}
	if err := send(rng, 500); err != nil {
		t.Fatal(err)
	}
	stopProducing := make(chan struct{})
	produced := make(chan error, 1)
	prng := rand.New(rand.NewSource(rng.Int63()))
	go func() {
		for {
			select {
			case <-stopProducing:
				produced <- nil
				return
			case <-time.After(time.Duration(5+prng.Intn(20)) * time.Millisecond):
			}
			if err := send(prng, 1+prng.Intn(30)); err != nil {
				produced <- err
				return
			}
		}
	}()
	snapshot := func() []voteRec {
		mu.Lock()
		defer mu.Unlock()
		return append([]voteRec(nil), votes...)
	}

	cl := unixClient(t, sock)
	// 14 stops: 12 SIGKILLs and, at 6 and 13, a clean SIGTERM.
	const stops = 14
	clean := func(i int) bool { return i == 6 || i == 13 }
	var last map[int32]int64
	moved := 0
	for i := 0; i < stops; i++ {
		p := startProc(t, "--log-format", "json", "serve", "--config", cfgPath)
		// Most kills land while the table follows (the first start builds
		// it first); every fourth lands at a random point of the start.
		if i%4 != 3 {
			awaitApplying(t, cl, p)
		}
		time.Sleep(time.Duration(rng.Intn(800)) * time.Millisecond)
		sig, wantCode := syscall.SIGKILL, -1
		if clean(i) {
			sig, wantCode = syscall.SIGTERM, 0
		}
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 30*time.Second); code != wantCode {
			t.Fatalf("stop %d (%s): exit code %d, want %d", i, sig, code, wantCode)
		}
		// What the killed daemon left: rows equal the oracle below its
		// checkpoint.
		tb := tablesJSON(t, db)["votes"]
		ends := map[int32]int64{}
		for _, pp := range tb.Partitions {
			ends[pp.Partition] = pp.End
		}
		want := countOracleBelow(snapshot(), ends)
		got := scanTable(t, db, "votes")
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("stop %d: table at checkpoint %v differs from the count oracle below it (-oracle +table):\n%s", i, ends, diff)
		}
		for part, e := range last {
			if ends[part] < e {
				t.Fatalf("stop %d: partition %d's checkpoint went back from %d to %d", i, part, e, ends[part])
			}
		}
		if last != nil && !cmp.Equal(ends, last) {
			moved++
		}
		t.Logf("stop %d: checkpoint %v, %d booths", i, ends, len(got))
		last = ends
	}
	if moved < stops/2 {
		t.Fatalf("the checkpoint moved between only %d of %d stops: the kills did not land while following", moved, stops-1)
	}

	close(stopProducing)
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	p := startProc(t, "--log-format", "json", "serve", "--config", cfgPath)
	awaitApplying(t, cl, p)
	hw := map[int32]int64{}
	for part := int32(0); part < parts; part++ {
		hw[part] = marksOf(t, topic)[part].High
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body, _ := httpGet(t, cl, "/v1/tables/votes")
		var tb struct {
			Partitions []struct {
				Partition int32 `json:"partition"`
				End       int64 `json:"end"`
			} `json:"partitions"`
		}
		if code == http.StatusOK && json.Unmarshal([]byte(body), &tb) == nil {
			ends := map[int32]int64{}
			for _, pp := range tb.Partitions {
				ends[pp.Partition] = pp.End
			}
			if cmp.Equal(ends, hw) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the last daemon did not catch up to %v: %d %s", hw, code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	all := snapshot()
	want := countOracleBelow(all, hw)
	checkKeys(t, cl, "votes", want)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d", code)
	}
	t.Logf("%d votes, %d booths, checkpoint moved between %d of %d stops", len(all), len(want), moved, stops-1)
}

// awaitApplying waits until GET /v1/tables/votes says following, with at
// least one transaction applied by this daemon's follower.
func awaitApplying(t *testing.T, cl *http.Client, p *proc) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body, _ := httpGet(t, cl, "/v1/tables/votes")
		var tb struct {
			State  string `json:"state"`
			Follow *struct {
				Applies int64 `json:"applies"`
			} `json:"follow"`
		}
		if code == http.StatusOK && json.Unmarshal([]byte(body), &tb) == nil && tb.State == "following" && tb.Follow != nil && tb.Follow.Applies > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("table votes not following: %d %s; stderr:\n%s", code, body, p.stderrText())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
