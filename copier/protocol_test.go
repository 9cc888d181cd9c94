package copier_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmaterialize/kmaterialize/copier"
)

// producerSession is the producer id and epoch a batch was written with.
type producerSession struct {
	id    int64
	epoch int16
}

// TestTransactionProtocol shows which transaction protocol the copier's
// producer (librdkafka, bundled in confluent-kafka-go) speaks to the
// broker's coordinator. Under KIP-890's transactions V2 (Kafka 4.x,
// transaction.version 2, EndTxn v5 and Produce v12) the coordinator bumps
// the producer epoch at every EndTxn, so each transaction's batches carry a
// new epoch; under the classic protocol (explicit AddPartitionsToTxn) every
// transaction of one producer session carries the epoch InitProducerId
// gave it. The broker's offer is read from ApiVersions (its finalized
// transaction.version and EndTxn's highest version); the client's choice
// from the epochs of the batches an independent reader reads back, and from
// the coordinator's own record of the transactional id
// (DescribeTransactions).
func TestTransactionProtocol(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	from := uniq(t, "protocol")
	to := from + "-copy"
	want := ledger(t, from, 3, 120)
	broker.TestTopic(t, to, 3, nil)

	cl, err := broker.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	av, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	tv, endTxnMax := int16(-1), int16(-1)
	for _, f := range av.FinalizedFeatures {
		if f.Name == "transaction.version" {
			tv = f.MaxVersionLevel
		}
	}
	for _, k := range av.ApiKeys {
		if k.ApiKey == kmsg.EndTxn.Int16() {
			endTxnMax = k.MaxVersion
		}
	}
	t.Logf("the broker: finalized transaction.version %d, EndTxn up to v%d", tv, endTxnMax)
	if broker.Real() && (tv < 2 || endTxnMax < 5) {
		t.Fatalf("Apache Kafka offers transaction.version %d and EndTxn v%d: want transactions V2 offered (>= 2, >= v5), or this test shows nothing about the client's choice", tv, endTxnMax)
	}

	// The control: franz-go opts into transactions V2 when the cluster's
	// transaction.version is 2. Three transactions of one franz-go
	// producer session must then carry three epochs, or reading epochs
	// back could not tell the protocols apart.
	ctl := from + "-control"
	broker.TestTopic(t, ctl, 1, nil)
	control := controlEpochs(ctx, t, ctl)
	t.Logf("the control (franz-go, one session, 3 transactions): records by producer id and epoch %v", control)
	if tv >= 2 && len(control) != 3 {
		t.Fatalf("franz-go's 3 transactions of one session carry %d producer epochs %v, want 3 (transactions V2 bumps the epoch at each EndTxn): epochs do not show the protocol", len(control), control)
	}

	c := cfg(t, from, to)
	c.BatchRecords = 20
	sum, err := copier.Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Records != int64(len(want)) || sum.Transactions < 4 {
		t.Fatalf("summary %+v: want %d records in at least 4 transactions", sum, len(want))
	}

	sessions := map[producerSession]int{}
	recs, err := broker.ReadCommitted(ctx, to, highs(t, to))
	if err != nil {
		t.Fatal(err)
	}
	for _, rs := range recs {
		for _, r := range rs {
			sessions[producerSession{r.ProducerID, r.ProducerEpoch}]++
		}
	}
	t.Logf("%d transactions; the destination's records by producer id and epoch: %v", sum.Transactions, sessions)
	if len(sessions) != 1 {
		t.Fatalf("the copier's %d transactions carry %d producer epochs %v: the coordinator bumped the epoch per transaction (transactions V2)", sum.Transactions, len(sessions), sessions)
	}
	var s producerSession
	for s = range sessions {
		break
	}
	described := describeTxn(ctx, t, cl, c.TransactionalID)
	t.Logf("the coordinator's record of %s: state %s, producer id %d, epoch %d", c.TransactionalID, described.State, described.ProducerID, described.ProducerEpoch)
	if described.ProducerID != s.id || described.ProducerEpoch != s.epoch {
		t.Fatalf("the coordinator has producer id %d epoch %d after %d commits, the records %d/%d: the epoch moved after the last batch",
			described.ProducerID, described.ProducerEpoch, sum.Transactions, s.id, s.epoch)
	}
}

// controlEpochs commits three transactions of one franz-go producer session
// to topic and returns that session's records by producer id and epoch. A
// session whose produce fails (kfake answered OUT_OF_ORDER_SEQUENCE_NUMBER
// to franz-go's transactions V2 once in 3 runs under -race) is given up and
// a new one, with its own transactional id, tried, three at most: the
// records are told apart by the session that wrote them.
func controlEpochs(ctx context.Context, t *testing.T, topic string) map[producerSession]int {
	t.Helper()
	for attempt := 0; attempt < 3; attempt++ {
		if err := controlSession(ctx, topic, attempt); err != nil {
			t.Logf("control session %d: %v; trying a new session", attempt, err)
			continue
		}
		out := map[producerSession]int{}
		for _, r := range readUncommitted(t, topic) {
			if r.Value[0] == byte('0'+attempt) {
				out[producerSession{r.ProducerID, r.ProducerEpoch}]++
			}
		}
		return out
	}
	t.Fatal("no control session of 3 committed franz-go transactions in 3 attempts")
	return nil
}

func controlSession(ctx context.Context, topic string, attempt int) error {
	cl, err := broker.Client(kgo.TransactionalID(fmt.Sprintf("%s-txn-%d", topic, attempt)), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	defer cl.Close()
	for i := 0; i < 3; i++ {
		if err := cl.BeginTransaction(); err != nil {
			return err
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte{byte('0' + attempt), byte('a' + i)}}).FirstErr(); err != nil {
			_ = cl.EndTransaction(ctx, kgo.TryAbort)
			return err
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			return err
		}
	}
	return nil
}

// describeTxn asks the coordinator for transactional id tid's state.
func describeTxn(ctx context.Context, t *testing.T, cl *kgo.Client, tid string) kmsg.DescribeTransactionsResponseTransactionState {
	t.Helper()
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{tid}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("describe transaction %s: %v", tid, err)
	}
	if len(resp.TransactionStates) != 1 || resp.TransactionStates[0].ErrorCode != 0 {
		t.Fatalf("describe transaction %s: %+v", tid, resp.TransactionStates)
	}
	return resp.TransactionStates[0]
}
