package kafkatest

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Options tune Start. The zero value is the single-node broker the tests use.
type Options struct {
	Jars FetchOptions // where the pom and the jar cache are

	// Java is the java command. Default: "java" on PATH (Java 17 or later).
	Java string
	// Heap is the JVM's -Xmx. Default: "512m".
	Heap string
	// JVMArgs are added to the broker's java command line, before the
	// class path.
	JVMArgs []string
	// ReadyTimeout bounds the wait for the broker to serve metadata, a
	// group coordinator and a transaction coordinator. Default: 180s, far
	// above a start on a 2-core machine shared with other builds (see
	// bench/RESULTS.md, "Measurements the code's choices rest on").
	ReadyTimeout time.Duration
	// StopTimeout bounds the wait after SIGTERM before SIGKILL. Default: 30s.
	StopTimeout time.Duration
	// Properties are added to server.properties, replacing the ones Start
	// writes where the key is the same. A listener, port or directory
	// replaced here is the caller's to keep consistent.
	Properties map[string]string
}

func (o Options) withDefaults() Options {
	if o.Java == "" {
		o.Java = "java"
	}
	if o.Heap == "" {
		o.Heap = "512m"
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 180 * time.Second
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 30 * time.Second
	}
	return o
}

// Broker is a running Apache Kafka broker (KRaft, one node that is also the
// controller) in a child process. Stop it with Stop; its files are in Dir
// until then. If the test process dies, the kernel kills the broker with it
// (its log directory is then left in the system's temporary directory).
type Broker struct {
	Endpoint
	ControllerAddr string // the controller listener; clients do not use it
	ClusterID      string
	Dir            string // server.properties, broker.log, format.log and the log directory
	LogPath        string // the broker's stdout and stderr
	Pid            int
	Timings        Timings

	cmd     *exec.Cmd
	logFile *os.File
	exited  chan struct{} // closed when the process has exited
	waitErr error         // the process's exit, valid after exited

	stopTimeout time.Duration
	stopOnce    sync.Once
	stopErr     error
}

// Timings say where Start's time went.
type Timings struct {
	Fetch  time.Duration // finding (or copying) the jars
	Format time.Duration // kafka.tools.StorageTool format
	Ready  time.Duration // from starting kafka.Kafka until it served all three requests
}

// Fixed names on the broker.
const (
	adminUser  = "admin"
	toolUser   = "kmaterialize"
	readyGroup = "kafkatest-ready"
	readyTxnID = "kafkatest-ready"
	mechanism  = "SCRAM-SHA-512"
)

// errPortTaken is returned when a port chosen free was taken before the
// broker bound it; Start then tries other ports.
var errPortTaken = errors.New("a listener port was taken before the broker bound it")

// Start brings the jars if needed, formats a new log directory and starts
// the broker, returning once it is ready (see the package doc). ctx bounds
// the start only: the broker runs until Stop.
func Start(ctx context.Context, o Options) (*Broker, error) {
	o = o.withDefaults()
	if _, err := exec.LookPath(o.Java); err != nil {
		return nil, fmt.Errorf("kafkatest: the broker needs Java 17 or later on PATH: %w", err)
	}
	t0 := time.Now()
	jars, err := Fetch(ctx, o.Jars)
	if err != nil {
		return nil, err
	}
	fetched := time.Since(t0)
	for attempt := 1; ; attempt++ {
		b, err := start(ctx, o, jars)
		if err == nil {
			b.Timings.Fetch = fetched
			return b, nil
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			return nil, err
		}
	}
}

