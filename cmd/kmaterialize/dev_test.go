package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// devProc is a `kmaterialize dev broker` child process: its stdout is read
// line by line (the address is printed there), its stdin closed at once.
type devProc struct {
	cmd    *exec.Cmd
	lines  chan string   // stdout lines; closed at EOF
	exited chan struct{} // closed when the process has exited (Wait returned)
	code   int
	mu     sync.Mutex
	out    strings.Builder // all of stdout
	errb   strings.Builder // all of stderr
}

// startDevBroker starts the built binary's dev broker with args, closes its
// stdin, and returns once it has printed its export line, with the broker's
// address. The process is killed at the end of the test if it still runs.
func startDevBroker(t *testing.T, args ...string) (*devProc, string) {
	t.Helper()
	p := &devProc{cmd: exec.Command(binPath, append([]string{"dev", "broker"}, args...)...),
		lines: make(chan string, 64), exited: make(chan struct{})}
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = &lockedWriter{mu: &p.mu, b: &p.errb}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Stdin is closed before anything else happens: the broker must not
	// take that as its end (the kfakebroker of bench/ did).
	if err := stdin.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("started pid %d: kmaterialize dev broker %s", p.cmd.Process.Pid, strings.Join(args, " "))
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			p.lines <- sc.Text()
		}
	}()
	go func() {
		// Wait only after stdout is read to its end (os/exec's rule for
		// StdoutPipe).
		<-readDone
		err := p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		if err != nil {
			if _, ok := err.(*exec.ExitError); !ok {
				p.code = -1
			}
		}
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			for range p.lines {
			}
			<-p.exited
		}
		t.Logf("pid %d stdout:\n%s\nstderr:\n%s", p.cmd.Process.Pid, p.text(&p.out), p.text(&p.errb))
	})
	timer := time.NewTimer(60 * time.Second) // a "did not hang" bound
	defer timer.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				<-p.exited
				t.Fatalf("dev broker exited (%d) before printing its address; stderr:\n%s", p.code, p.text(&p.errb))
			}
			if addr, ok := strings.CutPrefix(line, "export KMATERIALIZE_BROKERS="); ok {
				go func() {
					for range p.lines { // drain, so the broker never blocks on stdout
					}
				}()
				return p, addr
			}
		case <-timer.C:
			t.Fatalf("dev broker printed no export line; stdout:\n%s", p.text(&p.out))
		}
	}
}

func (p *devProc) text(b *strings.Builder) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return b.String()
}

// stop sends SIGTERM and returns the exit code; the process must end
// within a "did not hang" bound.
func (p *devProc) stop(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
		t.Fatalf("dev broker had already exited (%d) before it was signalled; stderr:\n%s", p.code, p.text(&p.errb))
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("dev broker did not exit after SIGTERM; stderr:\n%s", p.text(&p.errb))
	}
	return p.code
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(b)
}

// devRecord is one record as produced and as read back.
type devRecord struct {
	Partition  int32
	Key, Value string
}

// TestDevBroker runs `kmaterialize dev broker --topic a:3 --topic
// b:1:compact --data-dir DIR` as a real process with stdin closed, and
// checks it with an independent client (confluent-kafka-go, and kcat when
// on PATH): the topics' partition counts and cleanup.policy (DescribeConfigs),
// records produced and read back; SIGTERM ends it with exit 0; a broker
// started again on DIR has the records; a --topic that contradicts DIR is
// refused with exit 2.
func TestDevBroker(t *testing.T) {
	localkafka.KfakeOnly(t)
	data := filepath.Join(t.TempDir(), "broker")
	topics := []string{"--topic", "a:3", "--topic", "b:1:compact", "--data-dir", data}
	p, addr := startDevBroker(t, topics...)
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("address %q: want loopback", addr)
	}
	if out := p.text(&p.out); !strings.Contains(out, "not for production") {
		t.Errorf("stdout does not say it is not for production:\n%s", out)
	}

	checkDevTopics(t, addr, map[string]int{"a": 3, "b": 1}, map[string]string{"a": "delete", "b": "compact"})

	// The oracle: every record produced, per topic, in produce order per
	// partition. b is compacted: distinct keys, so compaction would keep
	// every one of them.
	want := map[string][]devRecord{}
	for i := 0; i < 30; i++ {
		want["a"] = append(want["a"], devRecord{Partition: int32(i % 3), Key: fmt.Sprintf("k%d", i%7), Value: fmt.Sprintf("v%d", i)})
	}
	for i := 0; i < 5; i++ {
		want["b"] = append(want["b"], devRecord{Key: fmt.Sprintf("acct-%d", i), Value: fmt.Sprintf("%d.00", i*10)})
	}
	produceDev(t, addr, want)
	for topic, recs := range want {
		checkDevRecords(t, topic, recs, consumeDev(t, addr, topic))
	}
	if kcat, err := exec.LookPath("kcat"); err == nil {
		out, err := exec.Command(kcat, "-b", addr, "-C", "-t", "a", "-e", "-q", "-f", "%p %k %s\n").CombinedOutput()
		if err != nil {
			t.Fatalf("kcat: %v\n%s", err, out)
		}
		var got []devRecord
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var r devRecord
			if _, err := fmt.Sscanf(line, "%d %s %s", &r.Partition, &r.Key, &r.Value); err != nil {
				t.Fatalf("kcat line %q: %v", line, err)
			}
			got = append(got, r)
		}
		checkDevRecords(t, "a (kcat)", want["a"], got)
	} else {
		t.Log("kcat is not on PATH: the topic is read with confluent-kafka-go only")
	}

	// The process still runs, although its stdin was closed before all of
	// the above; SIGTERM ends it cleanly.
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0; stderr:\n%s", code, p.text(&p.errb))
	}

	// Started again on the same directory (on a new free port): the same
	// topics, the records kept.
	p, addr = startDevBroker(t, topics...)
	if out := p.text(&p.out); !strings.Contains(out, "kept topic a (3 partitions)") {
		t.Errorf("stdout does not say topic a was kept:\n%s", out)
	}
	checkDevTopics(t, addr, map[string]int{"a": 3, "b": 1}, map[string]string{"a": "delete", "b": "compact"})
	for topic, recs := range want {
		checkDevRecords(t, topic+" after restart", recs, consumeDev(t, addr, topic))
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0", code)
	}

	// A --topic that contradicts what the directory holds is refused.
	r := mustCLI(t, exitUsage, "dev", "broker", "--topic", "a:4", "--data-dir", data)
	if !strings.Contains(r.stderr, "a:3") || !strings.Contains(r.stderr, "not a:4") {
		t.Fatalf("stderr should name both partition counts:\n%s", r.stderr)
	}
}

