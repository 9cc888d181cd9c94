// Package localkafka owns the in-process Kafka-compatible broker (kfake) that
// the demo, `kmaterialize dev broker` (StartDev) and the tests run on
// loopback, and the independent client (franz-go) they use to write records
// and commit offsets to it. It ships in the binary for the demo and the dev
// broker; neither is for production.
//
// Nothing in the product's read path depends on it: the replay and the
// copier talk to it over the Kafka wire protocol exactly as they talk to
// Apache Kafka.
//
// # One suite, two brokers
//
// When KMATERIALIZE_TEST_KAFKA names a real Apache Kafka (scripts/test-kafka
// starts one; see internal/kafkatest), [RunTests] gives the tests that broker
// instead of a kfake: its Broker has Addr and Kafka set and Cluster nil, so
// nothing kfake-specific is reachable. The fixtures (topics, records,
// transactions, DeleteRecords, marks, compaction) speak the Kafka protocol
// through franz-go and kadm and behave alike on both: a created topic is
// awaited until every partition has a leader, an ended transaction until its
// marker is in every partition it wrote, marks come from ListOffsets and
// Metadata, and compaction is awaited until the offsets are gone
// ([Broker.AwaitCompacted]: kfake compacts on demand, Kafka's log cleaner is
// given filler that rolls its segments). A test that needs kfake's fault
// injection calls [KfakeOnly] and skips on the real broker with
// [KfakeOnlyReason]; any other [Start] of a kfake in a test process under
// KMATERIALIZE_TEST_KAFKA is an error, so a test cannot pass the real-broker
// pass on a kfake of its own.
package localkafka

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmaterialize/kmaterialize/internal/kafkatest"
)

// Broker is the broker a test talks to: a running kfake cluster with one
// broker on 127.0.0.1, or (under KMATERIALIZE_TEST_KAFKA, see RunTests) a
// real Apache Kafka that another process started.
type Broker struct {
	// Cluster is the in-process kfake; nil on a real Kafka, so that a
	// test reaching for kfake's controls there fails at once (it should
	// have called KfakeOnly).
	Cluster *kfake.Cluster
	Addr    string
	// Kafka is the real broker's endpoint; zero on kfake.
	Kafka kafkatest.Endpoint
	// ClientOpts are given to every client of this broker, the fixtures'
	// admin included: the credentials of a broker that requires SASL.
	ClientOpts []kgo.Opt
}

// Real reports whether b is a real Apache Kafka rather than a kfake.
func (b *Broker) Real() bool { return b.Cluster == nil }

// ErrKfakeOnRealPass is returned by Start in a test process run against a
// real Kafka (KMATERIALIZE_TEST_KAFKA set): a test that started a kfake of
// its own would pass the real pass without touching the real broker.
var ErrKfakeOnRealPass = errors.New("an in-process kfake was started while " + kafkatest.EnvAddr + " names a real Kafka: use the real broker, or mark the test localkafka.KfakeOnly")

// Start starts a one-broker cluster on a free loopback port. Close stops it.
// In a test process under KMATERIALIZE_TEST_KAFKA it refuses
// (ErrKfakeOnRealPass).
func Start(opts ...kfake.Opt) (*Broker, error) {
	if testing.Testing() && os.Getenv(kafkatest.EnvAddr) != "" {
		return nil, fmt.Errorf("start kfake broker: %w", ErrKfakeOnRealPass)
	}
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("start kfake broker: %w", err)
	}
	return &Broker{Cluster: c, Addr: c.ListenAddrs()[0]}, nil
}

// Close stops the broker (a kfake; a real Kafka belongs to whoever started
// it).
func (b *Broker) Close() {
	if b.Cluster != nil {
		b.Cluster.Close()
	}
}

// KfakeOnlyReason is the one reason every kfake-only test skips with on a
// real Kafka, so that a run's skips can be counted and told apart.
const KfakeOnlyReason = "kfake-only: needs fault injection"

