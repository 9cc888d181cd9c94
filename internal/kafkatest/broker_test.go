//go:build kafka

package kafkatest

// Tests against a real Apache Kafka broker. They are built only with the
// kafka tag (they need Java and the Maven jars), and then they never skip:
//
//	$ go test -tags kafka -count=1 ./internal/kafkatest/
//
// TestBroker starts and stops its own broker; TestRebuildOverKafka uses the
// broker that KMATERIALIZE_TEST_KAFKA names (scripts/test-kafka) or starts
// one.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestBroker starts a broker, writes and reads records over PLAINTEXT,
// authenticates the tool user over SASL/SCRAM with only the ACLs granted
// here, sees it refused on a topic without ACLs, and stops the broker with
// its files removed.
func TestBroker(t *testing.T) {
	ctx := context.Background()
	b, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop() }) // if the test fails before it stops the broker
	rss, err := b.RSS()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Apache Kafka %s: jars %s, format %s, start to ready %s; RSS %d MiB",
		b.Version, b.Timings.Fetch, b.Timings.Format, b.Timings.Ready, rss>>20)
	if !regexp.MustCompile(`^4\.\d+\.\d+$`).MatchString(b.Version) {
		t.Fatalf("version %q, want a 4.x release", b.Version)
	}
	if err := logHasVersion(b); err != nil {
		t.Fatal(err)
	}

	rng := newRand(t)
	name := fmt.Sprintf("kafkatest-broker-%d", rng.Int63())
	open, secret := name+"-open", name+"-secret"
	adm := admin(t, b.Endpoint)
	createTopic(t, adm, open, 3)
	createTopic(t, adm, secret, 1)

	// PLAINTEXT: what was written is read back, per partition in order.
	recs := genRecords(rng, 3, 60)
	produced := produce(t, b.Endpoint, open, recs)
	ends := endOffsets(t, adm, open)
	plain, err := b.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	checkRecords(t, "PLAINTEXT", produced, consume(t, plain, open, ends))

	// SASL/SCRAM: the tool user may Describe and Read the open topic, and
	// nothing else.
	sadm := kadm.NewClient(saslClient(t, b.Endpoint, b.AdminUser, b.AdminPassword))
	acl := kadm.NewACLs().Allow("User:"+b.ToolUser).AllowHosts("*").Topics(open).ResourcePatternType(kadm.ACLPatternLiteral).Operations(kadm.OpDescribe, kadm.OpRead)
	created, err := sadm.CreateACLs(ctx, acl)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range created {
		if c.Err != nil {
			t.Fatalf("create ACL %+v: %v", c, c.Err)
		}
	}
	// The grant is in force: the broker lists exactly these two.
	described, err := sadm.DescribeACLs(ctx, kadm.NewACLs().Allow("User:"+b.ToolUser).AllowHosts().AnyResource().ResourcePatternType(kadm.ACLPatternAny).Operations(kadm.OpAny))
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, d := range described {
		if d.Err != nil {
			t.Fatal(d.Err)
		}
		for _, a := range d.Described {
			ops = append(ops, fmt.Sprintf("%s %s %s %s", a.Principal, a.Type, a.Name, a.Operation))
		}
	}
	sort.Strings(ops)
	wantOps := []string{
		fmt.Sprintf("User:%s TOPIC %s DESCRIBE", b.ToolUser, open),
		fmt.Sprintf("User:%s TOPIC %s READ", b.ToolUser, open),
	}
	if diff := cmp.Diff(wantOps, ops); diff != "" {
		t.Fatalf("the tool user's ACLs (-granted +broker):\n%s", diff)
	}
	tool := saslClient(t, b.Endpoint, b.ToolUser, b.ToolPassword)
	checkRecords(t, "SASL_PLAINTEXT as the tool user", produced, consume(t, tool, open, ends))

	// Without an ACL the same user is refused: metadata of the secret topic
	// answers TOPIC_AUTHORIZATION_FAILED, so it cannot even see it.
	meta, err := kadm.NewClient(tool).Metadata(ctx, secret)
	if err == nil {
		err = meta.Topics[secret].Err
	}
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("the tool user's metadata of %s: %v, want TOPIC_AUTHORIZATION_FAILED", secret, err)
	}
	// A wrong password does not authenticate.
	wrong, err := b.SASLClient(b.ToolUser, b.ToolPassword+"x")
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	if err := wrong.Ping(ctx); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("a wrong password: %v, want SASL_AUTHENTICATION_FAILED", err)
	}

	deleted, err := adm.DeleteTopics(ctx, open, secret)
	if err == nil {
		err = deleted.Error()
	}
	if err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped in %s", time.Since(t0))
	select {
	case <-b.Exited():
	default:
		t.Fatal("Stop returned with the broker still running")
	}
	if _, err := os.Stat(b.Dir); !os.IsNotExist(err) {
		t.Fatalf("after Stop, %s: %v, want it removed", b.Dir, err)
	}
	if c, err := net.DialTimeout("tcp", b.Addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("after Stop, %s still accepts connections", b.Addr)
	}
}

