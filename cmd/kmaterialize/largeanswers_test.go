package main

// The daemon's large answers in a real process: an unlimited diff is
// spooled, not built in memory, so the daemon's anonymous memory stays
// near its idle figure however large the diff is.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// rssAnon reads RssAnon (bytes) from /proc/PID/status: the process's
// anonymous resident memory, without the file pages of bbolt's mapping
// (which VmHWM and VmRSS count).
func rssAnon(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("RssAnon line %q", line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no RssAnon", pid)
}

// diffKeys, diffValueBytes: the acceptance size of issue 19 (point 2).
const (
	diffKeys       = 200_000
	diffValueBytes = 2 << 10
)

// TestDiffMemoryBound: a table of 200k keys with 2 KiB values is rebuilt
// with every value changed (keep: 1); an unlimited GET /diff of the two
// generations answers 200k lines (each the oracle's key, op "changed", the
// old and new values of the oracle), and the daemon's RssAnon, sampled
// every 5 ms through the request, peaks within 64 MiB of its idle figure.
// The diff (about 800 MiB of JSON) is spooled in the daemon, so that its
// memory holds a line at a time.
func TestDiffMemoryBound(t *testing.T) {
	began := time.Now()
	topic := newTopic(t, 1)
	value := func(round, i int) string {
		v := fmt.Sprintf("r%d-%06d-", round, i)
		return v + strings.Repeat(string(rune('a'+round)), diffValueBytes-len(v))
	}
	produceRound := func(round int) {
		const chunk = 5000
		for start := 0; start < diffKeys; start += chunk {
			recs := make([]localkafka.Record, 0, chunk)
			for i := start; i < min(start+chunk, diffKeys); i++ {
				recs = append(recs, localkafka.Record{Key: []byte(fmt.Sprintf("k%06d", i)), Value: []byte(value(round, i))})
			}
			produce(t, topic, recs)
		}
	}
	produceRound(1)
	rig := newDaemonRig(t, topic, "    keep: 1\n")
	p := startProc(t, "--log-format", "json", "serve", "--config", rig.cfgPath)
	awaitReady := func() {
		deadline := time.Now().Add(15 * time.Minute) // a "did not hang" bound
		for {
			if code, _, _ := httpGet(t, rig.cl, "/readyz"); code == http.StatusOK {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the daemon did not publish the table; stderr:\n%s", p.stderrText())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	awaitReady()
	produceRound(2)
	if code, body := rig.rebuild(t, true); code != http.StatusOK || !strings.Contains(body, `"exit_code":0`) {
		t.Fatalf("rebuild: %d %s", code, body)
	}
	built := time.Since(began)

	pid := p.cmd.Process.Pid
	idle, err := rssAnon(pid)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var peak int64
	var sampleErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			n, err := rssAnon(pid)
			if err != nil {
				sampleErr = err
				return
			}
			peak = max(peak, n)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	cl := &http.Client{Transport: rig.cl.Transport} // no timeout: 800 MiB of answer
	diffBegan := time.Now()
	resp, err := cl.Get("http://kmaterialize/v1/tables/" + rig.table + "/diff")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET diff: %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	lines := 0
	for sc.Scan() {
		var l struct {
			Key string  `json:"key"`
			Op  string  `json:"op"`
			Old *string `json:"old"`
			New *string `json:"new"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %d: %v", lines+1, err)
		}
		// The oracle: every key, in order, changed from round 1's value
		// to round 2's.
		want := fmt.Sprintf("k%06d", lines)
		if l.Key != want || l.Op != "changed" || l.Old == nil || l.New == nil || *l.Old != value(1, lines) || *l.New != value(2, lines) {
			t.Fatalf("line %d: key %q op %q: want %q changed from round 1's value to round 2's", lines+1, l.Key, l.Op, want)
		}
		lines++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	diffTook := time.Since(diffBegan)
	close(stop)
	wg.Wait()
	if sampleErr != nil {
		t.Fatal(sampleErr)
	}
	if lines != diffKeys {
		t.Fatalf("the diff has %d lines, want %d", lines, diffKeys)
	}
	t.Logf("RssAnon idle %d MiB, peak %d MiB during the diff (%d lines in %v); build of both generations %v; whole test %v",
		idle>>20, peak>>20, lines, diffTook, built, time.Since(began))
	if peak-idle > 64<<20 {
		t.Fatalf("the daemon's RssAnon peaked at %d MiB during the diff, %d MiB over its idle %d MiB: want at most 64 MiB over",
			peak>>20, (peak-idle)>>20, idle>>20)
	}
}

// TestRoutedScanByteBudget: with page_max_bytes: 2500 in the daemon's
// config, a routed `scan` of 120 rows of 1000-byte values (one of 6000
// bytes) reads pages of at most two rows (the large one alone), more than
// 60 of them by the daemon's request metrics, and prints every row of the
// oracle in key order.
func TestRoutedScanByteBudget(t *testing.T) {
	topic := newTopic(t, 1)
	want := map[string]string{}
	var recs []localkafka.Record
	for i := 0; i < 120; i++ {
		v := strings.Repeat(fmt.Sprint(i%10), 1000)
		if i == 33 {
			v = strings.Repeat("L", 6000)
		}
		k := fmt.Sprintf("k%03d", i)
		want[k] = v
		recs = append(recs, localkafka.Record{Key: []byte(k), Value: []byte(v)})
	}
	produce(t, topic, recs)
	s := newDaemonSetup(t, map[string]string{"big": topic})
	doc, err := os.ReadFile(s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.cfg, append([]byte("page_max_bytes: 2500\n"), doc...), 0o644); err != nil {
		t.Fatal(err)
	}
	s.start(t)
	before := rowsRequests(t, s.sock)
	res := quiet(t, "scan", "--db", s.db, "--table", "big", "--base64", "--format", "jsonl", "--lock-timeout", "0")
	if res.code != 0 {
		t.Fatalf("routed scan: exit %d\n%s", res.code, res.stderr)
	}
	got := decodeRows(t, res.stdout)
	if len(got) != len(want) || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("routed scan printed %d rows, the oracle has %d (or other values)", len(got), len(want))
	}
	if pages := rowsRequests(t, s.sock) - before; pages <= 60 {
		t.Fatalf("the scan read %d pages: with a budget of 2500 bytes it needs more than 60", pages)
	}
}