// KfakeOnly skips the test when the tests run against a real Kafka
// (KMATERIALIZE_TEST_KAFKA set): it needs kfake's fault injection (Fault,
// ControlKey, KeepControl, held or dropped requests, a broker of its own
// to stop, compaction on demand).
func KfakeOnly(t interface {
	Helper()
	Skip(args ...any)
}) {
	t.Helper()
	if os.Getenv(kafkatest.EnvAddr) != "" {
		t.Skip(KfakeOnlyReason)
	}
}

// Record is one record to write: a nil Key or Value is a null.
type Record struct {
	Partition int32
	Key       []byte
	Value     []byte
	Timestamp time.Time // zero means now
}

// Client returns a franz-go client for b; extra options are appended.
func (b *Broker) Client(opts ...kgo.Opt) (*kgo.Client, error) {
	all := append([]kgo.Opt{
		kgo.SeedBrokers(b.Addr),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
	}, b.ClientOpts...)
	all = append(all, opts...)
	return kgo.NewClient(all...)
}

// Produce writes records synchronously, each to its given partition, and
// returns the offsets they got.
func (b *Broker) Produce(ctx context.Context, topic string, recs []Record) ([]int64, error) {
	cl, err := b.Client(kgo.DefaultProduceTopic(topic))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return produce(ctx, cl, topic, recs)
}

func produce(ctx context.Context, cl *kgo.Client, topic string, recs []Record) ([]int64, error) {
	krs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		krs[i] = &kgo.Record{Topic: topic, Partition: r.Partition, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
	}
	// ProduceSync's results come in completion order, not input order;
	// the offsets are read back from the records themselves.
	if err := cl.ProduceSync(ctx, krs...).FirstErr(); err != nil {
		return nil, fmt.Errorf("produce to %s: %w", topic, err)
	}
	offs := make([]int64, len(krs))
	for i, kr := range krs {
		offs[i] = kr.Offset
	}
	return offs, nil
}

// Txn is an open transaction on a transactional franz-go producer.
type Txn struct {
	b        *Broker
	cl       *kgo.Client
	topic    string
	txnID    string
	produced map[int32][]int64 // partition -> offsets this transaction wrote
	spy      *abortSpy
}

// abortSpy watches the transactional client's log for the line franz-go
// writes when it turns a commit into an abort (see ErrCommitAborted), so
// that End can say so instead of reporting a commit.
type abortSpy struct{ aborted atomic.Bool }

func (s *abortSpy) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (s *abortSpy) Log(_ kgo.LogLevel, msg string, _ ...any) {
	if strings.HasPrefix(msg, "no produce succeeded in this transaction") {
		s.aborted.Store(true)
	}
}

// BeginTxn starts a transaction with the given transactional id.
func (b *Broker) BeginTxn(ctx context.Context, topic, txnID string) (*Txn, error) {
	spy := &abortSpy{}
	cl, err := b.Client(kgo.DefaultProduceTopic(topic), kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(10*time.Minute), kgo.WithLogger(spy))
	if err != nil {
		return nil, err
	}
	if err := cl.BeginTransaction(); err != nil {
		cl.Close()
		return nil, fmt.Errorf("begin transaction %s: %w", txnID, err)
	}
	return &Txn{b: b, cl: cl, topic: topic, txnID: txnID, produced: map[int32][]int64{}, spy: spy}, nil
}

// Produce writes records inside the transaction.
func (t *Txn) Produce(ctx context.Context, recs []Record) ([]int64, error) {
	offs, err := produce(ctx, t.cl, t.topic, recs)
	for i, o := range offs {
		t.produced[recs[i].Partition] = append(t.produced[recs[i].Partition], o)
	}
	return offs, err
}

// ErrCommitAborted is returned by CommitTxn's check when a commit was asked
// for and franz-go reported success, but the transaction's records are not
// visible to a read_committed reader: the client aborted the transaction
// instead. franz-go v1.22.3's EndTransaction does that under CPU load: it
// logs "no produce succeeded in this transaction but produces were
// attempted; issuing an abort", sends EndTxn(abort) and returns nil,
// although every produce of the transaction had succeeded. A test that
// trusted that nil expected records the source never committed (issue 7:
// the copier was blamed for "losing" a record that had been aborted).
var ErrCommitAborted = errors.New("the transaction was aborted although a commit was asked for and franz-go reported success")

