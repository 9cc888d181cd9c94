package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// TestCopyFollowSIGTERM: a --follow copier gets SIGTERM while its commit is
// in flight; it finishes that transaction and exits 0 with a committed
// summary, and a later bounded copy completes the destination exactly once.
func TestCopyFollowSIGTERM(t *testing.T) {
	localkafka.KfakeOnly(t)
	n := newCopyNames(t)
	src := copySource(t, n.src, 90)
	broker.TestTopic(t, n.dst, 3, nil)
	h := holdRequest(t, kmsg.EndTxn, 1, endTxnCommit(n.tid))
	p := startProc(t, n.copyArgs(append([]string{"--follow"}, tinyFetches...)...)...)
	waitHeld(t, p, h, sessionBound, "the copier's second commit")
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	h.release(true)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("copier exit %d after SIGTERM, want 0; stderr:\n%s", code, p.stderrText())
	}
	sum := lastSummary(t, p.stdout.String())
	if !sum.Committed || sum.Transactions < 2 || sum.Records == 0 {
		t.Fatalf("summary %+v, want the in-flight transaction committed", sum)
	}
	// What the stopped copier reported is what the group committed.
	if got := countValues(committedValues(src, groupOffsets(t, n.group, n.src))); int64(got) != sum.Records {
		t.Fatalf("summary says %d records, the group's offsets cover %d", sum.Records, got)
	}
	mustCLI(t, 0, n.copyArgs()...)
	checkExactlyOnce(t, src, n.dst)
	verifyClean(t, n, countCommitted(src))
}

// TestVerifyByValue: records equal by value but not by headers are a
// mismatch by record and a match with --by value.
func TestVerifyByValue(t *testing.T) {
	ctx := context.Background()
	name := runName(t)
	src, dst := name+"-src", name+"-dst"
	for _, tp := range []string{src, dst} {
		broker.TestTopic(t, tp, 1, nil)
	}
	cl, err := broker.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, tp := range []string{src, dst} {
		r := &kgo.Record{Topic: tp, Key: []byte("k"), Value: []byte("v")}
		if tp == dst {
			r.Headers = []kgo.RecordHeader{{Key: "trace", Value: []byte("x")}}
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	base := []string{"verify", "--brokers", broker.Addr, "--from", src, "--to", dst, "--stall-timeout", "20s"}
	r := mustCLI(t, 3, base...)
	var rep struct{ Missing, Duplicated int64 }
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Missing != 1 || rep.Duplicated != 1 {
		t.Fatalf("by record: %+v (%v), want 1 missing and 1 duplicated", rep, err)
	}
	mustCLI(t, 0, append(base, "--by", "value")...)
}

// TestScanBinaryValues: a value that is not UTF-8 is refused with a hint,
// never mangled; --base64 shows it exactly.
func TestScanBinaryValues(t *testing.T) {
	topic := newTopic(t, 1)
	bin := []byte{0xff, 0x00, 0xfe, 'x'}
	if _, err := broker.Produce(context.Background(), topic, []localkafka.Record{
		{Key: []byte("text"), Value: []byte("plain")}, {Key: []byte("bin"), Value: bin},
	}); err != nil {
		t.Fatal(err)
	}
	db := dbPath(t)
	mustCLI(t, 0, rebuildArgs(topic, db)...)
	r := mustCLI(t, 2, "scan", "--db", db, "--table", topic)
	if !strings.Contains(r.stderr, `"bin"`) || !strings.Contains(r.stderr, "--base64") {
		t.Fatalf("stderr should name the key and suggest --base64:\n%s", r.stderr)
	}
	r = mustCLI(t, 0, "scan", "--db", db, "--table", topic, "--base64")
	var got map[string]string
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		base64.StdEncoding.EncodeToString([]byte("bin")):  base64.StdEncoding.EncodeToString(bin),
		base64.StdEncoding.EncodeToString([]byte("text")): base64.StdEncoding.EncodeToString([]byte("plain")),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("scan --base64 (-want +got):\n%s", diff)
	}
	r = mustCLI(t, 0, "get", "--db", db, "--table", topic, "bin")
	if r.stdout != string(bin)+"\n" {
		t.Fatalf("get printed %q, want the raw bytes", r.stdout)
	}
}

// TestBrokersFromEnvironment: KMATERIALIZE_BROKERS stands in for --brokers.
func TestBrokersFromEnvironment(t *testing.T) {
	topic := newTopic(t, 1)
	if _, err := broker.Produce(context.Background(), topic, []localkafka.Record{{Key: []byte("a"), Value: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KMATERIALIZE_BROKERS", broker.Addr)
	db := dbPath(t)
	mustCLI(t, 0, "rebuild", "--topic", topic, "--db", db)
	if r := mustCLI(t, 0, "get", "--db", db, "--table", topic, "a"); r.stdout != "1\n" {
		t.Fatalf("get = %q", r.stdout)
	}
	os.Unsetenv("KMATERIALIZE_BROKERS")
	mustCLI(t, 2, "rebuild", "--topic", topic, "--db", db)
}
