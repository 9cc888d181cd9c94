package main

// Process test of a followed table whose definition changes under the
// daemon: the config switches a raw table to value_format json and is
// reloaded with SIGHUP. The daemon must rebuild the table by the new
// definition while its follower goes on by the stored one, so that every
// answer is the table of one definition: sampled every 100 ms through
// GET /export, every sample is wholly raw or wholly canonical JSON, never
// a mix, and the end state is canonical.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// spaced returns n records over keys d00..d(keys-1) whose values are JSON
// objects with insignificant whitespace (keys in sorted order, so that
// their canonical form is encoding/json's Compact), every eighth a
// tombstone.
func spaced(round, n, keys int) []localkafka.Record {
	recs := make([]localkafka.Record, n)
	for i := range recs {
		recs[i].Key = []byte(fmt.Sprintf("d%02d", (i*5+round)%keys))
		if i%8 != 5 {
			recs[i].Value = []byte(fmt.Sprintf("{ \"n\" : %d,\n  \"round\" :\t\"r%d\" }", i, round))
		}
	}
	return recs
}

// exportDocument is the part of the export document the samples judge.
type exportDocument struct {
	Partitions []struct {
		Partition int32 `json:"partition"`
		End       int64 `json:"end"`
	} `json:"partitions"`
	Rows map[string]string `json:"rows"`
}

// judge says whether doc's rows are the latest fold of the records below
// its checkpoint with raw values, and whether they are that fold with each
// value in canonical JSON (encoding/json's Compact).
func judge(t *testing.T, doc exportDocument, recs []rec) (raw, canonical bool) {
	t.Helper()
	ends := map[int32]int64{}
	for _, p := range doc.Partitions {
		ends[p.Partition] = p.End
	}
	want, _, _ := oracle(recs, func(r rec) bool { return r.O < ends[r.P] })
	canon := map[string]string{}
	for k, v := range want {
		var b bytes.Buffer
		if err := json.Compact(&b, []byte(v)); err != nil {
			t.Fatalf("oracle value %q: %v", v, err)
		}
		canon[k] = b.String()
	}
	rows := doc.Rows
	if rows == nil {
		rows = map[string]string{}
	}
	return cmp.Equal(want, rows), cmp.Equal(canon, rows)
}

// exportOf GETs table's export and decodes it.
func exportOf(t *testing.T, cl *http.Client, table string) (int, exportDocument, string) {
	t.Helper()
	code, body, _ := httpGet(t, cl, "/v1/tables/"+table+"/export")
	var doc exportDocument
	if code == http.StatusOK {
		if err := json.Unmarshal([]byte(body), &doc); err != nil {
			t.Errorf("export is not a JSON document: %v\n%s", err, body)
		}
	}
	return code, doc, body
}

// parkedFetch is a Fetch the broker holds until release is called.
type parkedFetch struct {
	seen    chan struct{} // closed once the fetch is parked
	release func()        // idempotent
}

// parkFetchBetween parks the first Fetch of topic that asks for a
// partition at an offset above from and below below, until release: a
// rebuild's read in its middle, never a follower that reads at or above
// below.
func parkFetchBetween(t *testing.T, topic string, from, below int64) *parkedFetch {
	t.Helper()
	localkafka.KfakeOnly(t)
	ch := make(chan struct{})
	var once sync.Once
	park := &parkedFetch{seen: make(chan struct{}), release: func() { once.Do(func() { close(ch) }) }}
	t.Cleanup(park.release)
	var parked bool // read and written by the broker's control loop only
	c := broker.Cluster
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if parked || !broker.MidFetch(topic, req, from) || broker.MidFetch(topic, req, below-1) {
			return nil, nil, false
		}
		parked = true
		close(park.seen)
		c.SleepControl(func() { <-ch })
		c.DropControl()
		return nil, nil, false
	})
	return park
}

