package main

// ACL tests: the tool's principal has exactly the ACLs docs/security.md
// lists for a command, and the command, run as a real process over SASL/
// SCRAM-SHA-512, works; with any one of them taken away it exits 5 with
// "not authorized" naming the resource and the operation the broker refused.
//
// Both brokers enforce ACLs: on the kfake pass the test starts a kfake of its
// own with SASL, ACLs on, a super user (the fixtures' and the grants') and
// the tool's user with none; on the real pass it uses Apache Kafka's
// SASL_PLAINTEXT listener (StandardAuthorizer, the admin super user, the
// tool's user with no ACL until the test grants one). Every ACL a test
// grants names the test's own topics, group, transactional id and replay
// group prefix, and is deleted when the test ends.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kmaterialize/kmaterialize/copier"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/replay"
)

// aclRig is a broker that enforces ACLs over SASL/SCRAM-SHA-512, with a
// super user (adm, the fixtures) and the tool's user.
type aclRig struct {
	b              *localkafka.Broker // fixtures: topics, records (as a super user)
	addr           string             // the SASL listener the tool uses
	user, password string             // the tool's principal, User:user
	adm            *kadm.Client       // a super user's admin client, for ACLs
}

func newACLRig(t *testing.T) *aclRig {
	t.Helper()
	r := &aclRig{}
	var admUser, admPassword string
	if broker.Real() {
		e := broker.Kafka
		r.b, r.addr = broker, e.SASLAddr
		r.user, r.password = e.ToolUser, e.ToolPassword
		admUser, admPassword = e.AdminUser, e.AdminPassword
	} else {
		r.user, r.password = "kmz-tool", randomSecret(t, "pw-")
		admUser, admPassword = "kmz-admin", randomSecret(t, "admin-")
		b, err := localkafka.Start(kfake.EnableSASL(), kfake.EnableACLs(),
			kfake.Superuser("SCRAM-SHA-512", admUser, admPassword),
			kfake.User("SCRAM-SHA-512", r.user, r.password))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		b.ClientOpts = []kgo.Opt{kgo.SASL(scram.Auth{User: admUser, Pass: admPassword}.AsSha512Mechanism())}
		r.b, r.addr = b, b.Addr
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.addr), kgo.SASL(scram.Auth{User: admUser, Pass: admPassword}.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	r.adm = kadm.NewClient(cl)
	return r
}

// aclEntry is one ALLOW ACL for the tool's principal on any host.
type aclEntry struct {
	resource kmsg.ACLResourceType
	name     string
	pattern  kmsg.ACLResourcePatternType
	op       kmsg.ACLOperation
}

func (a aclEntry) String() string {
	return fmt.Sprintf("%s %s %q %s", a.resource, a.pattern, a.name, a.op)
}

func (r *aclRig) builder(a aclEntry) *kadm.ACLBuilder {
	b := kadm.NewACLs().Allow("User:" + r.user).AllowHosts("*").Operations(a.op).ResourcePatternType(a.pattern)
	switch a.resource {
	case kmsg.ACLResourceTypeTopic:
		b = b.Topics(a.name)
	case kmsg.ACLResourceTypeGroup:
		b = b.Groups(a.name)
	case kmsg.ACLResourceTypeTransactionalId:
		b = b.TransactionalIDs(a.name)
	case kmsg.ACLResourceTypeCluster:
		b = b.Clusters()
	}
	return b
}

// grant creates the ACLs and waits until DescribeACLs lists each (Kafka
// applies an ACL when its metadata record reaches the authorizer, after
// CreateACLs has answered).
func (r *aclRig) grant(t *testing.T, acls ...aclEntry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, a := range acls {
		res, err := r.adm.CreateACLs(ctx, r.builder(a))
		if err == nil {
			for _, x := range res {
				if x.Err != nil {
					err = x.Err
				}
			}
		}
		if err != nil {
			t.Fatalf("grant %s: %v", a, err)
		}
		t.Cleanup(func() { r.revoke(t, a) })
	}
	for _, a := range acls {
		r.awaitACL(t, a, true)
	}
}

// revoke deletes the ACLs and waits until DescribeACLs no longer lists them.
func (r *aclRig) revoke(t *testing.T, acls ...aclEntry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, a := range acls {
		res, err := r.adm.DeleteACLs(ctx, r.builder(a))
		if err == nil {
			for _, x := range res {
				if x.Err != nil {
					err = x.Err
				}
			}
		}
		if err != nil {
			t.Fatalf("revoke %s: %v", a, err)
		}
	}
	for _, a := range acls {
		r.awaitACL(t, a, false)
	}
}

func (r *aclRig) awaitACL(t *testing.T, a aclEntry, present bool) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("ACL %s present=%v", a, present), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := r.adm.DescribeACLs(ctx, r.builder(a))
		if err != nil {
			return false
		}
		n := 0
		for _, d := range res {
			if d.Err != nil {
				return false
			}
			n += len(d.Described)
		}
		return (n > 0) == present
	})
}