// TestStartRefusesNoSLF4JProvider: with jars that lack slf4j-simple, Kafka
// would log nothing; Start refuses such a broker and says why.
func TestStartRefusesNoSLF4JProvider(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(filepath.Join(root, "testdata", "kafka", "pom.xml"))
	if err != nil {
		t.Fatal(err)
	}
	dep := regexp.MustCompile(`(?s)<dependency>\s*<groupId>org\.slf4j</groupId>\s*<artifactId>slf4j-simple</artifactId>.*?</dependency>`)
	if !dep.Match(body) {
		t.Fatal("the pom has no slf4j-simple dependency to remove")
	}
	dir := t.TempDir()
	pom := filepath.Join(dir, "pom.xml")
	if err := os.WriteFile(pom, dep.ReplaceAll(body, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	jars, err := Fetch(context.Background(), FetchOptions{POM: pom, CacheDir: filepath.Join(dir, "cache")})
	if err != nil {
		t.Fatal(err)
	}
	// The condition is there: no provider among the jars.
	if m, _ := filepath.Glob(filepath.Join(jars.Dir, "slf4j-simple-*.jar")); len(m) != 0 || !hasBrokerJar(jars.Dir, jars.Version) {
		t.Fatalf("jars in %s: slf4j-simple %v, broker jar %v; want the broker without a provider", jars.Dir, m, hasBrokerJar(jars.Dir, jars.Version))
	}
	b, err := Start(context.Background(), Options{Jars: FetchOptions{POM: pom, CacheDir: filepath.Join(dir, "cache")}})
	if err == nil {
		b.Stop()
		t.Fatal("Start with no SLF4J provider succeeded")
	}
	if !strings.Contains(err.Error(), noProviders) {
		t.Fatalf("Start with no SLF4J provider: %v, want it to say %q", err, noProviders)
	}
	t.Logf("Start refused: %v", err)
}

// TestRebuildOverKafka is the end-to-end proof of the plumbing: the built
// kmaterialize binary rebuilds a topic from Apache Kafka (plain records, a
// committed and an aborted transaction, null keys, tombstones) and `scan`
// equals a plain fold of what was committed.
func TestRebuildOverKafka(t *testing.T) {
	e := endpoint(t)
	bin := buildKmaterialize(t)

	rng := newRand(t)
	topic := fmt.Sprintf("kafkatest-rebuild-%d", rng.Int63())
	adm := admin(t, e)
	createTopic(t, adm, topic, 3)
	t.Cleanup(func() {
		if _, err := adm.DeleteTopics(context.Background(), topic); err != nil {
			t.Errorf("delete topic %s: %v", topic, err)
		}
	})

	all := produce(t, e, topic, genRecords(rng, 3, 80))
	all = append(all, txn(t, e, topic+"-txn-1", topic, genRecords(rng, 3, 20), true)...)
	all = append(all, txn(t, e, topic+"-txn-2", topic, genRecords(rng, 3, 20), false)...)
	all = append(all, produce(t, e, topic, genRecords(rng, 3, 40))...)
	// The last record of some partition is a commit marker.
	all = append(all, txn(t, e, topic+"-txn-3", topic, genRecords(rng, 3, 10), true)...)
	want, read, skipped := oracle(all)
	ends := stableEnds(t, adm, topic)
	// The condition is there: some partition's last offset is a commit
	// marker (a control record of type 1 after its last data record).
	markerLast := false
	from := map[int32]int64{}
	for p, hw := range ends {
		from[p] = max(hw-1, 0)
	}
	tail := readLog(t, e, topic, from, ends)
	for _, r := range tail {
		markerLast = markerLast || r.Offset == ends[r.Partition]-1 && r.Attrs.IsControl() && isCommit(r)
	}
	if !markerLast {
		t.Fatalf("no partition ends in a commit marker: high watermarks %v; the last entries:\n%s", ends, describe(tail))
	}

	db := filepath.Join(t.TempDir(), "tables.db")
	out := kmz(t, bin, 0, "rebuild", "--brokers", e.Addr, "--topic", topic, "--db", db, "--stall-timeout", "30s")
	line := fmt.Sprintf("published table %s: generation 1, %d keys, %d records read, %d skipped", topic, len(want), read, skipped)
	if !strings.Contains(out, line) {
		t.Fatalf("rebuild stdout %q lacks %q", out, line)
	}
	if diff := cmp.Diff(want, scan(t, bin, db, topic)); diff != "" {
		t.Fatalf("table (-oracle +scan):\n%s", diff)
	}

	var tables []struct {
		Name       string
		Partitions []struct {
			Partition int32
			High, End int64
		}
	}
	if err := json.Unmarshal([]byte(kmz(t, bin, 0, "tables", "--db", db, "--format", "json")), &tables); err != nil {
		t.Fatal(err)
	}
	if len(tables) != 1 || len(tables[0].Partitions) != 3 {
		t.Fatalf("tables: %+v, want one table of 3 partitions", tables)
	}
	for _, p := range tables[0].Partitions {
		if hw := ends[p.Partition]; p.High != hw || p.End != hw {
			t.Fatalf("tables: partition %d high %d end %d, want the broker's high watermark %d", p.Partition, p.High, p.End, hw)
		}
	}
}

// endpoint is the broker KMATERIALIZE_TEST_KAFKA names, or one started for
// this test.
func endpoint(t *testing.T) Endpoint {
	t.Helper()
	e, ok, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		t.Logf("Apache Kafka %s from %s=%s", e.Version, EnvAddr, e.Addr)
		return e
	}
	b, err := Start(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Error(err)
		}
	})
	return b.Endpoint
}

