package main

// Process tests of --cluster and client.Cluster over real daemons: three
// `kmaterialize serve` processes following the same table (replicas), one
// on its unix socket and two on TCP listeners with read tokens on the
// loopback addresses 127.0.0.2 and 127.0.0.3. Every answer is compared with
// the oracle fold of the records the test produced; the daemon that
// answered is killed with SIGKILL and the reads fail over.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/client"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// clusterDaemon is one daemon process of a cluster test.
type clusterDaemon struct {
	name, dir, sock, url, token string
	p                           *proc
}

// freePort returns a TCP port free on host now (listened on, then closed:
// the daemon listens on it next).
func freePort(t *testing.T, host string) string {
	t.Helper()
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatalf("listen on %s (the test needs the loopback address): %v", host, err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// startClusterDaemon starts a daemon following table "balances" of topic,
// with the lines extra added to the table's entry; host "" serves the unix
// socket only, else a TCP listener on host too, with a read token. It
// waits until the daemon is ready.
func startClusterDaemon(t *testing.T, name, topic, host, extra string) *clusterDaemon {
	t.Helper()
	d := &clusterDaemon{name: name, dir: t.TempDir()}
	d.sock = filepath.Join(d.dir, "tables.db.sock")
	doc := "db: tables.db\n"
	if host != "" {
		addr := net.JoinHostPort(host, freePort(t, host))
		d.url, d.token = "http://"+addr, "read-"+name
		doc += fmt.Sprintf("listen: %s\nallow_remote: true\nallow_plaintext_tokens: true\nread_token: %s\n", addr, d.token)
	}
	doc += fmt.Sprintf("kafka:\n  brokers: %s\ntables:\n  - name: balances\n    topic: %s\n    follow: true\n    follow_interval: 50ms\n    stall_timeout: 60s\n%s",
		broker.Addr, topic, extra)
	cfg := filepath.Join(d.dir, "kmaterialize.yaml")
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	d.p = startProc(t, "--log-format", "json", "serve", "--config", cfg)
	awaitStatus(t, unixClient(t, d.sock), d.p, "/readyz", http.StatusOK)
	return d
}

// writeClusterFile writes the cluster file of ds: sockets by path, TCP
// listeners by URL with the token inline or in a token file (every other
// one).
func writeClusterFile(t *testing.T, ds []*clusterDaemon) string {
	t.Helper()
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("daemons:\n")
	for i, d := range ds {
		fmt.Fprintf(&b, "  - name: %s\n", d.name)
		switch {
		case d.url == "":
			fmt.Fprintf(&b, "    address: %s\n", d.sock)
		case i%2 == 0:
			fmt.Fprintf(&b, "    address: %s\n    token: %s\n", d.url, d.token)
		default:
			tf := filepath.Join(dir, d.name+".token")
			if err := os.WriteFile(tf, []byte(d.token+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "    address: %s\n    token_file: %s.token\n", d.url, d.name)
		}
	}
	path := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster file:\n%s", b.String())
	return path
}

// clusterGetAll reads every key of want, and one absent key, with `get
// --cluster` (one command, JSON lines) and compares with the oracle.
func clusterGetAll(t *testing.T, file string, want map[string]string) {
	t.Helper()
	keys := make([]string, 0, len(want)+1)
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	keys = append(keys, "absent-key")
	r := mustCLI(t, exitNotFound, append([]string{"get", "--cluster", file, "--table", "balances", "--format", "jsonl"}, keys...)...)
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	i := 0
	for ; sc.Scan(); i++ {
		var line struct {
			Key   string  `json:"key"`
			Value *string `json:"value"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil || line.Key != keys[i] {
			t.Fatalf("get --cluster line %d %q: want key %q (%v)", i, sc.Text(), keys[i], err)
		}
		v, ok := want[line.Key]
		if ok != (line.Value != nil) || (ok && *line.Value != v) {
			t.Fatalf("get --cluster %q = %v, want %q (present %v)", line.Key, line.Value, v, ok)
		}
	}
	if i != len(keys) {
		t.Fatalf("get --cluster printed %d lines for %d keys", i, len(keys))
	}
}

// clusterScan is `scan --cluster --format jsonl`, keys strictly ascending.
func clusterScan(t *testing.T, file string) map[string]string {
	t.Helper()
	r := mustCLI(t, 0, "scan", "--cluster", file, "--table", "balances", "--format", "jsonl")
	got := map[string]string{}
	last := ""
	for i, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		if line == "" {
			continue
		}
		var row struct{ Key, Value string }
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("scan --cluster line %q: %v", line, err)
		}
		if i > 0 && row.Key <= last {
			t.Fatalf("scan --cluster: key %q after %q", row.Key, last)
		}
		last = row.Key
		got[row.Key] = row.Value
	}
	return got
}

// checkClusterReads reads every key of want through cl and compares.
func checkClusterReads(t *testing.T, cl *client.Cluster, want map[string]string) map[string]int {
	t.Helper()
	by := map[string]int{}
	for k, v := range want {
		got, err := cl.Get(context.Background(), "balances", []byte(k), client.GetOptions{})
		if err != nil {
			t.Fatalf("Cluster.Get %q: %v", k, err)
		}
		if string(got.Value.Value) != v {
			t.Fatalf("Cluster.Get %q = %q from %s, want %q", k, got.Value.Value, got.Daemon, v)
		}
		by[got.Daemon]++
	}
	if _, err := cl.Get(context.Background(), "balances", []byte("absent-key"), client.GetOptions{}); !client.IsCode(err, client.CodeKeyNotFound) {
		t.Fatalf("Cluster.Get of an absent key: %v, want key_not_found", err)
	}
	return by
}

// TestClusterReplicasKill9: three replicas of one followed table; the
// cluster client and get/scan/tables --cluster answer the oracle's table;
// a producer reads its writes through the cluster (min_positions); the
// daemon that answered is killed with SIGKILL, then another, and every
// read fails over with no wrong answer.
func TestClusterReplicasKill9(t *testing.T) {
	rng := newRand(t)
	topic := newTopic(t, 4)
	recs := produce(t, topic, genRecords(rng, []int32{0, 1, 2, 3}, 200))
	want, _, _ := oracle(recs, nil)

	ds := []*clusterDaemon{
		startClusterDaemon(t, "local", topic, "", ""),
		startClusterDaemon(t, "tcp-2", topic, "127.0.0.2", ""),
		startClusterDaemon(t, "tcp-3", topic, "127.0.0.3", ""),
	}
	file := writeClusterFile(t, ds)

	clusterGetAll(t, file, want)
	checkTable(t, want, clusterScan(t, file))
	if r := mustCLI(t, 0, "scan", "--cluster", file, "--table", "balances", "--count", "--format", "text"); strings.TrimSpace(r.stdout) != fmt.Sprint(len(want)) {
		t.Fatalf("scan --cluster --count = %q, want %d", r.stdout, len(want))
	}
	var st client.ClusterStatus
	r := mustCLI(t, 0, "tables", "--cluster", file, "--format", "json")
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Tables) != 1 || !st.Tables[0].FullyServed || len(st.Tables[0].Partitions) != 4 || len(st.Tables[0].Partitions[3].Ready) != 3 {
		t.Fatalf("tables --cluster: %s\nwant balances fully served, 4 partitions each held by the 3 daemons", r.stdout)
	}
	if r := mustCLI(t, 0, "tables", "--cluster", file); !strings.Contains(r.stdout, "fully served") {
		t.Fatalf("tables --cluster (text) does not say fully served:\n%s", r.stdout)
	}

	daemons, err := client.LoadClusterFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.NewCluster(daemons, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if by := checkClusterReads(t, cl, want); len(by) != 3 {
		t.Fatalf("reads answered by %v: want the three replicas sharing them", by)
	}

	// Read your writes: each record produced is read back through the
	// cluster, whichever replica answers, once it has applied it.
	for i := range 6 {
		key := fmt.Sprintf("p%d-fresh", i%4)
		val := fmt.Sprintf("written-%d-%d", i, rng.Intn(1000))
		rec := produce(t, topic, []localkafka.Record{{Partition: int32(i % 4), Key: []byte(key), Value: []byte(val)}})
		recs = append(recs, rec...)
		got, err := cl.Get(context.Background(), "balances", []byte(key), client.GetOptions{
			MinPositions: client.MinPositionsFromDelivery(client.Delivery{Partition: rec[0].P, Offset: rec[0].O}), Wait: 20 * time.Second})
		if err != nil {
			t.Fatalf("read of my write %s=%s (partition %d offset %d): %v", key, val, rec[0].P, rec[0].O, err)
		}
		if string(got.Value.Value) != val || got.Positions[rec[0].P] < rec[0].O+1 {
			t.Fatalf("read of my write %s from %s at %v: %q, want %q at position %d", key, got.Daemon, got.Positions, got.Value.Value, val, rec[0].O+1)
		}
	}
	// The same through get --cluster --min-positions.
	rec := produce(t, topic, []localkafka.Record{{Partition: 3, Key: []byte("p3-fresh"), Value: []byte("cli-written")}})
	recs = append(recs, rec...)
	if r := mustCLI(t, 0, "get", "--cluster", file, "--table", "balances", "--min-positions", fmt.Sprintf("3:%d", rec[0].O+1), "--wait", "20s", "p3-fresh"); r.stdout != "cli-written\n" {
		t.Fatalf("get --cluster --min-positions of my write: %q, want cli-written", r.stdout)
	}
	want, _, _ = oracle(recs, nil)

	// Kill -9 the daemon that answers, then the next one: reads go on
	// with the oracle's values, never from behind what was read.
	for kill := 0; kill < 2; kill++ {
		v, err := cl.Get(context.Background(), "balances", []byte("p0-fresh"), client.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		before := cl.Positions("balances")
		var victim *clusterDaemon
		for _, d := range ds {
			if d.name == v.Daemon {
				victim = d
			}
		}
		if victim == nil || victim.p.cmd.ProcessState != nil {
			t.Fatalf("answered by %q, not a running daemon of the test", v.Daemon)
		}
		if err := victim.p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		if code := victim.p.wait(t, 30*time.Second); code != -1 {
			t.Fatalf("killed daemon %s: exit %d, want -1 (SIGKILL)", victim.name, code)
		}
		t.Logf("killed %s (pid %d) with SIGKILL", victim.name, victim.p.cmd.Process.Pid)
		by := checkClusterReads(t, cl, want)
		if by[victim.name] != 0 || len(by) != 2-kill {
			t.Fatalf("after killing %s, reads answered by %v", victim.name, by)
		}
		for p, n := range before {
			if cl.Positions("balances")[p] < n {
				t.Fatalf("positions went back after the failover: %v, before %v", cl.Positions("balances"), before)
			}
		}
		clusterGetAll(t, file, want)
		checkTable(t, want, clusterScan(t, file))
		r := mustCLI(t, 0, "tables", "--cluster", file)
		if !strings.Contains(r.stdout, "fully served") || !strings.Contains(r.stdout, victim.name) || !strings.Contains(r.stdout, "not answering") {
			t.Fatalf("tables --cluster after killing %s:\n%s\nwant still fully served and %s not answering", victim.name, r.stdout, victim.name)
		}
	}
}

// TestClusterFlagErrors: --cluster refuses --db and --socket, a cluster
// file that does not parse is exit 2 naming its line, and a cluster whose
// daemons are all gone is exit 1 naming them.
func TestClusterFlagErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("daemons:\n  - address: "+filepath.Join(dir, "none.sock")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := mustCLI(t, exitUsage, "get", "--cluster", file, "--db", filepath.Join(dir, "x.db"), "--table", "t", "k"); !strings.Contains(r.stderr, "--db does not apply") {
		t.Fatalf("stderr: %s", r.stderr)
	}
	if r := mustCLI(t, exitUsage, "get", "--table", "t", "k"); !strings.Contains(r.stderr, "--db is required") {
		t.Fatalf("get without --db or --cluster: %s", r.stderr)
	}
	r := mustCLI(t, exitError, "scan", "--cluster", file, "--table", "t")
	if !strings.Contains(r.stderr, "none.sock") || !strings.Contains(r.stderr, "no daemon of the cluster answers") {
		t.Fatalf("scan of a cluster whose daemon is gone: %s", r.stderr)
	}
	if err := os.WriteFile(file, []byte("daemons:\n  - address: /a.sock\n    tokn: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := mustCLI(t, exitUsage, "tables", "--cluster", file); !strings.Contains(r.stderr, file+":3:") || !strings.Contains(r.stderr, `"tokn"`) {
		t.Fatalf("tables with a bad cluster file: %s", r.stderr)
	}
}
