package main

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/kmaterialize/kmaterialize/partition"
)

// wantPartitions is the output partition prints for args, from the
// package's Partition over the keys' bytes.
func wantPartitions(t *testing.T, p partition.Partitioner, n int32, args []string, b64 bool) string {
	t.Helper()
	var b strings.Builder
	for _, a := range args {
		key := []byte(a)
		if b64 {
			var err error
			if key, err = base64.StdEncoding.DecodeString(a); err != nil {
				t.Fatal(err)
			}
		}
		got, err := p.Partition(key, n)
		if err != nil {
			t.Fatalf("Partition(%q): %v", a, err)
		}
		fmt.Fprintf(&b, "%s\t%d\n", a, got)
	}
	return b.String()
}

func TestPartitionCommand(t *testing.T) {
	text := []string{"acct-1", "acct-2", "kafka", "ключ", "a key with spaces"}
	binary := []string{"AAEC/w==", "gAAAAA==", "/w==", "", "DpxFARU="} // "" is the empty key
	for _, name := range []string{"murmur2", "consistent", "fnv1a", "murmur2_random", "consistent_random", "fnv1a_random"} {
		p, err := partition.Parse(name)
		if err != nil {
			t.Fatal(err)
		}
		r := mustCLI(t, exitOK, append([]string{"partition", "--partitioner", name, "--partitions", "7"}, text...)...)
		if want := wantPartitions(t, p, 7, text, false); r.stdout != want {
			t.Errorf("%s: stdout\n%s\nwant\n%s", name, r.stdout, want)
		}
		keys := binary
		if p == partition.Consistent {
			keys = binary[:3] // the empty key has no partition there
		}
		r = mustCLI(t, exitOK, append([]string{"partition", "--partitioner", name, "--partitions", "1000", "--base64"}, keys...)...)
		if want := wantPartitions(t, p, 1000, keys, true); r.stdout != want {
			t.Errorf("%s --base64: stdout\n%s\nwant\n%s", name, r.stdout, want)
		}
	}
}

func TestPartitionCommandTopic(t *testing.T) {
	topic := newTopic(t, 5)
	keys := []string{"acct-1", "acct-2", "acct-3", "acct-4"}
	r := mustCLI(t, exitOK, append([]string{"partition", "--partitioner", "murmur2", "--brokers", broker.Addr, "--topic", topic, "--stall-timeout", "20s"}, keys...)...)
	if want := wantPartitions(t, partition.Murmur2, 5, keys, false); r.stdout != want {
		t.Errorf("stdout\n%s\nwant\n%s", r.stdout, want)
	}
	// A missing topic is exit 5, as for every command that reads one.
	mustCLI(t, exitUnavailable, "partition", "--partitioner", "murmur2", "--brokers", broker.Addr, "--topic", topic+"-missing", "--stall-timeout", "20s", "acct-1")
}

func TestPartitionCommandRefusals(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--partitioner", "random", "--partitions", "3", "k"}, "murmur2, consistent, fnv1a"},
		{[]string{"--partitioner", "murmur3", "--partitions", "3", "k"}, "unknown partitioner"},
		{[]string{"--partitions", "3", "k"}, "--partitioner is required"},
		{[]string{"--partitioner", "murmur2", "--partitions", "0", "k"}, "at least 1"},
		{[]string{"--partitioner", "murmur2", "--partitions", "-2", "k"}, "at least 1"},
		{[]string{"--partitioner", "murmur2", "--partitions", "2147483648", "k"}, "at least 1"},
		{[]string{"--partitioner", "murmur2", "k"}, "--partitions or --topic is required"},
		{[]string{"--partitioner", "murmur2", "--partitions", "3", "--brokers", "localhost:1", "--topic", "t", "k"}, "both given"},
		{[]string{"--partitioner", "murmur2", "--partitions", "3"}, "no KEY given"},
		{[]string{"--partitioner", "murmur2", "--partitions", "3", "--base64", "not base64!"}, "not base64"},
		{[]string{"--partitioner", "consistent", "--partitions", "3", "k", ""}, "empty keys"},
	} {
		r := mustCLI(t, exitUsage, append([]string{"partition"}, c.args...)...)
		if !strings.Contains(r.stderr, c.says) {
			t.Errorf("%q: stderr does not say %q:\n%s", c.args, c.says, r.stderr)
		}
		if r.stdout != "" {
			t.Errorf("%q: printed %q", c.args, r.stdout)
		}
	}
}