func logHasVersion(b *Broker) error {
	log, err := os.ReadFile(b.LogPath)
	if err != nil {
		return err
	}
	if !strings.Contains(string(log), "Kafka version: "+b.Version) {
		return fmt.Errorf("the broker's log does not say it is Kafka %s", b.Version)
	}
	return nil
}

func newRand(t *testing.T) *rand.Rand {
	seed := time.Now().UnixNano()
	if s := os.Getenv("KMATERIALIZE_TEST_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d (rerun with KMATERIALIZE_TEST_SEED=%d)", seed, seed)
	return rand.New(rand.NewSource(seed))
}

func admin(t *testing.T, e Endpoint) *kadm.Client {
	t.Helper()
	cl, err := e.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func saslClient(t *testing.T, e Endpoint, user, password string) *kgo.Client {
	t.Helper()
	cl, err := e.SASLClient(user, password)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// createTopic creates topic and waits until every partition has a leader:
// Kafka creates topics and elects leaders asynchronously.
func createTopic(t *testing.T, adm *kadm.Client, topic string, partitions int32) {
	t.Helper()
	ctx := context.Background()
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		meta, err := adm.Metadata(ctx, topic)
		if err == nil {
			td := meta.Topics[topic]
			led := td.Err == nil && len(td.Partitions) == int(partitions)
			for _, p := range td.Partitions {
				led = led && p.Err == nil && p.Leader >= 0
			}
			if led {
				return
			}
			err = fmt.Errorf("topic %v, %d partitions", td.Err, len(td.Partitions))
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s has no leader for every partition within 30s: %v", topic, err)
		}
		time.Sleep(100 * time.Millisecond) // polling a condition with a deadline
	}
}

// rec is a record as the broker stored it.
type rec struct {
	P         int32
	O         int64
	K, V      []byte // nil is a null
	Committed bool
}

// genRecords generates n records over partitions 0..parts-1 with keys from a
// small pool per partition (so keys repeat), about 1 in 10 with a null key
// and 1 in 7 a tombstone.
func genRecords(rng *rand.Rand, parts int32, n int) []*kgo.Record {
	out := make([]*kgo.Record, 0, n)
	for i := 0; i < n; i++ {
		p := rng.Int31n(parts)
		r := &kgo.Record{Partition: p, Key: []byte(fmt.Sprintf("p%d-k%02d", p, rng.Intn(8)))}
		switch x := rng.Intn(100); {
		case x < 10:
			r.Key, r.Value = nil, []byte(fmt.Sprintf("orphan-%d", rng.Intn(1000)))
		case x < 24: // a tombstone: Value stays nil
		default:
			r.Value = []byte(fmt.Sprintf("v%d-%d", i, rng.Intn(1_000_000)))
		}
		out = append(out, r)
	}
	return out
}

func producerOpts(topic string) []kgo.Opt {
	return []kgo.Opt{kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0)}
}