// propsFile writes the tool's SCRAM-SHA-512 properties (-F), plus extra
// KEY=VALUE lines.
func (r *aclRig) propsFile(t *testing.T, extra ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "client.properties")
	doc := fmt.Sprintf("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=%s\nsasl.password=%s\n%s",
		r.user, r.password, strings.Join(append(extra, ""), "\n"))
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (r *aclRig) topic(t *testing.T, partitions int32) string {
	t.Helper()
	topic := runName(t)
	r.b.TestTopic(t, topic, partitions, nil)
	return topic
}

func (r *aclRig) produce(t *testing.T, topic string, recs []localkafka.Record) []rec {
	t.Helper()
	offs, err := r.b.Produce(context.Background(), topic, recs)
	if err != nil {
		t.Fatal(err)
	}
	return withOffsets(recs, offs, true)
}

// runBin runs the built binary with args as a process and waits for it.
func runBin(t *testing.T, limit time.Duration, args ...string) result {
	t.Helper()
	p := startProc(t, args...)
	code := p.wait(t, limit)
	res := result{code: code, stdout: p.stdout.String(), stderr: p.stderrText()}
	return res
}

// aclNames are what one ACL test's runs name: every ACL it grants is on
// these, so no test sees another's.
type aclNames struct {
	src, dst, group, tid string
	prefix               string // the replay's group id prefix (GroupPrefixProperty)
}

func newACLNames(t *testing.T) aclNames {
	base := runName(t)
	return aclNames{src: base + "-src", dst: base + "-dst", group: base + "-group", tid: base + "-txn", prefix: base + "-replay-"}
}

func topicACL(name string, op kmsg.ACLOperation) aclEntry {
	return aclEntry{kmsg.ACLResourceTypeTopic, name, kmsg.ACLResourcePatternTypeLiteral, op}
}

func groupACL(name string, op kmsg.ACLOperation) aclEntry {
	return aclEntry{kmsg.ACLResourceTypeGroup, name, kmsg.ACLResourcePatternTypeLiteral, op}
}

func txnACL(name string, op kmsg.ACLOperation) aclEntry {
	return aclEntry{kmsg.ACLResourceTypeTransactionalId, name, kmsg.ACLResourcePatternTypeLiteral, op}
}

// replayGroupACL is the optional ACL of docs/security.md: Describe on the
// replay's groups (PREFIXED), which only silences the refused coordinator
// lookup of librdkafka's consumer.
func replayGroupACL(n aclNames) aclEntry {
	return aclEntry{kmsg.ACLResourceTypeGroup, n.prefix, kmsg.ACLResourcePatternTypePrefixed, kmsg.ACLOperationDescribe}
}

// refusedText is what a run refused for want must say: "not authorized",
// the operation and the resource's name.
func refusedText(t *testing.T, res result, want aclEntry) {
	t.Helper()
	op := map[kmsg.ACLOperation]string{
		kmsg.ACLOperationRead: "Read", kmsg.ACLOperationWrite: "Write", kmsg.ACLOperationDescribe: "Describe",
		kmsg.ACLOperationDescribeConfigs: "DescribeConfigs",
	}[want.op]
	if op == "" {
		t.Fatalf("no name for operation %s", want.op)
	}
	msg := lastErrorLine(res.stderr)
	if i := strings.Index(res.stderr, msg); msg != "" && i >= 0 {
		// The error line and the hint after it ("Try: ...").
		msg = res.stderr[i:]
	}
	for _, s := range []string{"not authorized", op, fmt.Sprintf("%q", want.name)} {
		if !strings.Contains(msg, s) {
			t.Fatalf("without %s: exit %d; the error %q does not say %s; stderr:\n%s", want, res.code, msg, s, res.stderr)
		}
	}
}

// lastErrorLine is the "kmaterialize: ..." line a failed run prints.
func lastErrorLine(stderr string) string {
	lines := strings.Split(stderr, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "kmaterialize: ") {
			return lines[i]
		}
	}
	return ""
}

// aclCase is one command with the ACLs docs/security.md lists for it.
type aclCase struct {
	name string
	// need is the command's ACL set: with all of them the run succeeds;
	// without any one of them it is exit 5 naming that one.
	need func(aclNames) []aclEntry
	// setup prepares the topics and the state the command starts from,
	// with need granted.
	setup func(t *testing.T, r *aclRig, n aclNames) *aclRun
}

// aclRun runs a case's command (ok: the outcome checked against the test's
// oracle) and stops what setup started.
type aclRun struct {
	run   func(t *testing.T) result
	check func(t *testing.T, res result)
	// before, if set, is called before each run without one ACL, so that
	// the run has work that needs it (the copy: new source records).
	before func(t *testing.T)
	// refused, if set, replaces run for a run without one ACL and checks
	// the refusal itself (the daemon, which does not exit).
	refused func(t *testing.T, a aclEntry, code int)
}

