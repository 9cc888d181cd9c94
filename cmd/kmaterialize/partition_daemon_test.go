package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/partition"
	"github.com/kmaterialize/kmaterialize/store"
)

// TestPartitionCommandTable: `kmaterialize partition --table` asks the
// daemon, which answers by the table's stored partitioner and the
// partition count its checkpoint recorded: a shard (partitions 0,1 of 4,
// murmur2) built into the file the daemon serves prints what
// partition.Murmur2 computes for 4 partitions, also for base64 keys; a
// table without a partitioner is exit 2, as are --table with
// --partitioner and --table without a daemon; an unknown table exit 6.
func TestPartitionCommandTable(t *testing.T) {
	topic := newTopic(t, 4)
	var recs []localkafka.Record
	for p := int32(0); p < 4; p++ {
		recs = append(recs, localkafka.Record{Partition: p, Key: []byte{'k', byte('0' + p)}, Value: []byte("v")})
	}
	// Two keys murmur2 places outside the shard's 0,1 (2 and 3), written
	// where it places them.
	for _, k := range []string{"acct-1", "acct-2"} {
		p, _ := partition.Murmur2.Partition([]byte(k), 4)
		recs = append(recs, localkafka.Record{Partition: p, Key: []byte(k), Value: []byte("v")})
	}
	produce(t, topic, recs)
	s := newDaemonSetup(t, map[string]string{"plain": topic})
	db, err := store.Open(s.db, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := materialize.Spec{Name: "shard", Topic: topic, Partitions: []int32{0, 1}, Partitioner: "murmur2", StallTimeout: 60 * time.Second}
	opts, err := spec.Options(db, broker.Addr, nil, zerolog.New(zerolog.NewTestWriter(t)))
	if err == nil {
		_, err = materialize.Rebuild(context.Background(), opts)
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	p := s.start(t)
	defer stopDaemon(t, p)

	keys := []string{"acct-1", "acct-2", "kafka", "ключ", "a key with spaces", ""}
	r := mustCLI(t, exitOK, append([]string{"partition", "--table", "shard", "--socket", s.sock}, keys...)...)
	if want := wantPartitions(t, partition.Murmur2, 4, keys, false); r.stdout != want {
		t.Errorf("stdout\n%s\nwant\n%s", r.stdout, want)
	}
	b64 := []string{"AAEC/w==", "gAAAAA==", "/w=="}
	r = mustCLI(t, exitOK, append([]string{"partition", "--table", "shard", "--db", s.db, "--base64"}, b64...)...)
	if want := wantPartitions(t, partition.Murmur2, 4, b64, true); r.stdout != want {
		t.Errorf("--db --base64: stdout\n%s\nwant\n%s", r.stdout, want)
	}
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"--table", "plain", "--socket", s.sock, "k"}, exitUsage},
		{[]string{"--table", "nope", "--socket", s.sock, "k"}, exitNotFound},
		{[]string{"--table", "shard", "--socket", s.sock, "--partitioner", "murmur2", "k"}, exitUsage},
		{[]string{"--table", "shard", "k"}, exitUsage},
		{[]string{"--partitioner", "murmur2", "--partitions", "4", "--socket", s.sock, "k"}, exitUsage},
	} {
		if r := mustCLI(t, c.code, append([]string{"partition"}, c.args...)...); r.stdout != "" {
			t.Errorf("partition %q printed %q", c.args, r.stdout)
		}
	}
	// get through the daemon: a key murmur2 places in the shard's
	// partitions is read (its value when the record is in them: these
	// were written to chosen partitions); one it places elsewhere is
	// exit 6 naming its partition and the way to read it (the 421).
	for _, rec := range recs {
		want, _ := partition.Murmur2.Partition(rec.Key, 4)
		args := []string{"get", "--db", s.db, "--table", "shard", string(rec.Key)}
		switch {
		case want <= 1 && rec.Partition <= 1:
			if r := mustCLI(t, exitOK, args...); r.stdout != "v\n" {
				t.Errorf("get %s (partition %d): %q", rec.Key, want, r.stdout)
			}
			continue
		case want <= 1:
			mustCLI(t, exitNotFound, args...)
			continue
		}
		r := mustCLI(t, exitNotFound, args...)
		for _, w := range []string{fmt.Sprintf("partition %d", want), "--cluster"} {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("get %s: stderr does not say %q:\n%s", rec.Key, w, r.stderr)
			}
		}
	}
}