func start(ctx context.Context, o Options, jars Jars) (_ *Broker, err error) {
	dir, err := os.MkdirTemp("", "kmaterialize-kafka-")
	if err != nil {
		return nil, fmt.Errorf("kafkatest: %w", err)
	}
	ports, err := freePorts(3)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b := &Broker{
		Endpoint: Endpoint{
			Addr:          net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
			SASLAddr:      net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
			AdminUser:     adminUser,
			AdminPassword: randomHex(16),
			ToolUser:      toolUser,
			ToolPassword:  randomHex(16),
			Version:       jars.Version,
		},
		ControllerAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2])),
		ClusterID:      clusterID(),
		Dir:            dir,
		LogPath:        filepath.Join(dir, "broker.log"),
		exited:         make(chan struct{}),
		stopTimeout:    o.StopTimeout,
	}
	defer func() {
		if err != nil {
			// The log is gone with the directory: the error carries its tail.
			_ = b.Stop()
		}
	}()

	props := filepath.Join(dir, "server.properties")
	if err := os.WriteFile(props, []byte(b.properties(ports, o.Properties)), 0o600); err != nil {
		return b, fmt.Errorf("kafkatest: %w", err)
	}
	classPath := filepath.Join(jars.Dir, "*")

	t0 := time.Now()
	if err := b.format(ctx, o.Java, classPath, props); err != nil {
		return b, err
	}
	b.Timings.Format = time.Since(t0)

	t0 = time.Now()
	if err := b.launch(o, classPath, props); err != nil {
		return b, err
	}
	if err := b.awaitReady(ctx, o.ReadyTimeout); err != nil {
		return b, err
	}
	b.Timings.Ready = time.Since(t0)
	if err := b.checkLog(); err != nil {
		return b, err
	}
	return b, nil
}

// properties renders server.properties: written here, not copied from
// Kafka's distribution, with the single-node settings the tests need.
func (b *Broker) properties(ports []int, extra map[string]string) string {
	p := [][2]string{
		{"process.roles", "broker,controller"},
		{"node.id", "1"},
		// A static voter set: the format needs no --standalone.
		{"controller.quorum.voters", "1@" + b.ControllerAddr},
		{"controller.listener.names", "CONTROLLER"},
		{"listeners", fmt.Sprintf("PLAINTEXT://127.0.0.1:%d,SASL_PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", ports[0], ports[1], ports[2])},
		{"advertised.listeners", fmt.Sprintf("PLAINTEXT://127.0.0.1:%d,SASL_PLAINTEXT://127.0.0.1:%d", ports[0], ports[1])},
		{"listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"},
		{"inter.broker.listener.name", "PLAINTEXT"},
		{"sasl.enabled.mechanisms", mechanism},
		{"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required;"},
		// The authorizer is broker-wide: PLAINTEXT and the controller
		// listener authenticate nobody (User:ANONYMOUS), so that principal
		// must be a super user, like the fixtures' admin. SASL principals get
		// only the ACLs a test grants.
		{"authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer"},
		{"super.users", "User:ANONYMOUS;User:" + adminUser},
		{"allow.everyone.if.no.acl.found", "false"},
		// One node: every internal topic with one replica and few partitions.
		{"offsets.topic.replication.factor", "1"},
		{"offsets.topic.num.partitions", "4"},
		{"transaction.state.log.replication.factor", "1"},
		{"transaction.state.log.min.isr", "1"},
		{"transaction.state.log.num.partitions", "4"},
		{"share.coordinator.state.topic.replication.factor", "1"},
		{"share.coordinator.state.topic.min.isr", "1"},
		{"share.coordinator.state.topic.num.partitions", "1"},
		{"default.replication.factor", "1"},
		{"min.insync.replicas", "1"},
		{"num.partitions", "1"},
		{"group.initial.rebalance.delay.ms", "0"},
		// The cleaner needs more than 1 MiB of dedupe buffer per thread;
		// the default (128 MiB) would be a quarter of the heap.
		{"log.cleaner.threads", "1"},
		{"log.cleaner.dedupe.buffer.size", "2097152"},
		{"log.cleaner.backoff.ms", "200"},
		{"log.dirs", filepath.Join(b.Dir, "data")},
		{"auto.create.topics.enable", "false"},
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		replaced := false
		for i := range p {
			if p[i][0] == k {
				p[i][1], replaced = extra[k], true
			}
		}
		if !replaced {
			p = append(p, [2]string{k, extra[k]})
		}
	}
	var s strings.Builder
	s.WriteString("# Written by internal/kafkatest for one test broker.\n")
	for _, kv := range p {
		fmt.Fprintf(&s, "%s=%s\n", kv[0], kv[1])
	}
	return s.String()
}