// TestACLsPerCommand: for each command the tool's principal gets exactly
// the ACLs docs/security.md lists for it (plus the replay's optional group
// ACL); the command, run as a process over SASL/SCRAM-SHA-512, succeeds
// with the outcome of the test's oracle. Then each ACL in turn is taken
// away (and awaited gone): the run is exit 5 with "not authorized" naming
// the operation and the resource, and the ACL is granted again. It runs on
// kfake (EnableACLs) and on Apache Kafka (StandardAuthorizer).
func TestACLsPerCommand(t *testing.T) {
	cases := []aclCase{
		{
			name: "rebuild",
			need: func(n aclNames) []aclEntry { return []aclEntry{topicACL(n.src, kmsg.ACLOperationRead)} },
			setup: func(t *testing.T, r *aclRig, n aclNames) *aclRun {
				r.b.TestTopic(t, n.src, 2, nil)
				want, _, _ := oracle(r.produce(t, n.src, genRecords(newRand(t), []int32{0, 1}, 60)), nil)
				db := dbPath(t)
				props := r.propsFile(t, groupPrefixLine(n))
				return &aclRun{
					run: func(t *testing.T) result {
						return runBin(t, 90*time.Second, "--log-format", "json", "rebuild", "--brokers", r.addr, "--topic", n.src,
							"--db", db, "--table", "t", "--stall-timeout", "20s", "-F", props)
					},
					check: func(t *testing.T, _ result) { checkTable(t, want, scanJSON(t, db, "t")) },
				}
			},
		},
		{
			name: "update",
			need: func(n aclNames) []aclEntry {
				return []aclEntry{topicACL(n.src, kmsg.ACLOperationRead), topicACL(n.src, kmsg.ACLOperationDescribeConfigs)}
			},
			setup: setupUpdate,
		},
		{
			name: "describe",
			need: func(n aclNames) []aclEntry { return []aclEntry{topicACL(n.src, kmsg.ACLOperationDescribe)} },
			setup: func(t *testing.T, r *aclRig, n aclNames) *aclRun {
				r.b.TestTopic(t, n.src, 2, nil)
				r.produce(t, n.src, genRecords(newRand(t), []int32{0, 1}, 30))
				props := r.propsFile(t, groupPrefixLine(n))
				return &aclRun{
					run: func(t *testing.T) result {
						return runBin(t, 90*time.Second, "--log-format", "json", "describe", "--brokers", r.addr, "--topic", n.src,
							"--format", "json", "--stall-timeout", "20s", "-F", props)
					},
					check: func(t *testing.T, res result) {
						var out struct {
							Partitions []struct {
								Partition int32 `json:"partition"`
								High      int64 `json:"high"`
							} `json:"partitions"`
						}
						if err := jsonUnmarshal(res.stdout, &out); err != nil {
							t.Fatalf("describe's output: %v\n%s", err, res.stdout)
						}
						marks, err := r.b.Marks(context.Background(), n.src)
						if err != nil {
							t.Fatal(err)
						}
						if len(out.Partitions) != len(marks) {
							t.Fatalf("describe: %d partitions, want %d\n%s", len(out.Partitions), len(marks), res.stdout)
						}
						for _, p := range out.Partitions {
							if p.High != marks[p.Partition].High {
								t.Fatalf("describe: partition %d high %d, want %d", p.Partition, p.High, marks[p.Partition].High)
							}
						}
					},
				}
			},
		},
		{
			name: "describe-group",
			need: func(n aclNames) []aclEntry {
				return []aclEntry{topicACL(n.src, kmsg.ACLOperationDescribe), groupACL(n.group, kmsg.ACLOperationDescribe)}
			},
			setup: func(t *testing.T, r *aclRig, n aclNames) *aclRun {
				r.b.TestTopic(t, n.src, 2, nil)
				r.produce(t, n.src, genRecords(newRand(t), []int32{0, 1}, 30))
				committed := map[int32]int64{0: 3, 1: 5}
				if err := r.b.CommitGroupOffsets(context.Background(), n.group, n.src, committed); err != nil {
					t.Fatal(err)
				}
				props := r.propsFile(t, groupPrefixLine(n))
				return &aclRun{
					run: func(t *testing.T) result {
						return runBin(t, 90*time.Second, "--log-format", "json", "describe", "--brokers", r.addr, "--topic", n.src,
							"--group", n.group, "--format", "json", "--stall-timeout", "20s", "-F", props)
					},
					check: func(t *testing.T, res result) {
						var out struct {
							Partitions []struct {
								Partition int32  `json:"partition"`
								Committed *int64 `json:"committed"`
							} `json:"partitions"`
						}
						if err := jsonUnmarshal(res.stdout, &out); err != nil {
							t.Fatalf("describe --group's output: %v\n%s", err, res.stdout)
						}
						got := map[int32]int64{}
						for _, p := range out.Partitions {
							if p.Committed != nil {
								got[p.Partition] = *p.Committed
							}
						}
						if fmt.Sprint(got) != fmt.Sprint(committed) {
							t.Fatalf("describe --group: committed %v, want %v\n%s", got, committed, res.stdout)
						}
					},
				}
			},
		},
		{
			name: "serve-follow",
			need: func(n aclNames) []aclEntry {
				return []aclEntry{topicACL(n.src, kmsg.ACLOperationRead), topicACL(n.src, kmsg.ACLOperationDescribeConfigs)}
			},
			setup: setupServe,
		},
		{
			name: "copy",
			need: func(n aclNames) []aclEntry {
				return []aclEntry{topicACL(n.src, kmsg.ACLOperationRead), topicACL(n.dst, kmsg.ACLOperationWrite),
					txnACL(n.tid, kmsg.ACLOperationWrite), groupACL(n.group, kmsg.ACLOperationRead)}
			},
			setup: setupCopy,
		},
		{
			name: "verify",
			need: func(n aclNames) []aclEntry {
				return []aclEntry{topicACL(n.src, kmsg.ACLOperationRead), topicACL(n.dst, kmsg.ACLOperationRead)}
			},
			setup: setupVerify,
		},
	}
	r := newACLRig(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newACLNames(t)
			need := c.need(n)
			r.grant(t, append(slices.Clone(need), replayGroupACL(n))...)
			run := c.setup(t, r, n)
			res := run.run(t)
			if res.code != 0 {
				t.Fatalf("%s with %v: exit %d, want 0\n%s", c.name, need, res.code, res.stderr)
			}
			run.check(t, res)
			for _, a := range need {
				r.revoke(t, a)
				if run.before != nil {
					run.before(t)
				}
				const want = 5 // every refusal, DescribeConfigs included
				if run.refused != nil {
					run.refused(t, a, want)
					r.grant(t, a)
					continue
				}
				res := run.run(t)
				if res.code != want {
					t.Fatalf("%s without %s: exit %d, want %d\n%s", c.name, a, res.code, want, res.stderr)
				}
				refusedText(t, res, a)
				r.grant(t, a)
			}
		})
	}
}

