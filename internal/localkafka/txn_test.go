package localkafka

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCommitTxnRedoesACommitTurnedAbort reproduces what franz-go v1.22.3
// does under load (issue 7): EndTransaction asked to commit sends an abort
// and returns nil. Here the broker is made to abort the first commit it is
// asked for (the EndTxn request's commit flag is cleared, once), so the
// client sees success for a transaction that was aborted. CommitTxn must
// notice with its independent read and redo the transaction, so that the
// records are committed exactly once; Txn.End alone must not be trusted.
func TestCommitTxnRedoesACommitTurnedAbort(t *testing.T) {
	KfakeOnly(t)
	b, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	const topic = "commit-turned-abort"
	if err := b.CreateTopic(topic, 1, nil); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	turned := 0
	b.Cluster.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster.KeepControl()
		r := req.(*kmsg.EndTxnRequest)
		mu.Lock()
		defer mu.Unlock()
		if r.Commit && turned == 0 {
			r.Commit = false // the fault: the commit becomes an abort
			turned++
		}
		return nil, nil, false
	})

	offs, err := b.CommitTxn(ctx, topic, topic+"-txn", []Record{{Key: []byte("k"), Value: []byte("v")}})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := turned
	mu.Unlock()
	if n != 1 {
		t.Fatalf("%d commits were turned into aborts, want 1: the test proves nothing", n)
	}
	// The aborted attempt (record and marker) comes first, so the
	// committed record is at offset 2.
	if len(offs) != 1 || offs[0] != 2 {
		t.Fatalf("offsets %v, want [2] (after the aborted attempt and its marker)", offs)
	}
	recs, err := b.ReadCommitted(ctx, topic, map[int32]int64{0: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs[0]) != 1 || recs[0][0].Offset != 2 || string(recs[0][0].Value) != "v" {
		t.Fatalf("read_committed records %v, want the one committed record at offset 2", recs[0])
	}

	// The check itself, on a transaction that ended in an abort while a
	// commit was asked for and the client said nothing.
	tx, err := b.BeginTxn(ctx, topic, topic+"-txn")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Produce(ctx, []Record{{Key: []byte("k"), Value: []byte("w")}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	turned = 0
	mu.Unlock()
	// The client reports success, unless franz-go itself turned the
	// commit into an abort and logged it (End's ErrCommitAborted): the
	// transaction is aborted either way.
	if err := tx.End(ctx, true); err != nil && !errors.Is(err, ErrCommitAborted) {
		t.Fatalf("End: %v (the client is expected to report success)", err)
	}
	if err := tx.checkCommitted(ctx); !errors.Is(err, ErrCommitAborted) {
		t.Fatalf("checkCommitted = %v, want ErrCommitAborted", err)
	}
}