// format runs StorageTool format on the new log directory, adding the two
// SCRAM users to the metadata log (the only way to have SCRAM credentials
// before the first broker runs).
func (b *Broker) format(ctx context.Context, java, classPath, props string) error {
	logPath := filepath.Join(b.Dir, "format.log")
	cmd := exec.CommandContext(ctx, java, "-Xmx256m", quickJIT, "-cp", classPath, "kafka.tools.StorageTool", "format",
		"-t", b.ClusterID, "-c", props,
		"--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", mechanism, b.AdminUser, b.AdminPassword),
		"--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", mechanism, b.ToolUser, b.ToolPassword),
	)
	out, err := cmd.CombinedOutput()
	_ = os.WriteFile(logPath, out, 0o600)
	if err != nil {
		return fmt.Errorf("kafkatest: format the KRaft log directory: %w\n%s", err, b.redact(tail(string(out), 40)))
	}
	if bytes.Contains(out, []byte(noProviders)) {
		return fmt.Errorf("kafkatest: format: %q: the jar cache lacks slf4j-simple\n%s", noProviders, b.redact(tail(string(out), 40)))
	}
	return nil
}

// quickJIT keeps the JVMs to the quick compiler (C1). The tests' loads are
// small, and on a 2-core machine shared with builds the optimizing compiler
// was most of the start's CPU, and of the wait for ready (the measurement is
// in bench/RESULTS.md, "Measurements the code's choices rest on").
const quickJIT = "-XX:TieredStopAtLevel=1"

// noProviders is what SLF4J prints when it has no provider: the broker would
// then log nothing, and a failure would have no explanation.
const noProviders = "No SLF4J providers"

// launch starts kafka.Kafka with its output in LogPath.
func (b *Broker) launch(o Options, classPath, props string) error {
	f, err := os.OpenFile(b.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	b.logFile = f
	args := []string{
		"-Xmx" + o.Heap,
		quickJIT,
		"-XX:+ExitOnOutOfMemoryError",
		"-Djava.awt.headless=true",
		"-Dorg.slf4j.simpleLogger.showDateTime=true",
		"-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS",
	}
	args = append(append(args, o.JVMArgs...), "-cp", classPath, "kafka.Kafka", props)
	b.cmd = exec.Command(o.Java, args...)
	b.cmd.Dir = b.Dir
	b.cmd.Stdout, b.cmd.Stderr = f, f
	// The broker dies with the test process: a test killed by its timeout
	// must not leave a JVM holding ports and memory on a shared machine.
	// The kernel sends Pdeathsig when the thread that forked the child
	// exits, not the process; so the fork happens on a goroutine locked to
	// its thread, which lives (in Wait) as long as the broker. The
	// goroutine's owner is the Broker: Stop waits for exited.
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		err := b.cmd.Start()
		started <- err
		if err == nil {
			b.waitErr = b.cmd.Wait()
		}
		close(b.exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("kafkatest: start kafka.Kafka: %w", err)
	}
	b.Pid = b.cmd.Process.Pid
	return nil
}

// awaitReady polls until the broker serves Metadata, a group coordinator and
// a transaction coordinator (the last two create __consumer_offsets and
// __transaction_state; their first answers are COORDINATOR_NOT_AVAILABLE
// for seconds), or the bound passes, or the process exits.
func (b *Broker) awaitReady(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cl, err := b.Client(kgo.RetryTimeout(2*time.Second), kgo.DialTimeout(2*time.Second))
	if err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	defer cl.Close()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		last = ready(rctx, cl)
		rcancel()
		if last == nil {
			return nil
		}
		select {
		case <-b.exited:
			if b.portTaken() {
				return fmt.Errorf("kafkatest: %w", errPortTaken)
			}
			return fmt.Errorf("kafkatest: the broker exited before it was ready (%v); %s:\n%s", b.waitErr, b.LogPath, b.logTail(60))
		case <-ctx.Done():
			return fmt.Errorf("kafkatest: the broker was not ready within %s (last: %v); %s:\n%s", limit, last, b.LogPath, b.logTail(60))
		case <-tick.C:
		}
	}
}