// groupPrefixLine is the -F line that sets the replay's group id prefix.
func groupPrefixLine(n aclNames) string {
	return "kmaterialize.replay.group.prefix=" + n.prefix
}

// setupUpdate rebuilds the table, then writes more records for the update.
func setupUpdate(t *testing.T, r *aclRig, n aclNames) *aclRun {
	r.b.TestTopic(t, n.src, 2, nil)
	rng := newRand(t)
	recs := r.produce(t, n.src, genRecords(rng, []int32{0, 1}, 40))
	db := dbPath(t)
	props := r.propsFile(t, groupPrefixLine(n))
	if res := runBin(t, 90*time.Second, "rebuild", "--brokers", r.addr, "--topic", n.src, "--db", db, "--table", "t",
		"--stall-timeout", "20s", "-F", props); res.code != 0 {
		t.Fatalf("the update's first rebuild: exit %d\n%s", res.code, res.stderr)
	}
	recs = append(recs, r.produce(t, n.src, genRecords(rng, []int32{0, 1}, 40))...)
	want, _, _ := oracle(recs, nil)
	return &aclRun{
		run: func(t *testing.T) result {
			return runBin(t, 90*time.Second, "--log-format", "json", "update", "--brokers", r.addr, "--db", db, "--table", "t",
				"--stall-timeout", "20s", "-F", props)
		},
		check: func(t *testing.T, _ result) { checkTable(t, want, scanJSON(t, db, "t")) },
	}
}