// TestDevBrokerUsage: bad --topic specs exit 2 with a hint, before any
// broker starts.
func TestDevBrokerUsage(t *testing.T) {
	for _, spec := range []string{"", "a:0", "a:x", "a:3:delete", "a:1:compact:x", "bad/name", "..", "a:10001"} {
		r := mustCLI(t, exitUsage, "dev", "broker", "--topic", spec)
		if !strings.Contains(r.stderr, "NAME[:PARTITIONS[:compact]]") || !strings.Contains(r.stderr, "Try:") {
			t.Errorf("--topic %q: stderr should show the form and a hint:\n%s", spec, r.stderr)
		}
	}
	mustCLI(t, exitUsage, "dev", "broker", "--topic", "a", "--topic", "a:2")
	mustCLI(t, exitUsage, "dev", "broker", "--port", "70000")
	mustCLI(t, exitUsage, "dev", "broker", "extra")
}

// checkDevTopics checks partition counts (metadata) and cleanup.policy
// (DescribeConfigs) with confluent-kafka-go's admin client.
func checkDevTopics(t *testing.T, addr string, parts map[string]int, policy map[string]string) {
	t.Helper()
	adm, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": addr})
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	md, err := adm.GetMetadata(nil, true, 30000)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for name, tm := range md.Topics {
		got[name] = len(tm.Partitions)
	}
	if diff := cmp.Diff(parts, got); diff != "" {
		t.Errorf("topics and partition counts (-want +got):\n%s", diff)
	}
	var res []kafka.ConfigResource
	for name := range policy {
		res = append(res, kafka.ConfigResource{Type: kafka.ResourceTopic, Name: name})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results, err := adm.DescribeConfigs(ctx, res)
	if err != nil {
		t.Fatal(err)
	}
	gotPolicy := map[string]string{}
	for _, r := range results {
		if r.Error.Code() != kafka.ErrNoError {
			t.Fatalf("DescribeConfigs %s: %v", r.Name, r.Error)
		}
		gotPolicy[r.Name] = r.Config["cleanup.policy"].Value
	}
	if diff := cmp.Diff(policy, gotPolicy); diff != "" {
		t.Errorf("cleanup.policy (-want +got):\n%s", diff)
	}
}

// produceDev writes recs with confluent-kafka-go and checks every delivery.
func produceDev(t *testing.T, addr string, recs map[string][]devRecord) {
	t.Helper()
	pr, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": addr, "linger.ms": 0, "enable.idempotence": true})
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	n := 0
	for topic, rs := range recs {
		for _, r := range rs {
			tp := topic
			if err := pr.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &tp, Partition: r.Partition},
				Key: []byte(r.Key), Value: []byte(r.Value)}, nil); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	deadline := time.After(60 * time.Second)
	for n > 0 {
		select {
		case ev := <-pr.Events():
			if m, ok := ev.(*kafka.Message); ok {
				if m.TopicPartition.Error != nil {
					t.Fatalf("delivery to %s: %v", m.TopicPartition, m.TopicPartition.Error)
				}
				n--
			}
		case <-deadline:
			t.Fatalf("%d deliveries not reported", n)
		}
	}
}