// End commits (commit=true) or aborts the transaction and closes the client.
// franz-go may turn a commit into an abort and still return nil (see
// ErrCommitAborted); End returns ErrCommitAborted when franz-go logged that
// it did. WriteTxn redoes such a transaction; CommitTxn also checks the
// records with an independent reader.
func (t *Txn) End(ctx context.Context, commit bool) error {
	defer t.cl.Close()
	if err := t.cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		return fmt.Errorf("end transaction (commit=%v): %w", commit, err)
	}
	if err := t.awaitMarkers(ctx); err != nil {
		return err
	}
	if commit && t.spy != nil && t.spy.aborted.Load() {
		return fmt.Errorf("end transaction %s: franz-go logged that it aborted instead: %w", t.txnID, ErrCommitAborted)
	}
	return nil
}

// awaitMarkers waits until the ended transaction's marker is in every
// partition it wrote. Kafka's EndTxn returns before the coordinator has
// written the markers (kfake writes them inside EndTxn): a high watermark
// read at once can lack the marker, and a transaction begun next can put
// its records before it. The marker is in once the last stable offset has
// passed the transaction's first offset there (while the transaction is
// open the LSO is at most that offset); with no other transaction open that
// is LSO == high watermark. A transaction begun earlier on the partition and
// still open holds the LSO below, and the wait fails at its bound.
func (t *Txn) awaitMarkers(ctx context.Context) error {
	if len(t.produced) == 0 {
		return nil
	}
	first := map[int32]int64{}
	for p, offs := range t.produced {
		first[p] = offs[0]
		for _, o := range offs {
			first[p] = min(first[p], o)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var last map[int32]Marks
	for {
		marks, err := t.b.Marks(ctx, t.topic)
		if err == nil {
			last = marks
			done := true
			for p, f := range first {
				if m, ok := marks[p]; !ok || m.LSO <= f {
					done = false
				}
			}
			if done {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("transaction %s on %s: the markers did not appear (first offsets %v, marks %v, last error %v): %w", t.txnID, t.topic, first, last, err, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// WriteTxn writes recs to topic in one transaction that it commits or
// aborts, and returns their offsets. A commit that franz-go turned into an
// abort (End's ErrCommitAborted) is redone, up to three times; the aborted
// attempt stays in the log, skipped by read_committed readers. Unlike
// CommitTxn it reads nothing back, so other transactions may be open.
func (b *Broker) WriteTxn(ctx context.Context, topic, txnID string, recs []Record, commit bool) ([]int64, error) {
	return b.redoTxn(ctx, topic, txnID, recs, commit, nil)
}

// redoTxn writes recs in one transaction, ends it (commit or abort), runs
// check (if not nil) on the ended transaction, and redoes the whole
// transaction, up to three times, while End or check report
// ErrCommitAborted.
func (b *Broker) redoTxn(ctx context.Context, topic, txnID string, recs []Record, commit bool, check func(*Txn) error) ([]int64, error) {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var tx *Txn
		if tx, err = b.BeginTxn(ctx, topic, txnID); err != nil {
			return nil, err
		}
		offs, perr := tx.Produce(ctx, recs)
		if perr != nil {
			_ = tx.End(ctx, false)
			return nil, perr
		}
		err = tx.End(ctx, commit)
		if err == nil && check != nil {
			err = check(tx)
		}
		if err == nil {
			return offs, nil
		}
		if !errors.Is(err, ErrCommitAborted) {
			return nil, err
		}
	}
	return nil, err
}

// checkCommitted reads what the ended transaction wrote with an independent
// read_committed reader and returns ErrCommitAborted if any of it is
// missing. It must only be used when no other transaction is open on those
// partitions (a read_committed reader waits for it).
func (t *Txn) checkCommitted(ctx context.Context) error {
	// To the high watermark: the transaction's marker is there by now, and
	// a reader needs it (or a later record) to get past an aborted batch.
	marks, err := t.b.Marks(ctx, t.topic)
	if err != nil {
		return fmt.Errorf("check the commit of transaction %s: %w", t.txnID, err)
	}
	ends := map[int32]int64{}
	for p := range t.produced {
		ends[p] = marks[p].High
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	recs, err := t.b.ReadCommitted(ctx, t.topic, ends)
	if err != nil {
		return fmt.Errorf("check the commit of transaction %s: %w", t.txnID, err)
	}
	for p, offs := range t.produced {
		seen := map[int64]bool{}
		for _, r := range recs[p] {
			seen[r.Offset] = true
		}
		for _, o := range offs {
			if !seen[o] {
				return fmt.Errorf("transaction %s: %s/%d offset %d not visible read_committed: %w", t.txnID, t.topic, p, o, ErrCommitAborted)
			}
		}
	}
	return nil
}

// CommitTxn writes recs to topic in one committed transaction, checks with
// an independent read_committed read that they are visible, and returns
// their offsets. When franz-go aborted the transaction instead of committing
// it (ErrCommitAborted), the transaction is redone, up to three times: the
// aborted attempt stays in the log as an aborted batch and its marker,
// which read_committed readers skip. No other transaction may be open on
// the partitions written (the check would wait for it).
func (b *Broker) CommitTxn(ctx context.Context, topic, txnID string, recs []Record) ([]int64, error) {
	return b.redoTxn(ctx, topic, txnID, recs, true, func(tx *Txn) error { return tx.checkCommitted(ctx) })
}

// CommitGroupOffsets commits offsets for group on topic, as a paused
// consumer group would have them.
func (b *Broker) CommitGroupOffsets(ctx context.Context, group, topic string, offsets map[int32]int64) error {
	cl, err := b.Client()
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	os := kadm.Offsets{}
	for p, o := range offsets {
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: o, LeaderEpoch: -1})
	}
	resp, err := adm.CommitOffsets(ctx, group, os)
	if err != nil {
		return fmt.Errorf("commit offsets for group %s: %w", group, err)
	}
	return resp.Error()
}

// GroupOffsets lists every group on the cluster with its committed offsets.
func (b *Broker) GroupOffsets(ctx context.Context) (map[string]map[string]map[int32]int64, error) {
	cl, err := b.Client()
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	out := map[string]map[string]map[int32]int64{}
	for _, g := range groups.Groups() {
		offs, err := adm.FetchOffsets(ctx, g)
		if err != nil {
			return nil, fmt.Errorf("fetch offsets of group %s: %w", g, err)
		}
		m := map[string]map[int32]int64{}
		offs.Each(func(o kadm.OffsetResponse) {
			if m[o.Topic] == nil {
				m[o.Topic] = map[int32]int64{}
			}
			m[o.Topic][o.Partition] = o.At
		})
		out[g] = m
	}
	return out, nil
}

// RunTests is a package's TestMain in one call: it starts a broker, stores
// it in *b, runs the tests and stops the broker, returning the exit code.
// When KMATERIALIZE_TEST_KAFKA is set it starts nothing: *b is the real
// Kafka that the environment names (kafkatest.FromEnv), with Cluster nil.
func RunTests(m interface{ Run() int }, b **Broker) int {
	if e, ok, err := kafkatest.FromEnv(); err != nil || ok {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		*b = &Broker{Addr: e.Addr, Kafka: e}
		return m.Run()
	}
	br, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer br.Close()
	*b = br
	return m.Run()
}

// ReadCommitted reads topic from the start of each partition in ends up to
// the offset given there, with an independent read_committed client
// (franz-go), and returns the data records per partition in offset order.
// Transaction markers are followed (kept, then dropped) so that a partition
// ending in a marker completes by position.
func (b *Broker) ReadCommitted(ctx context.Context, topic string, ends map[int32]int64) (map[int32][]*kgo.Record, error) {
	offsets := map[int32]kgo.Offset{}
	for p := range ends {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	cl, err := b.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	got := map[int32][]*kgo.Record{}
	pos := map[int32]int64{}
	done := func() bool {
		for p, e := range ends {
			if pos[p] < e {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return got, fmt.Errorf("read %s read_committed: %w (positions %v, ends %v)", topic, err, pos, ends)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= ends[r.Partition] {
				return
			}
			pos[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				got[r.Partition] = append(got[r.Partition], r)
			}
		})
	}
	return got, nil
}