// setupServe writes a daemon's config file with the tool's SCRAM
// credentials (the password through ${NAME}) and one followed table. A run
// starts the daemon on it and waits until the table is published, holds
// the oracle and its follower runs (then stops the daemon); a run without
// one ACL waits for the daemon to report the refusal: the first build's
// error (its exit code 5 in GET /v1/tables/t1's last_error) or, when only
// the follower needs the ACL, the follower's error.
func setupServe(t *testing.T, r *aclRig, n aclNames) *aclRun {
	r.b.TestTopic(t, n.src, 2, nil)
	want, _, _ := oracle(r.produce(t, n.src, genRecords(newRand(t), []int32{0, 1}, 60)), nil)
	t.Setenv("KMZ_ACL_TEST_PASSWORD", r.password)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "k.yaml")
	doc := fmt.Sprintf("db: tables.db\nkafka:\n  brokers: %s\n  properties:\n    security.protocol: SASL_PLAINTEXT\n    sasl.mechanism: SCRAM-SHA-512\n    sasl.username: %s\n    sasl.password: ${KMZ_ACL_TEST_PASSWORD}\n    %s: %s\ntables:\n  - name: t1\n    topic: %s\n    follow: true\n    follow_interval: 50ms\n    stall_timeout: 20s\n",
		r.addr, r.user, replay.GroupPrefixProperty, n.prefix, n.src)
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cl := unixClient(t, filepath.Join(dir, "tables.db.sock"))
	start := func(t *testing.T) *proc {
		// A fresh database each time: the first build is a rebuild.
		for _, f := range []string{"tables.db", "tables.db.holder"} {
			if err := os.Remove(filepath.Join(dir, f)); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
		return startProc(t, "--log-format", "json", "serve", "--config", cfg)
	}
	stop := func(t *testing.T, p *proc) {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 60*time.Second); code != 0 {
			t.Fatalf("serve exit %d after SIGTERM, want 0", code)
		}
	}
	type status struct {
		LastError *struct {
			Error    string `json:"error"`
			ExitCode int    `json:"exit_code"`
		} `json:"last_error"`
		Follow *struct {
			Running bool    `json:"running"`
			Error   *string `json:"error"`
		} `json:"follow"`
	}
	tableStatus := func(t *testing.T) (status, bool) {
		code, body, _ := httpGet(t, cl, "/v1/tables/t1")
		var st status
		if code != http.StatusOK || jsonUnmarshal(body, &st) != nil {
			return st, false
		}
		return st, true
	}
	return &aclRun{
		run: func(t *testing.T) result {
			p := start(t)
			awaitStatus(t, cl, p, "/readyz", http.StatusOK)
			waitFor(t, 60*time.Second, "the follower running", func() bool {
				st, ok := tableStatus(t)
				return ok && st.Follow != nil && st.Follow.Running && st.Follow.Error == nil
			})
			checkKeys(t, cl, "t1", want)
			stop(t, p)
			return result{code: 0}
		},
		check: func(t *testing.T, _ result) {},
		refused: func(t *testing.T, a aclEntry, want int) {
			p := start(t)
			var st status
			waitFor(t, 90*time.Second, "the daemon's report of the refusal", func() bool {
				var ok bool
				st, ok = tableStatus(t)
				return ok && (st.LastError != nil || st.Follow != nil && st.Follow.Error != nil)
			})
			stop(t, p)
			res := result{stderr: p.stderrText()}
			if st.LastError != nil {
				res.code = st.LastError.ExitCode
				res.stderr = "kmaterialize: " + st.LastError.Error + "\n"
				if res.code != want {
					t.Fatalf("serve without %s: the table's last error has exit code %d, want %d: %s", a, res.code, want, st.LastError.Error)
				}
			} else {
				res.stderr = "kmaterialize: " + *st.Follow.Error + "\n"
			}
			t.Logf("serve without %s: %s", a, res.stderr)
			refusedText(t, res, a)
		},
	}
}

// setupCopy fills the source; each run copies what is new (before writes
// more, so that a run without one ACL has records to copy).
func setupCopy(t *testing.T, r *aclRig, n aclNames) *aclRun {
	r.b.TestTopic(t, n.src, 2, nil)
	r.b.TestTopic(t, n.dst, 2, nil)
	t.Cleanup(func() { r.removeGroup(t, n.group, n.tid) })
	rng := newRand(t)
	recs := r.produce(t, n.src, genRecords(rng, []int32{0, 1}, 60))
	props := r.propsFile(t, groupPrefixLine(n))
	return &aclRun{
		run: func(t *testing.T) result {
			return runBin(t, 120*time.Second, "--log-format", "json", "copy", "--brokers", r.addr, "--from", n.src, "--to", n.dst,
				"--group", n.group, "--transactional-id", n.tid, "--stall-timeout", "20s", "--call-timeout", "10s", "-F", props)
		},
		check: func(t *testing.T, _ result) {
			// The destination holds each source partition's records, in
			// order, once.
			want := map[int32][]string{}
			for _, x := range recs {
				want[x.P] = append(want[x.P], string(x.V))
			}
			marks, err := r.b.Marks(context.Background(), n.dst)
			if err != nil {
				t.Fatal(err)
			}
			ends := map[int32]int64{}
			for p, m := range marks {
				ends[p] = m.LSO
			}
			got, err := r.b.ReadCommitted(context.Background(), n.dst, ends)
			if err != nil {
				t.Fatal(err)
			}
			gotv := map[int32][]string{}
			for p, rs := range got {
				for _, kr := range rs {
					gotv[p] = append(gotv[p], string(kr.Value))
				}
			}
			if fmt.Sprint(gotv) != fmt.Sprint(want) {
				t.Fatalf("the destination holds %v, want %v", gotv, want)
			}
		},
		before: func(t *testing.T) { r.produce(t, n.src, genRecords(rng, []int32{0, 1}, 10)) },
	}
}

