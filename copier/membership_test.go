package copier_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmaterialize/kmaterialize/copier"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// member is one group member as DescribeGroups shows it.
type member struct {
	id       string
	assigned []int32 // partitions of the source, sorted
}

// members returns the group's members by group.instance.id.
func members(g kadm.DescribedGroup, topic string) map[string]member {
	out := map[string]member{}
	for _, m := range g.Members {
		inst := ""
		if m.InstanceID != nil {
			inst = *m.InstanceID
		}
		var ps []int32
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range a.Topics {
				if tp.Topic == topic {
					ps = append(ps, tp.Partitions...)
				}
			}
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		out[inst] = member{id: m.MemberID, assigned: ps}
	}
	return out
}

// TestStaticMemberRestart runs two copiers in one group: B in this process,
// A as a process. A is killed with SIGKILL (no LeaveGroup) and restarted
// with the same transactional id, so the same group.instance.id: the group
// coordinator must give the restarted member A's partitions at once,
// replacing the dead member (a new member id) without a rebalance: B is
// neither revoked nor reassigned, and the assignment is unchanged. The copy
// then completes exactly once.
func TestStaticMemberRestart(t *testing.T) {
	ctx := context.Background()
	from := uniq(t, "static")
	const parts = 4
	n := copyNames{from: from, to: from + "-copy", group: from + "-group", tid: from + "-txn-a"}
	want := ledger(t, n.from, parts, 200)
	broker.TestTopic(t, n.to, parts, nil)

	var logsB syncBuffer
	b := cfg(t, n.from, n.to)
	b.Group, b.TransactionalID, b.Follow = n.group, n.from+"-txn-b", true
	b.Log = zerolog.New(&logsB).Level(zerolog.InfoLevel)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		sum copier.Summary
		err error
	}
	doneB := make(chan result, 1)
	go func() {
		sum, err := copier.Run(runCtx, b)
		doneB <- result{sum, err}
	}()
	awaitCond(t, 30*time.Second, "copier B's first assignment", func() bool {
		return strings.Count(logsB.String(), `"partitions assigned"`) == 1
	})
	a := startCopy(t, nil, n.args("--follow")...)
	awaitCond(t, 60*time.Second, "copier A's assignment", func() bool {
		return strings.Contains(a.stderr.String(), `"partitions assigned"`)
	})
	// B was revoked and given its share when A joined.
	awaitCond(t, 30*time.Second, "copier B's second assignment", func() bool {
		return strings.Count(logsB.String(), `"partitions assigned"`) == 2
	})
	instA, instB := copier.InstanceID(n.tid), copier.InstanceID(b.TransactionalID)
	before := members(awaitGroupStable(t, n.group, 2, 30*time.Second), n.from)
	if len(before[instA].assigned) == 0 || len(before[instB].assigned) == 0 {
		t.Fatalf("members %+v: want both copiers assigned partitions", before)
	}
	revokedB := strings.Count(logsB.String(), `"partitions revoked"`)

	a.kill9(t)
	restarted := startCopy(t, nil, n.args("--follow")...)
	awaitCond(t, 30*time.Second, "the restarted copier A's assignment", func() bool {
		return strings.Contains(restarted.stderr.String(), `"partitions assigned"`)
	})
	after := members(awaitGroupStable(t, n.group, 2, 30*time.Second), n.from)
	t.Logf("members before the kill %+v, after the restart %+v", before, after)
	if after[instA].id == before[instA].id {
		t.Fatalf("copier A's member id %s did not change: the restart was not seen as a new member", after[instA].id)
	}
	if after[instB].id != before[instB].id {
		t.Fatalf("copier B's member id changed from %s to %s", before[instB].id, after[instB].id)
	}
	for _, inst := range []string{instA, instB} {
		if !cmp.Equal(before[inst].assigned, after[inst].assigned) {
			t.Fatalf("%s was assigned %v before the kill and %v after the restart: the assignment moved", inst, before[inst].assigned, after[inst].assigned)
		}
	}

	// Records on every partition after the restart: both copiers copy,
	// and whatever the group did about the restart has reached B by the
	// time the group has committed the source's end.
	var more []localkafka.Record
	for i := 0; i < 40; i++ {
		p := int32(i % parts)
		more = append(more, localkafka.Record{Partition: p, Key: []byte("later"), Value: []byte(fmt.Sprint("after-restart-", i))})
		want = append(want, fmt.Sprintf("%d|later|after-restart-%d", p, i))
	}
	sort.Strings(want)
	if _, err := broker.Produce(ctx, n.from, more); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 60*time.Second, "the group to commit the source's end", func() bool {
		return cmp.Equal(highs(t, n.from), groupOffsets(t, n.group, n.from))
	})
	if got := strings.Count(logsB.String(), `"partitions assigned"`); got != 2 {
		t.Fatalf("copier B was assigned partitions %d times, want 2 (its join and A's first join): A's restart rebalanced the group; B's log:\n%s", got, logsB.String())
	}
	if got := strings.Count(logsB.String(), `"partitions revoked"`); got != revokedB {
		t.Fatalf("copier B was revoked %d times after A's restart: A's restart rebalanced the group; B's log:\n%s", got-revokedB, logsB.String())
	}
	cancel()
	if r := <-doneB; r.err != nil {
		t.Fatalf("copier B: %v", r.err)
	}
	if err := restarted.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := restarted.exitCode(t, 30*time.Second); code != 0 {
		t.Fatalf("copier A after SIGTERM exited %d, want 0; stderr:\n%s", code, restarted.stderr.String())
	}
	if diff := cmp.Diff(want, readCommitted(t, n.to)); diff != "" {
		t.Fatalf("destination (-source +destination):\n%s", diff)
	}
	verifyClean(t, n.from, n.to)
}