// consumeDev reads every partition of topic from its start to its high
// watermark with a confluent-kafka-go consumer on assigned partitions.
func consumeDev(t *testing.T, addr, topic string) []devRecord {
	t.Helper()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": addr, "group.id": runName(t),
		"enable.auto.commit": false, "enable.partition.eof": false})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	md, err := c.GetMetadata(&topic, false, 30000)
	if err != nil {
		t.Fatal(err)
	}
	ends := map[int32]int64{}
	var tps []kafka.TopicPartition
	for _, pm := range md.Topics[topic].Partitions {
		_, high, err := c.QueryWatermarkOffsets(topic, pm.ID, 30000)
		if err != nil {
			t.Fatal(err)
		}
		ends[pm.ID] = high
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: pm.ID, Offset: kafka.OffsetBeginning})
	}
	if err := c.Assign(tps); err != nil {
		t.Fatal(err)
	}
	pos := map[int32]int64{}
	done := func() bool {
		for p, e := range ends {
			if pos[p] < e {
				return false
			}
		}
		return true
	}
	var got []devRecord
	deadline := time.Now().Add(60 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("read %s: positions %v, ends %v", topic, pos, ends)
		}
		switch ev := c.Poll(100).(type) {
		case *kafka.Message:
			p := ev.TopicPartition.Partition
			pos[p] = int64(ev.TopicPartition.Offset) + 1
			got = append(got, devRecord{Partition: p, Key: string(ev.Key), Value: string(ev.Value)})
		case kafka.Error:
			t.Logf("consumer: %v", ev)
		}
	}
	return got
}

// checkDevRecords compares records per partition, in order.
func checkDevRecords(t *testing.T, what string, want, got []devRecord) {
	t.Helper()
	byPart := func(rs []devRecord) map[int32][]devRecord {
		m := map[int32][]devRecord{}
		for _, r := range rs {
			m[r.Partition] = append(m[r.Partition], r)
		}
		return m
	}
	if diff := cmp.Diff(byPart(want), byPart(got)); diff != "" {
		t.Errorf("%s: records (-want +got):\n%s", what, diff)
	}
}

// TestDemoNextSteps runs the demo's next steps as it prints them, after the
// demo has exited: the dev broker (the built binary) with the printed
// --topic, the printed kcat line (or, without kcat, the same records from
// confluent-kafka-go), then rebuild, get and update through
// KMATERIALIZE_BROKERS. The table must hold what the printed records say.
func TestDemoNextSteps(t *testing.T) {
	localkafka.KfakeOnly(t)
	out := mustCLI(t, 0, "demo").stdout
	_, next, ok := strings.Cut(out, "\nNext steps")
	if !ok {
		t.Fatalf("demo printed no next steps:\n%s", out)
	}
	var steps []string
	for _, line := range strings.Split(next, "\n") {
		if cmdLine, ok := strings.CutPrefix(strings.TrimSpace(line), "$ "); ok {
			steps = append(steps, cmdLine)
		}
	}
	if len(steps) != 5 {
		t.Fatalf("want 5 commands in the next steps (broker, kcat, rebuild, get, update), got %q", steps)
	}
	brokerArgs, ok := strings.CutPrefix(steps[0], "kmaterialize dev broker ")
	if !ok {
		t.Fatalf("first step %q: want the dev broker", steps[0])
	}
	_, addr := startDevBroker(t, strings.Fields(brokerArgs)...)
	t.Setenv("KMATERIALIZE_BROKERS", addr)

	// The oracle: the KEY:VALUE lines of the printed printf.
	_, rest, ok := strings.Cut(steps[1], "printf '")
	lines, _, ok2 := strings.Cut(rest, "'")
	if !ok || !ok2 || !strings.Contains(steps[1], "kcat ") {
		t.Fatalf("second step %q: want printf '...' | kcat", steps[1])
	}
	want := map[string]string{}
	var recs []devRecord
	for _, kv := range strings.Split(strings.TrimSuffix(lines, `\n`), `\n`) {
		k, v, ok := strings.Cut(kv, ":")
		if !ok {
			t.Fatalf("printf line %q is not KEY:VALUE", kv)
		}
		want[k] = v
		recs = append(recs, devRecord{Key: k, Value: v})
	}
	if _, err := exec.LookPath("kcat"); err == nil {
		sh := exec.Command("sh", "-c", steps[1])
		if b, err := sh.CombinedOutput(); err != nil {
			t.Fatalf("$ %s: %v\n%s", steps[1], err, b)
		}
	} else {
		t.Log("kcat is not on PATH: the printed records are written with confluent-kafka-go")
		produceDev(t, addr, map[string][]devRecord{demoTopic: recs})
	}

	db := dbPath(t)
	for i, step := range steps[2:] {
		args := strings.Fields(strings.ReplaceAll(step, "balances.db", db))
		if args[0] != "kmaterialize" {
			t.Fatalf("step %d %q is not a kmaterialize command", i+3, step)
		}
		r := mustCLI(t, 0, args[1:]...)
		if args[1] == "get" && r.stdout != want["acct-1"]+"\n" {
			t.Fatalf("$ %s printed %q, want %q", step, r.stdout, want["acct-1"])
		}
	}
	checkTable(t, want, scanTable(t, db, demoTopic))
}