// setupVerify writes the same records to both topics.
func setupVerify(t *testing.T, r *aclRig, n aclNames) *aclRun {
	r.b.TestTopic(t, n.src, 2, nil)
	r.b.TestTopic(t, n.dst, 2, nil)
	recs := genRecords(newRand(t), []int32{0, 1}, 50)
	r.produce(t, n.src, recs)
	r.produce(t, n.dst, recs)
	props := r.propsFile(t, groupPrefixLine(n))
	return &aclRun{
		run: func(t *testing.T) result {
			return runBin(t, 90*time.Second, "--log-format", "json", "verify", "--brokers", r.addr, "--from", n.src, "--to", n.dst,
				"--stall-timeout", "20s", "-F", props)
		},
		check: func(t *testing.T, res result) {
			var rep verifyReport
			if err := jsonUnmarshal(res.stdout, &rep); err != nil {
				t.Fatalf("verify's output: %v\n%s", err, res.stdout)
			}
			if !rep.OK || rep.SourceRecords != int64(len(recs)) || rep.DestinationRecords != int64(len(recs)) {
				t.Fatalf("verify: %+v, want ok with %d records on each side", rep, len(recs))
			}
		},
	}
}

// removeGroup takes the copier's static member out of group and deletes it
// (as removeGroup does on the package's broker).
func (r *aclRig) removeGroup(t *testing.T, group, tid string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := r.b.Client()
	if err != nil {
		t.Error(err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	notFound := func(err error) bool { return err == nil || errors.Is(err, kerr.GroupIDNotFound) }
	if _, err := adm.LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs(copier.InstanceID(tid))); !notFound(err) {
		t.Logf("leave group %s: %v", group, err)
	}
	if _, err := adm.DeleteGroup(ctx, group); !notFound(err) {
		t.Errorf("delete group %s: %v", group, err)
	}
}

// TestReplayWithoutGroupACL: librdkafka's consumer looks up its group's
// coordinator even though the replay only assigns partitions, and a
// principal without Describe on the replay's group (the optional ACL of
// docs/security.md) is refused it: GROUP_AUTHORIZATION_FAILED. A rebuild
// with Read on the topic only (the group prefix set with -F) still
// completes with the oracle's table, in many polls (small fetches), and the
// refusal is logged once, as a warning naming the configured prefix's
// group, never as the run's error nor as "Kafka unavailable".
func TestReplayWithoutGroupACL(t *testing.T) {
	r := newACLRig(t)
	n := newACLNames(t)
	r.b.TestTopic(t, n.src, 3, nil)
	first := r.produce(t, n.src, genRecords(newRand(t), []int32{0, 1, 2}, 6000))
	want, _, _ := oracle(first, nil)
	r.grant(t, topicACL(n.src, kmsg.ACLOperationRead), topicACL(n.src, kmsg.ACLOperationDescribeConfigs))
	// librdkafka's fetch and consumer-group debug lines (forwarded at
	// debug level) witness the fetches and the coordinator lookups.
	small := []string{groupPrefixLine(n), "debug=fetch,cgrp"}
	for k, v := range localkafka.SmallFetches {
		small = append(small, k+"="+v)
	}
	db := dbPath(t)
	res := runBin(t, 120*time.Second, "--log-format", "json", "--log-level", "debug", "rebuild", "--brokers", r.addr, "--topic", n.src,
		"--db", db, "--table", "t", "--stall-timeout", "20s", "--progress-interval", "20ms", "-F", r.propsFile(t, small...))
	if res.code != 0 {
		t.Fatalf("rebuild without the replay's group ACL: exit %d, want 0\n%s", res.code, res.stderr)
	}
	checkTable(t, want, scanJSON(t, db, "t"))
	var refused []map[string]any
	fetches := 0
	for _, l := range logLines(res.stderr) {
		msg, _ := l["message"].(string)
		if strings.Contains(msg, "refused the coordinator lookup of the replay's own group") {
			refused = append(refused, l)
		}
		if l["librdkafka"] == "FETCH" {
			fetches++
		}
		if strings.Contains(fmt.Sprint(l), "Kafka unavailable") {
			t.Errorf("a log line says Kafka unavailable: %v", l)
		}
	}
	// The condition happened: the broker refused the lookup (the event
	// reached the replay), while the replay went on reading.
	if len(refused) != 1 {
		t.Fatalf("%d warnings of the refused group lookup, want exactly 1; stderr:\n%s", len(refused), res.stderr)
	}
	group, _ := refused[0]["group"].(string)
	if refused[0]["level"] != "warn" || !strings.HasPrefix(group, n.prefix) || !strings.Contains(fmt.Sprint(refused[0]["error"]), "Group authorization failed") {
		t.Fatalf("the refusal's warning %v: want level warn, a group with prefix %q, the broker's error", refused[0], n.prefix)
	}
	if fetches < 3 {
		t.Fatalf("only %d fetch lines of librdkafka: the read was too short to show the warning is not per poll", fetches)
	}
	t.Logf("one warning over %d fetch lines of librdkafka", fetches)
	if strings.Contains(res.stderr, "kmaterialize: ") {
		t.Fatalf("the successful rebuild printed an error:\n%s", res.stderr)
	}

	// The daemon, following the table while records keep coming: each of
	// its clients (the first build's, the follower's) logs the refusal
	// once, however long it reads.
	t.Setenv("KMZ_ACL_TEST_PASSWORD", r.password)
	sdir := t.TempDir()
	scfg := filepath.Join(sdir, "k.yaml")
	doc := fmt.Sprintf("db: tables.db\nkafka:\n  brokers: %s\n  properties:\n    security.protocol: SASL_PLAINTEXT\n    sasl.mechanism: SCRAM-SHA-512\n    sasl.username: %s\n    sasl.password: ${KMZ_ACL_TEST_PASSWORD}\n    %s: %s\ntables:\n  - name: t1\n    topic: %s\n    follow: true\n    follow_interval: 50ms\n    stall_timeout: 20s\n",
		r.addr, r.user, replay.GroupPrefixProperty, n.prefix, n.src)
	if err := os.WriteFile(scfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cl := unixClient(t, filepath.Join(sdir, "tables.db.sock"))
	p := startProc(t, "--log-format", "json", "serve", "--config", scfg)
	awaitStatus(t, cl, p, "/readyz", http.StatusOK)
	all := slices.Clone(first)
	rng := newRand(t)
	for range 3 {
		all = append(all, r.produce(t, n.src, genRecords(rng, []int32{0, 1, 2}, 200))...)
		want, _, _ := oracle(all, nil)
		waitFor(t, 60*time.Second, "the follower serving the new records", func() bool {
			for k, v := range want {
				code, body, _ := httpGet(t, cl, "/v1/tables/t1/keys/"+url.PathEscape(k))
				if code != http.StatusOK || !strings.Contains(body, v) {
					return false
				}
			}
			return true
		})
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("serve exit %d after SIGTERM, want 0", code)
	}
	perGroup := map[string]int{}
	for _, l := range logLines(p.stderrText()) {
		if msg, _ := l["message"].(string); strings.Contains(msg, "refused the coordinator lookup") {
			perGroup[fmt.Sprint(l["group"])]++
		}
		if strings.Contains(fmt.Sprint(l), "Kafka unavailable") {
			t.Errorf("a daemon log line says Kafka unavailable: %v", l)
		}
	}
	if len(perGroup) == 0 {
		t.Fatalf("the daemon logged no refusal of its replays' group lookups; stderr:\n%s", p.stderrText())
	}
	for g, c := range perGroup {
		if c != 1 || !strings.HasPrefix(g, n.prefix) {
			t.Fatalf("the daemon's refusal warnings per group %v: want one per client's group, each with prefix %q", perGroup, n.prefix)
		}
	}
	t.Logf("the daemon's refusal warnings, one per client: %v", perGroup)
	want, _, _ = oracle(all, nil)

	// With Describe on the prefix (PREFIXED) the lookup is not refused:
	// Describe is the operation FindCoordinator needs.
	r.grant(t, replayGroupACL(n))
	res = runBin(t, 120*time.Second, "--log-format", "json", "rebuild", "--brokers", r.addr, "--topic", n.src,
		"--db", db, "--table", "t1", "--stall-timeout", "20s", "-F", r.propsFile(t, groupPrefixLine(n)))
	if res.code != 0 || strings.Contains(res.stderr, "refused the coordinator lookup") {
		t.Fatalf("rebuild with Describe on the group prefix: exit %d, want 0 without the warning\n%s", res.code, res.stderr)
	}
	checkTable(t, want, scanJSON(t, db, "t1"))

	// Without the property the prefix is the default one.
	res = runBin(t, 120*time.Second, "--log-format", "json", "rebuild", "--brokers", r.addr, "--topic", n.src,
		"--db", db, "--table", "t2", "--stall-timeout", "20s", "-F", r.propsFile(t))
	if res.code != 0 {
		t.Fatalf("rebuild with the default prefix: exit %d\n%s", res.code, res.stderr)
	}
	checkTable(t, want, scanJSON(t, db, "t2"))
	refused = refused[:0]
	for _, l := range logLines(res.stderr) {
		if msg, _ := l["message"].(string); strings.Contains(msg, "refused the coordinator lookup") {
			refused = append(refused, l)
		}
	}
	if len(refused) != 1 || !strings.HasPrefix(fmt.Sprint(refused[0]["group"]), replay.DefaultGroupPrefix) {
		t.Fatalf("with the default prefix: warnings %v, want one naming a group %q...", refused, replay.DefaultGroupPrefix)
	}

	// An empty prefix is refused before any work, naming the property.
	res = runBin(t, 60*time.Second, "rebuild", "--brokers", r.addr, "--topic", n.src, "--db", db, "--table", "t3",
		"-F", r.propsFile(t, replay.GroupPrefixProperty+"="))
	if res.code != 2 || !strings.Contains(res.stderr, replay.GroupPrefixProperty) {
		t.Fatalf("an empty group prefix: exit %d, want 2 naming %s\n%s", res.code, replay.GroupPrefixProperty, res.stderr)
	}
}

// TestSCRAMSecretsNeverShown is TestSecretsNeverShown's and
// TestSecretsNotInDaemon's check with SASL/SCRAM-SHA-512 on a broker that
// enforces ACLs (kfake's and Apache Kafka's SASL listener): the tool's
// password given by -F and by the config file (${NAME}) reaches librdkafka
// (the runs succeed with the oracle's table), and never appears in stdout,
// stderr at debug level with librdkafka's security and conf debug lines,
// the daemon's log, /v1/status, the table's status, /v1/tables or /metrics;
// nor does a wrong password, whose run fails exit 5.
func TestSCRAMSecretsNeverShown(t *testing.T) {
	r := newACLRig(t)
	n := newACLNames(t)
	r.b.TestTopic(t, n.src, 2, nil)
	want, _, _ := oracle(r.produce(t, n.src, genRecords(newRand(t), []int32{0, 1}, 80)), nil)
	r.grant(t, topicACL(n.src, kmsg.ACLOperationRead), topicACL(n.src, kmsg.ACLOperationDescribeConfigs), replayGroupACL(n))
	var outputs []string
	keep := func(res result) result { outputs = append(outputs, res.stdout, res.stderr); return res }
	debug := []string{"--log-level", "debug", "--log-format", "json"}
	dir := t.TempDir()
	db := filepath.Join(dir, "tables.db")

	// -F.
	res := keep(runBin(t, 90*time.Second, append(append([]string{}, debug...), "rebuild", "--brokers", r.addr, "--topic", n.src, "--db", db,
		"--table", "via-f", "--stall-timeout", "20s", "-F", r.propsFile(t, groupPrefixLine(n), "debug=security,conf"))...))
	if res.code != 0 {
		t.Fatalf("rebuild with SCRAM from -F: exit %d\n%s", res.code, res.stderr)
	}
	checkTable(t, want, scanJSON(t, db, "via-f"))

	// The config file, the password through ${NAME}.
	t.Setenv("KMZ_SCRAM_TEST_PASSWORD", r.password)
	writeCfg := func(path, dbName, extra string) {
		doc := fmt.Sprintf("db: %s\nkafka:\n  brokers: %s\n  properties:\n    security.protocol: SASL_PLAINTEXT\n    sasl.mechanism: SCRAM-SHA-512\n    sasl.username: %s\n    sasl.password: ${KMZ_SCRAM_TEST_PASSWORD}\n    debug: security,conf\n    %s: %s\ntables:\n  - name: via-config\n    topic: %s\n    stall_timeout: 20s\n%s",
			dbName, r.addr, r.user, replay.GroupPrefixProperty, n.prefix, n.src, extra)
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "k.yaml")
	writeCfg(cfg, db, "")
	res = keep(runBin(t, 90*time.Second, append(append([]string{}, debug...), "rebuild", "--config", cfg, "--table", "via-config")...))
	if res.code != 0 {
		t.Fatalf("rebuild with SCRAM from the config file: exit %d\n%s", res.code, res.stderr)
	}
	checkTable(t, want, scanJSON(t, db, "via-config"))

	// The daemon, from the config file, following the table.
	sdir := t.TempDir()
	scfg := filepath.Join(sdir, "k.yaml")
	writeCfg(scfg, "tables.db", "    follow: true\n    follow_interval: 50ms\n")
	cl := unixClient(t, filepath.Join(sdir, "tables.db.sock"))
	p := startProc(t, append(append([]string{}, debug...), "serve", "--config", scfg)...)
	awaitStatus(t, cl, p, "/readyz", http.StatusOK)
	checkKeys(t, cl, "via-config", want)
	for _, route := range []string{"/v1/status", "/v1/tables", "/v1/tables/via-config", "/metrics"} {
		code, body, _ := httpGet(t, cl, route)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", route, code, body)
		}
		outputs = append(outputs, body)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("serve exit %d after SIGTERM, want 0", code)
	}
	outputs = append(outputs, p.stdout.String(), p.stderrText())

	// A wrong password: SCRAM authentication fails, exit 5.
	wrong := randomSecret(t, "wrong-")
	res = keep(runBin(t, 90*time.Second, append(append([]string{}, debug...), "rebuild", "--brokers", r.addr, "--topic", n.src, "--db", db,
		"--table", "wrong", "--stall-timeout", "5s", "-F", r.propsFile(t, groupPrefixLine(n), "sasl.password="+wrong))...))
	if res.code != 5 {
		t.Fatalf("rebuild with a wrong SCRAM password: exit %d, want 5\n%s", res.code, res.stderr)
	}
	noSecret(t, wrong, "the failed rebuild", res.stdout, res.stderr)

	// The check is not vacuous: librdkafka's security lines were logged.
	all := strings.Join(outputs, "\n")
	if !strings.Contains(all, "SCRAM-SHA-512") || len(logLines(all)) < 20 {
		t.Fatalf("the outputs hold no SCRAM debug lines or few log lines (%d); the check would be vacuous", len(logLines(all)))
	}
	noSecret(t, r.password, "an output", outputs...)
}