// produce writes recs outside any transaction and returns them as stored.
func produce(t *testing.T, e Endpoint, topic string, recs []*kgo.Record) []rec {
	t.Helper()
	cl, err := e.Client(producerOpts(topic)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
	return stored(recs, true)
}

// txn writes recs in one transaction with id and commits or aborts it.
func txn(t *testing.T, e Endpoint, id, topic string, recs []*kgo.Record, commit bool) []rec {
	t.Helper()
	ctx := context.Background()
	cl, err := e.Client(append(producerOpts(topic), kgo.TransactionalID(id))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce in transaction %s: %v", id, err)
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatalf("end transaction %s (commit %v): %v", id, commit, err)
	}
	// Apache Kafka's EndTxn returns before the coordinator writes the
	// markers: without this wait the next transaction's records (and its
	// marker) can come before this one's marker in the log. Waiting until no
	// transaction is open keeps the log in the order the test wrote it.
	stableEnds(t, kadm.NewClient(cl), topic)
	return stored(recs, commit)
}

func stored(recs []*kgo.Record, committed bool) []rec {
	out := make([]rec, len(recs))
	for i, r := range recs {
		out[i] = rec{P: r.Partition, O: r.Offset, K: r.Key, V: r.Value, Committed: committed}
	}
	return out
}

// oracle is the latest fold written plainly: committed records in offset
// order per partition; a null key is read and skipped, a null value deletes
// the key, otherwise the last value wins.
func oracle(recs []rec) (table map[string]string, read, skipped int64) {
	rs := append([]rec(nil), recs...)
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].P != rs[j].P {
			return rs[i].P < rs[j].P
		}
		return rs[i].O < rs[j].O
	})
	table = map[string]string{}
	for _, r := range rs {
		if !r.Committed {
			continue
		}
		read++
		switch {
		case r.K == nil:
			skipped++
		case r.V == nil:
			delete(table, string(r.K))
		default:
			table[string(r.K)] = string(r.V)
		}
	}
	return table, read, skipped
}

// endOffsets returns each partition's high watermark from ListOffsets.
func endOffsets(t *testing.T, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	lo, err := adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	lo.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("list end offsets of %s/%d: %v", topic, o.Partition, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	return out
}

// stableEnds waits until no transaction is open on topic (every partition's
// last stable offset equals its high watermark) and returns the high
// watermarks. On Apache Kafka, EndTransaction returns before the
// coordinator has written the markers: a high watermark read at once can
// lack the last commit marker.
func stableEnds(t *testing.T, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		high := endOffsets(t, adm, topic)
		lso, err := adm.ListCommittedOffsets(context.Background(), topic)
		if err != nil {
			t.Fatal(err)
		}
		stable := true
		lso.Each(func(o kadm.ListedOffset) { stable = stable && o.Err == nil && o.Offset == high[o.Partition] })
		if stable && len(lso) > 0 {
			return high
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: last stable offsets %v never reached the high watermarks %v within 30s", topic, lso, high)
		}
		time.Sleep(100 * time.Millisecond) // polling a condition with a deadline
	}
}