// ready sends the three requests once; nil means all succeeded.
func ready(ctx context.Context, cl *kgo.Client) error {
	meta := kmsg.NewPtrMetadataRequest()
	mresp, err := meta.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	if len(mresp.Brokers) == 0 || mresp.ControllerID < 0 {
		return errors.New("metadata: no broker or controller yet")
	}

	find := kmsg.NewPtrFindCoordinatorRequest()
	find.CoordinatorType = 0 // group
	find.CoordinatorKey = readyGroup
	find.CoordinatorKeys = []string{readyGroup}
	fresp, err := find.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("find group coordinator: %w", err)
	}
	code := fresp.ErrorCode
	for _, c := range fresp.Coordinators {
		if code == 0 {
			code = c.ErrorCode
		}
	}
	if err := kerr.ErrorForCode(code); err != nil {
		return fmt.Errorf("find group coordinator: %w", err)
	}

	// The client finds the transaction coordinator itself for a
	// transactional InitProducerId.
	txnID := readyTxnID
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID = &txnID
	init.TransactionTimeoutMillis = 10_000
	iresp, err := init.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("init producer id: %w", err)
	}
	if err := kerr.ErrorForCode(iresp.ErrorCode); err != nil {
		return fmt.Errorf("init producer id: %w", err)
	}
	return nil
}

// checkLog fails a broker whose log says it has no SLF4J provider.
func (b *Broker) checkLog() error {
	log, err := os.ReadFile(b.LogPath)
	if err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	if bytes.Contains(log, []byte(noProviders)) {
		return fmt.Errorf("kafkatest: the broker logged %q: the jar cache lacks slf4j-simple\n%s", noProviders, b.logTail(40))
	}
	return nil
}

func (b *Broker) portTaken() bool {
	log, _ := os.ReadFile(b.LogPath)
	return bytes.Contains(log, []byte("Address already in use"))
}

// logTail is the last n lines of the broker's log, without the passwords.
func (b *Broker) logTail(n int) string {
	log, err := os.ReadFile(b.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return b.redact(tail(string(log), n))
}

func (b *Broker) redact(s string) string {
	return strings.NewReplacer(b.AdminPassword, "<admin password>", b.ToolPassword, "<tool password>").Replace(s)
}

// Stop stops the broker (SIGTERM, then SIGKILL after the stop bound), waits
// for it and removes its files. It is safe to call more than once; later
// calls return the first call's result.
func (b *Broker) Stop() error {
	b.stopOnce.Do(func() { b.stopErr = b.stop(b.stopTimeout) })
	return b.stopErr
}

func (b *Broker) stop(limit time.Duration) error {
	var errs []error
	if b.cmd != nil && b.cmd.Process != nil {
		select {
		case <-b.exited:
		default:
			_ = b.cmd.Process.Signal(syscall.SIGTERM)
			timer := time.NewTimer(limit)
			select {
			case <-b.exited:
			case <-timer.C:
				_ = b.cmd.Process.Kill()
				<-b.exited
				errs = append(errs, fmt.Errorf("kafkatest: the broker ignored SIGTERM for %s and was killed", limit))
			}
			timer.Stop()
		}
	}
	if b.logFile != nil {
		_ = b.logFile.Close()
	}
	if err := os.RemoveAll(b.Dir); err != nil {
		errs = append(errs, fmt.Errorf("kafkatest: remove %s: %w", b.Dir, err))
	}
	return errors.Join(errs...)
}

// Exited is closed when the broker process has exited, by Stop or by itself.
func (b *Broker) Exited() <-chan struct{} { return b.exited }

// RSS returns the broker process's resident set size in bytes.
func (b *Broker) RSS() (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.Pid))
	if err != nil {
		return 0, fmt.Errorf("kafkatest: %w", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("kafkatest: no VmRSS in /proc status")
}

// freePorts returns n distinct loopback ports that were free a moment ago:
// all are held open together so none repeats, then released for the broker.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("kafkatest: find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// clusterID is a new Kafka cluster id: a random UUID in unpadded URL-safe
// base64, as StorageTool random-uuid prints (without starting a JVM for it).
// Like Kafka's Uuid.randomUuid it never starts with '-', which a command line
// would take for a flag.
func clusterID() string {
	for {
		u := uuid.New()
		if id := base64.RawURLEncoding.EncodeToString(u[:]); id[0] != '-' {
			return id
		}
	}
}