// awaitFollowedTo waits until the table's one partition is applied up to
// high, in a state other than failed.
func awaitFollowedTo(t *testing.T, r *daemonRig, p *proc, what string, high int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body, _ := httpGet(t, r.cl, "/v1/tables/"+r.table)
		var tb struct {
			State      string `json:"state"`
			Partitions []struct {
				End int64 `json:"end"`
			} `json:"partitions"`
		}
		if code == http.StatusOK && json.Unmarshal([]byte(body), &tb) == nil && tb.State != "failed" &&
			len(tb.Partitions) == 1 && tb.Partitions[0].End == high {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the table did not reach offset %d: %d %s; stderr:\n%s", what, high, code, body, p.stderrText())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// definitionTable is the part of GET /v1/tables/{table} about its
// definition and its run.
type definitionTable struct {
	State      string  `json:"state"`
	Generation *uint64 `json:"generation"`
	Definition *struct {
		Changed bool     `json:"changed"`
		Fields  []string `json:"fields"`
	} `json:"definition"`
	Run *struct {
		Trigger string `json:"trigger"`
	} `json:"run"`
}

func definitionStatus(t *testing.T, r *daemonRig) definitionTable {
	t.Helper()
	code, body, _ := httpGet(t, r.cl, "/v1/tables/"+r.table)
	var tb definitionTable
	if code != http.StatusOK || json.Unmarshal([]byte(body), &tb) != nil || tb.Generation == nil {
		t.Fatalf("GET table: %d %s", code, body)
	}
	return tb
}

// awaitDefinitionPublished waits until no run is going and a generation
// above gen is published; the definition then must agree, and the daemon
// must have logged the publish of a rebuild with trigger definition.
func awaitDefinitionPublished(t *testing.T, r *daemonRig, p *proc, gen uint64) definitionTable {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var tb definitionTable
	for {
		tb = definitionStatus(t, r)
		if tb.Run == nil && *tb.Generation > gen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rebuild by the new definition did not publish: %+v; stderr:\n%s", tb, p.stderrText())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if tb.Definition == nil || tb.Definition.Changed || len(tb.Definition.Fields) != 0 {
		t.Fatalf("after the rebuild: definition %+v, want unchanged", tb.Definition)
	}
	published := false
	for _, l := range rebuildLogs(p, "rebuild published") {
		published = published || l["trigger"] == "definition"
	}
	if !published {
		t.Fatalf("the daemon logged no publish of a rebuild with trigger definition; stderr:\n%s", p.stderrText())
	}
	return tb
}

// checkUpdateRefused asserts that POST update of the table is 409.
func checkUpdateRefused(t *testing.T, r *daemonRig) {
	t.Helper()
	resp, err := r.cl.Post("http://kmaterialize/v1/tables/"+r.table+"/update", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	ub, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var ue struct {
		Code string `json:"code"`
	}
	// A followed table's update may also be refused as followed
	// (table_followed); either way it must not run.
	if resp.StatusCode != http.StatusConflict || json.Unmarshal(ub, &ue) != nil || (ue.Code != "definition_changed" && ue.Code != "table_followed") {
		t.Fatalf("POST update while the definition differs: %d %s, want 409 definition_changed", resp.StatusCode, ub)
	}
}

// setValueFormatJSON appends value_format: json to the rig's table.
func setValueFormatJSON(t *testing.T, r *daemonRig) {
	t.Helper()
	doc, err := os.ReadFile(r.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.cfgPath, append(doc, "    value_format: json\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFollowDefinitionChange: a followed raw table of JSON values written
// with whitespace is switched to value_format json by editing the config
// and SIGHUP. The test asserts that the reload happened (the daemon logs
// it), that a rebuild by the new definition ran (GET shows its run with
// trigger definition, and the daemon logs its publish), and, while that
// rebuild is parked in the middle of its read: definition changed in
// value_format, POST update 409, and records produced meanwhile applied
// raw by the follower (the stored definition). Every export sampled every
// 100 ms is wholly raw or wholly canonical, never raw after canonical;
// the end state is canonical with every record.
func TestFollowDefinitionChange(t *testing.T) {
	localkafka.KfakeOnly(t)
	topic := newTopic(t, 1)
	var recs []rec
	offs, err := broker.ProduceEach(context.Background(), topic, spaced(1, 60, 17))
	if err != nil {
		t.Fatal(err)
	}
	recs = append(recs, withOffsets(spaced(1, 60, 17), offs, true)...)
	r := newDaemonRig(t, topic, "    follow: true\n    follow_interval: 50ms\n")
	p := r.start(t)
	high := func() int64 { return marksOf(t, topic)[0].High }
	awaitFollowedTo(t, r, p, "the first build", high())

	// The sampler: GET /export every 100 ms until stopped.
	type sample struct {
		code int
		body string
	}
	var mu sync.Mutex
	var samples []sample
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			// Not exportOf: a goroutine other than the test's must not
			// end the test; the samples are judged after it stops.
			smp := sample{}
			if resp, err := r.cl.Get("http://kmaterialize/v1/tables/" + r.table + "/export"); err != nil {
				smp.body = err.Error()
			} else {
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				smp.code, smp.body = resp.StatusCode, string(b)
				if err != nil {
					smp.code, smp.body = 0, err.Error()
				}
			}
			mu.Lock()
			samples = append(samples, smp)
			mu.Unlock()
		}
	}()
	stopSampler := func() { close(stop); <-stopped }
	defer func() {
		select {
		case <-stopped:
		default:
			stopSampler()
		}
	}()
	// awaitSamples waits until the sampler has taken two more samples.
	awaitSamples := func() {
		t.Helper()
		mu.Lock()
		n := len(samples)
		mu.Unlock()
		deadline := time.Now().Add(30 * time.Second)
		for {
			mu.Lock()
			m := len(samples)
			mu.Unlock()
			if m >= n+2 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the sampler took no samples")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Followed raw.
	recs = append(recs, produce(t, topic, spaced(2, 20, 17))...)
	awaitFollowedTo(t, r, p, "following raw", high())
	awaitSamples()
	gen := *r.status(t).Generation

	// The reload, with the rebuild it starts parked in the middle of its
	// read (the follower reads at the end, at or above the high mark).
	park := parkFetchBetween(t, topic, 5, high())
	setValueFormatJSON(t, r)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLine(t, 30*time.Second, "the reload", func(l string) bool { return bytes.Contains([]byte(l), []byte(`"config reloaded"`)) })
	select {
	case <-park.seen:
	case <-time.After(60 * time.Second):
		t.Fatalf("no rebuild fetch was parked after the reload; stderr:\n%s", p.stderrText())
	}
	tb := definitionStatus(t, r)
	if tb.State != "rebuilding" || tb.Run == nil || tb.Run.Trigger != "definition" || *tb.Generation != gen ||
		tb.Definition == nil || !tb.Definition.Changed || !cmp.Equal(tb.Definition.Fields, []string{"value_format"}) {
		t.Fatalf("while the rebuild by the new definition is parked: %+v; want state rebuilding, run trigger definition, generation %d, definition changed in value_format", tb, gen)
	}
	checkUpdateRefused(t, r)

	// The follower goes on by the stored definition: records produced
	// now are applied raw.
	recs = append(recs, produce(t, topic, spaced(3, 20, 17))...)
	awaitFollowedTo(t, r, p, "following raw during the rebuild", high())
	if code, doc, body := exportOf(t, r.cl, r.table); code != http.StatusOK {
		t.Fatalf("export: %d %s", code, body)
	} else if raw, _ := judge(t, doc, recs); !raw || doc.Partitions[0].End != high() {
		t.Fatalf("during the rebuild the follower did not apply the new records raw: %s", body)
	}
	awaitSamples()

	park.release()
	awaitDefinitionPublished(t, r, p, gen)

	// Followed by the new definition: canonical.
	recs = append(recs, produce(t, topic, spaced(4, 20, 17))...)
	awaitFollowedTo(t, r, p, "following canonical", high())
	awaitSamples()
	stopSampler()
	code, final, body := exportOf(t, r.cl, r.table)
	if code != http.StatusOK {
		t.Fatalf("final export: %d %s", code, body)
	}
	if _, canonical := judge(t, final, recs); !canonical || final.Partitions[0].End != high() {
		t.Fatalf("the end state is not the canonical table of every record: %s", body)
	}

	rawN, canonN := 0, 0
	for i, s := range samples {
		var doc exportDocument
		if s.code != http.StatusOK || json.Unmarshal([]byte(s.body), &doc) != nil {
			t.Fatalf("sample %d: export %d %s", i, s.code, s.body)
		}
		raw, canonical := judge(t, doc, recs)
		switch {
		case raw && canonical: // no row with a value: both
		case raw:
			if canonN > 0 {
				t.Fatalf("sample %d is raw after a canonical one: %s", i, s.body)
			}
			rawN++
		case canonical:
			canonN++
		default:
			t.Fatalf("sample %d is neither wholly raw nor wholly canonical: %s", i, s.body)
		}
	}
	if rawN == 0 || canonN == 0 {
		t.Fatalf("%d raw and %d canonical samples: the samples did not span the change", rawN, canonN)
	}
	t.Logf("%d samples: %d raw, %d canonical; %d records", len(samples), rawN, canonN, len(recs))
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d", code)
	}
}

// TestFollowDefinitionChangedWhileStopped: the config of a followed raw
// table is switched to value_format json while the daemon is stopped. At
// the next start the daemon rebuilds the table by the new definition
// (trigger definition); while that rebuild is parked in the middle of its
// read, the raw table is served, GET says definition changed, updates are
// refused, and the follower applies new records raw. Then the table is
// the canonical JSON of every record, and stays so as it is followed.
func TestFollowDefinitionChangedWhileStopped(t *testing.T) {
	localkafka.KfakeOnly(t)
	topic := newTopic(t, 1)
	first := spaced(5, 40, 11)
	offs, err := broker.ProduceEach(context.Background(), topic, first)
	if err != nil {
		t.Fatal(err)
	}
	recs := withOffsets(first, offs, true)
	high := func() int64 { return marksOf(t, topic)[0].High }
	r := newDaemonRig(t, topic, "    follow: true\n    follow_interval: 50ms\n")
	p := r.start(t)
	awaitFollowedTo(t, r, p, "the first build", high())
	gen := *r.status(t).Generation
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d", code)
	}

	setValueFormatJSON(t, r)
	park := parkFetchBetween(t, topic, 5, high())
	p = startProc(t, "--log-format", "json", "serve", "--config", r.cfgPath)
	select {
	case <-park.seen:
	case <-p.done:
		t.Fatalf("the daemon exited; stderr:\n%s", p.stderrText())
	case <-time.After(60 * time.Second):
		t.Fatalf("no rebuild fetch was parked after the start; stderr:\n%s", p.stderrText())
	}
	tb := definitionStatus(t, r)
	if tb.State != "rebuilding" || tb.Run == nil || tb.Run.Trigger != "definition" || *tb.Generation != gen ||
		tb.Definition == nil || !tb.Definition.Changed || !cmp.Equal(tb.Definition.Fields, []string{"value_format"}) {
		t.Fatalf("at start, while the rebuild by the new definition is parked: %+v; want state rebuilding, run trigger definition, generation %d, definition changed in value_format", tb, gen)
	}
	checkUpdateRefused(t, r)
	recs = append(recs, produce(t, topic, spaced(6, 15, 11))...)
	awaitFollowedTo(t, r, p, "following raw during the rebuild", high())
	if code, doc, body := exportOf(t, r.cl, r.table); code != http.StatusOK {
		t.Fatalf("export: %d %s", code, body)
	} else if raw, canonical := judge(t, doc, recs); !raw || canonical || doc.Partitions[0].End != high() {
		t.Fatalf("during the rebuild the old table is not served raw up to %d: %s", high(), body)
	}

	park.release()
	awaitDefinitionPublished(t, r, p, gen)
	recs = append(recs, produce(t, topic, spaced(7, 15, 11))...)
	awaitFollowedTo(t, r, p, "following canonical", high())
	if code, doc, body := exportOf(t, r.cl, r.table); code != http.StatusOK {
		t.Fatalf("export: %d %s", code, body)
	} else if raw, canonical := judge(t, doc, recs); raw || !canonical || doc.Partitions[0].End != high() {
		t.Fatalf("after the rebuild the table is not the canonical JSON of every record: %s", body)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d", code)
	}
}