// consume reads every partition of topic up to ends with cl (read_uncommitted,
// no group) and returns the data records as stored.
func consume(t *testing.T, cl *kgo.Client, topic string, ends map[int32]int64) []rec {
	t.Helper()
	offsets := map[int32]kgo.Offset{}
	for p := range ends {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets})
	defer cl.RemoveConsumePartitions(map[string][]int32{topic: keys(ends)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []rec
	next := map[int32]int64{}
	for done := false; !done; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume %s: not at %v within 30s (at %v)", topic, ends, next)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("consume %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, rec{P: r.Partition, O: r.Offset, K: r.Key, V: r.Value, Committed: true})
			next[r.Partition] = r.Offset + 1
		})
		done = true
		for p, end := range ends {
			done = done && next[p] >= end
		}
	}
	return out
}

// readLog returns every entry of topic from the offsets in from up to ends,
// transaction markers (control records) included.
func readLog(t *testing.T, e Endpoint, topic string, from, ends map[int32]int64) []*kgo.Record {
	t.Helper()
	cl, err := e.Client(kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offsets := map[int32]kgo.Offset{}
	for p := range ends {
		offsets[p] = kgo.NewOffset().At(from[p])
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	next := map[int32]int64{}
	for done := false; !done; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read the log of %s: not at %v within 30s (at %v)", topic, ends, next)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("read the log of %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			next[r.Partition] = r.Offset + 1
		})
		done = true
		for p, end := range ends {
			done = done && next[p] >= end
		}
	}
	return out
}

// isCommit reports whether the control record r is a commit marker: its key
// is a version (int16) and a type (int16), 1 for commit, 0 for abort.
func isCommit(r *kgo.Record) bool {
	return len(r.Key) == 4 && r.Key[2] == 0 && r.Key[3] == 1
}

func describe(rs []*kgo.Record) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "p%d o%d control=%v commit=%v producer=%d key=%q value=%q\n", r.Partition, r.Offset,
			r.Attrs.IsControl(), r.Attrs.IsControl() && isCommit(r), r.ProducerID, r.Key, r.Value)
	}
	return b.String()
}

func keys(m map[int32]int64) []int32 {
	var out []int32
	for k := range m {
		out = append(out, k)
	}
	return out
}

func checkRecords(t *testing.T, over string, want, got []rec) {
	t.Helper()
	order := func(rs []rec) []rec {
		rs = append([]rec(nil), rs...)
		sort.Slice(rs, func(i, j int) bool { return rs[i].P < rs[j].P || rs[i].P == rs[j].P && rs[i].O < rs[j].O })
		return rs
	}
	if diff := cmp.Diff(order(want), order(got)); diff != "" {
		t.Fatalf("records read over %s (-written +read):\n%s", over, diff)
	}
}

// buildKmaterialize builds the CLI into the test's temporary directory.
func buildKmaterialize(t *testing.T) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "kmaterialize")
	build := exec.Command("go", "build", "-o", bin, "./cmd/kmaterialize")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build kmaterialize: %v\n%s", err, out)
	}
	return bin
}

// kmz runs the binary and fails the test unless it exits with want; it
// returns stdout.
func kmz(t *testing.T, bin string, want int, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	code := cmd.ProcessState.ExitCode()
	t.Logf("$ kmaterialize %s\n-> exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	if code != want {
		t.Fatalf("kmaterialize %s: exit %d, want %d", strings.Join(args, " "), code, want)
	}
	return stdout.String()
}

// scan returns what `scan --format jsonl` prints, checking that keys ascend.
func scan(t *testing.T, bin, db, table string) map[string]string {
	t.Helper()
	got := map[string]string{}
	last := ""
	sc := bufio.NewScanner(strings.NewReader(kmz(t, bin, 0, "scan", "--db", db, "--table", table, "--format", "jsonl")))
	for sc.Scan() {
		var row struct {
			Key   *string `json:"key"`
			Value *string `json:"value"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil || row.Key == nil || row.Value == nil {
			t.Fatalf("scan line %q: not a {key, value} object (%v)", sc.Text(), err)
		}
		if len(got) > 0 && *row.Key <= last {
			t.Fatalf("scan: key %q after %q, want strictly ascending", *row.Key, last)
		}
		last = *row.Key
		got[*row.Key] = *row.Value
	}
	return got
}
