package main

// Process test of a SIGHUP reload while a followed table's rebuild has
// paused the follower for its catch-up: the daemon (built with the
// failpoints tag) waits at failpoint.CatchUpPaused while the test reloads
// it, and the positions the API reports never go back.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/internal/failpoint"
)

// followedJSON is the part of GET /v1/tables/{table} this test reads.
type followedJSON struct {
	State      string  `json:"state"`
	Generation *uint64 `json:"generation"`
	Keys       *int64  `json:"keys"`
	Run        *struct {
		ID      uint64 `json:"id"`
		Trigger string `json:"trigger"`
	} `json:"run"`
	Follow *struct {
		Running bool  `json:"running"`
		Applies int64 `json:"applies"`
	} `json:"follow"`
	Partitions []struct {
		Partition int32 `json:"partition"`
		End       int64 `json:"end"`
	} `json:"partitions"`
}

func (f followedJSON) ends() map[int32]int64 {
	out := map[int32]int64{}
	for _, p := range f.Partitions {
		out[p.Partition] = p.End
	}
	return out
}

// TestReloadDuringCatchUp: a daemon follows a table while records keep
// coming; a requested rebuild reaches its catch-up, which pauses the
// follower and reads its positions, and waits there (failpoint
// catch-up-paused, action wait). The test asserts that condition (the
// failpoint's file says waiting; the table's state is rebuilding with run
// 2 going and its follower not running), sends SIGHUP, waits for the
// daemon's "config reloaded" line and its "stays paused" line, and checks
// that the follower is still not running and the checkpoint has not moved
// though records were produced. Released, the rebuild publishes and
// following resumes. A reader of GET /v1/tables/votes throughout never
// sees a partition's end go back, and the final table is the latest-fold
// oracle of every record.
func TestReloadDuringCatchUp(t *testing.T) {
	const table = "votes"
	parts := []int32{0, 1}
	topic := newTopic(t, int32(len(parts)))
	rng := newRand(t)
	dir := t.TempDir()
	cfgPath, sock := filepath.Join(dir, "kmaterialize.yaml"), filepath.Join(dir, "tables.db.sock")
	doc := fmt.Sprintf("db: tables.db\nkafka:\n  brokers: %s\ntables:\n  - name: %s\n    topic: %s\n    stall_timeout: 60s\n    follow: true\n    follow_interval: 20ms\n",
		broker.Addr, table, topic)
	if err := os.WriteFile(cfgPath, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	all := produce(t, topic, genRecords(rng, parts, 300))
	produceMore := func(n int) error {
		recs := genRecords(rng, parts, n)
		mu.Lock()
		defer mu.Unlock()
		offs, err := broker.Produce(context.Background(), topic, recs)
		if err != nil {
			return err
		}
		all = append(all, withOffsets(recs, offs, true)...)
		return nil
	}

	// The first hit is the build at start (nothing follows yet); the
	// second the requested rebuild's.
	fpFile := filepath.Join(t.TempDir(), "failpoint")
	c := startChild(t, []string{failpoint.EnvPoint + "=" + failpoint.CatchUpPaused + "@2=wait", failpoint.EnvFile + "=" + fpFile},
		failpointBinary(t), "--log-format", "json", "serve", "--config", cfgPath)
	cl := unixClient(t, sock)
	get := func() (followedJSON, error) {
		code, body, _ := httpGet(t, cl, "/v1/tables/"+table)
		var f followedJSON
		if code != http.StatusOK {
			return f, fmt.Errorf("GET /v1/tables/%s: %d %s", table, code, body)
		}
		return f, json.Unmarshal([]byte(body), &f)
	}
	await := func(what string, cond func(followedJSON) bool) followedJSON {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			f, err := get()
			if err == nil && cond(f) {
				return f
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: last %+v (%v); stderr:\n%s", what, f, err, c.stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first := await("following after the first build", func(f followedJSON) bool { return f.State == "following" && f.Generation != nil })

	// The reader and the producer, until stop closes.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		last := map[int32]int64{}
		for {
			select {
			case <-stop:
				return
			default:
			}
			f, err := get()
			if err != nil {
				errs <- err
				return
			}
			for p, end := range f.ends() {
				if end < last[p] {
					errs <- fmt.Errorf("partition %d's end went back from %d to %d (state %s)", p, last[p], end, f.State)
					return
				}
				last[p] = end
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if err := produceMore(1 + rng.Intn(5)); err != nil {
				errs <- err
				return
			}
		}
	}()
	stopAll := func() {
		t.Helper()
		close(stop)
		wg.Wait()
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
	}

	resp, err := cl.Post("http://kmaterialize/v1/tables/"+table+"/rebuild", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST rebuild: %d", resp.StatusCode)
	}
	awaitFailpoint(t, c, fpFile, "failpoint "+failpoint.CatchUpPaused+" waiting")
	paused, err := get()
	if err != nil {
		t.Fatal(err)
	}
	if paused.State != "rebuilding" || paused.Run == nil || paused.Run.Trigger != "request" || paused.Follow == nil || paused.Follow.Running {
		t.Fatalf("at the catch-up: %+v; want state rebuilding, the requested run going, the follower not running", paused)
	}
	// Records arrive that a follower started again would apply.
	before := brokerHighs(t, topic, parts)
	await("records produced past the paused follower", func(followedJSON) bool {
		h := brokerHighs(t, topic, parts)
		return h[0] > before[0] && h[1] > before[1]
	})

	reloads := strings.Count(c.stderr.String(), `"message":"config reloaded"`)
	if err := c.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for strings.Count(c.stderr.String(), `"message":"config reloaded"`) == reloads {
		if time.Now().After(deadline) {
			t.Fatalf("no \"config reloaded\" after SIGHUP; stderr:\n%s", c.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(c.stderr.String(), "the follower stays paused while the table's rebuild catches up") {
		t.Fatalf("the reload did not keep the follower paused; stderr:\n%s", c.stderr.String())
	}
	// The reload restarts followers before it logs "config reloaded".
	after, err := get()
	if err != nil {
		t.Fatal(err)
	}
	if after.State != "rebuilding" || after.Run == nil || after.Run.ID != paused.Run.ID || after.Follow == nil || after.Follow.Running {
		t.Fatalf("after the reload: %+v; want the same run going and the follower still paused", after)
	}
	if !cmp.Equal(after.ends(), paused.ends()) {
		t.Fatalf("after the reload the checkpoint moved from %v to %v: a follower applied during the catch-up", paused.ends(), after.ends())
	}

	if err := os.Remove(fpFile); err != nil {
		t.Fatal(err)
	}
	await("the rebuild published and following again", func(f followedJSON) bool {
		return f.State == "following" && f.Generation != nil && *f.Generation != *first.Generation && f.Follow != nil && f.Follow.Running
	})
	stopAll()
	hw := brokerHighs(t, topic, parts)
	await("the follower at the high watermarks", func(f followedJSON) bool { return f.State == "following" && cmp.Equal(f.ends(), hw) })
	want, _, _ := oracle(all, nil)
	checkKeys(t, cl, table, want)
	if f, err := get(); err != nil || f.Keys == nil || *f.Keys != int64(len(want)) {
		t.Fatalf("the daemon serves %+v keys (%v), the oracle has %d", f.Keys, err, len(want))
	}
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ws := c.wait(t, 30*time.Second); ws.ExitStatus() != 0 {
		t.Fatalf("SIGTERM: %v; stderr:\n%s", ws, c.stderr.String())
	}
	if !strings.Contains(c.stderr.String(), "failpoint "+failpoint.CatchUpPaused+" released") {
		t.Fatalf("the failpoint was not released; stderr:\n%s", c.stderr.String())
	}
}

// brokerHighs are the broker's high watermarks of parts.
func brokerHighs(t testing.TB, topic string, parts []int32) map[int32]int64 {
	out := map[int32]int64{}
	for _, p := range parts {
		out[p] = marksOf(t, topic)[p].High
	}
	return out
}
