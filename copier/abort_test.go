package copier_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmaterialize/kmaterialize/copier"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// TestAbortedTransactionResumed makes the copier's own transaction fail in
// the middle of a copy with a refusal of the broker itself, no fault
// injection: the destination's max.message.bytes is below one source
// record, so the produce of its batch fails (MESSAGE_TOO_LARGE), the
// transaction must be aborted, and every redo fails the same way until the
// test raises the limit. The records of the aborted transactions that did
// reach the destination (other partitions' batches) are in its log; a
// read_committed reader must see none of them, and every committed source
// record exactly once.
func TestAbortedTransactionResumed(t *testing.T) {
	ctx := context.Background()
	from := uniq(t, "resume")
	to := from + "-copy"
	want := ledger(t, from, 3, 150)
	big := bytes.Repeat([]byte("b"), 20<<10)
	if _, err := broker.Produce(ctx, from, []localkafka.Record{{Partition: 1, Key: []byte("big"), Value: big}}); err != nil {
		t.Fatal(err)
	}
	want = append(want, fmt.Sprintf("1|big|%s", big))
	// More after it on every partition, so that the resumed copy has
	// records of its own to commit past the refused one.
	var more []localkafka.Record
	for i := 0; i < 30; i++ {
		p := int32(i % 3)
		more = append(more, localkafka.Record{Partition: p, Key: []byte("after"), Value: []byte(fmt.Sprint("after-", i))})
		want = append(want, fmt.Sprintf("%d|after|after-%d", p, i))
	}
	if _, err := broker.Produce(ctx, from, more); err != nil {
		t.Fatal(err)
	}
	sort.Strings(want)
	broker.TestTopic(t, to, 3, map[string]string{"max.message.bytes": "8192"})

	var logs syncBuffer
	c := cfg(t, from, to)
	c.Log = zerolog.New(&logs).Level(zerolog.WarnLevel)
	type result struct {
		sum copier.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := copier.Run(ctx, c)
		done <- result{sum, err}
	}()
	// The condition: the copier aborted a transaction because the broker
	// refused the big record's batch. (The call that meets the failed
	// transaction first names it: the commit names the refusal, sending
	// the offsets only librdkafka's "erroneous state"; the redos go on
	// until the limit is raised, so one abort names it.)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the copier's log:\n%s", logs.String())
		}
	})
	awaitCond(t, 30*time.Second, "the copier to abort a transaction the broker refused", func() bool {
		for _, e := range abortErrors(logs.String()) {
			if strings.Contains(e, "Message size too large") {
				return true
			}
		}
		return false
	})
	adm, closeAdm := admin(t)
	defer closeAdm()
	limit := "1048588"
	res, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &limit}}, to)
	for _, r := range res {
		if err == nil && r.Err != nil {
			err = r.Err
		}
	}
	if err != nil {
		t.Fatalf("raise max.message.bytes of %s: %v", to, err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("copy: %v; logs:\n%s", r.err, logs.String())
	}
	t.Logf("summary %+v", r.sum)
	if r.sum.Aborts < 1 {
		t.Fatalf("summary %+v: want at least one aborted transaction", r.sum)
	}
	if diff := cmp.Diff(want, readCommitted(t, to)); diff != "" {
		t.Fatalf("destination (-source +destination):\n%s", diff)
	}
	// Whether records of the aborted attempts reached the log depends on
	// how far librdkafka had sent them when the abort purged the rest.
	t.Logf("the destination's log holds %d records, %d of them committed", len(readUncommitted(t, to)), len(want))
	if diff := cmp.Diff(highs(t, from), groupOffsets(t, c.Group, from)); diff != "" {
		t.Fatalf("group offsets vs source end offsets (-want +got):\n%s", diff)
	}
	verifyClean(t, from, to)
}

// abortErrors returns the errors of the copier's "aborting the
// transaction" log lines (JSON lines).
func abortErrors(logs string) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		var e struct{ Message, Error string }
		if json.Unmarshal([]byte(l), &e) == nil && strings.HasPrefix(e.Message, "aborting the transaction") {
			out = append(out, e.Error)
		}
	}
	return out
}

// readUncommitted reads topic to its high watermarks read_uncommitted:
// every data record in the log, aborted ones included.
func readUncommitted(t *testing.T, topic string) []*kgo.Record {
	t.Helper()
	ends := highs(t, topic)
	offsets := map[int32]kgo.Offset{}
	for p := range ends {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	cl, err := broker.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	pos := map[int32]int64{}
	for {
		done := true
		for p, e := range ends {
			if pos[p] < e {
				done = false
			}
		}
		if done {
			return out
		}
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s read_uncommitted: positions %v, ends %v: %v", topic, pos, ends, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= ends[r.Partition] {
				return
			}
			pos[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
}
