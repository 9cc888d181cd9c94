package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
)

// goLimit is the runtime's soft memory limit, read without changing it.
func goLimit() int64 { return debug.SetMemoryLimit(-1) }

// noGoLimit runs the test with no soft memory limit set (as a process
// without GOMEMLIMIT starts) and puts the one it found back at its end.
func noGoLimit(t *testing.T) {
	t.Helper()
	prev := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
}

// TestLimitGoMemory checks limitGoMemory against its contract: with no limit
// set, the limit is --memory less an eighth (the default --memory when none
// is given) until the returned function restores "no limit"; a limit
// already set (GOMEMLIMIT) wins and is left alone.
func TestLimitGoMemory(t *testing.T) {
	const memory = int64(64) << 30 // far above this process's use: no collection is forced
	cases := []struct {
		name   string
		memory int64
		want   int64
	}{
		{"given", memory, memory / 8 * 7},
		{"default", 0, materialize.DefaultMemory / 8 * 7},
		{"negative is the default", -1, materialize.DefaultMemory / 8 * 7},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			noGoLimit(t)
			restore := limitGoMemory(tc.memory)
			if got := goLimit(); got != tc.want {
				t.Fatalf("limit during the run = %d, want %d", got, tc.want)
			}
			restore()
			if got := goLimit(); got != math.MaxInt64 {
				t.Fatalf("limit after restore = %d, want none (%d)", got, int64(math.MaxInt64))
			}
		})
	}
	t.Run("GOMEMLIMIT wins", func(t *testing.T) {
		noGoLimit(t)
		set := 3 * memory
		debug.SetMemoryLimit(set)
		restore := limitGoMemory(memory)
		if got := goLimit(); got != set {
			t.Fatalf("limit during the run = %d, want the one already set, %d", got, set)
		}
		restore()
		if got := goLimit(); got != set {
			t.Fatalf("limit after restore = %d, want the one already set, %d", got, set)
		}
	})
}

// TestRebuildLimitsGoMemory runs a rebuild as the kmaterialize process does
// (processOptions.limitGoMemory, which main sets) and holds it in its read
// (a parked fetch): while it reads, the Go limit is --memory less an eighth;
// after it published, the limit is gone again. The same rebuild through run
// (what a test calls, sharing the process's runtime) leaves the limit unset.
func TestRebuildLimitsGoMemory(t *testing.T) {
	localkafka.KfakeOnly(t)       // the parked fetch is kfake's ControlKey
	const memory = int64(1) << 30 // --memory 1GiB
	for _, tc := range []struct {
		name  string
		po    processOptions
		limit int64
	}{
		{"process", processOptions{limitGoMemory: true}, memory / 8 * 7},
		{"in a test", processOptions{}, math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noGoLimit(t)
			topic := newTopic(t, 1)
			want := map[string]string{}
			var recs []localkafka.Record
			for i := range 20 {
				k, v := fmt.Sprintf("k%02d", i%7), fmt.Sprintf("v%d", i)
				recs = append(recs, localkafka.Record{Key: []byte(k), Value: []byte(v)})
				want[k] = v // the oracle: the last value of each key
			}
			if _, err := broker.Produce(context.Background(), topic, recs); err != nil {
				t.Fatal(err)
			}
			p := broker.ParkFetch(topic, -1) // the rebuild's first fetch
			t.Cleanup(p.Release)
			db := filepath.Join(t.TempDir(), "kmz.db")
			args := append([]string{"kmaterialize"}, rebuildArgs(topic, db, "--table", "t", "--memory", "1GiB")...)
			done := make(chan int, 1)
			var out, errb bytes.Buffer
			go func() { done <- runProcess(context.Background(), args, &out, &errb, tc.po) }()
			select {
			case <-p.Seen:
			case code := <-done:
				t.Fatalf("the rebuild ended (exit %d) before its fetch was parked\n%s", code, errb.String())
			case <-time.After(60 * time.Second):
				t.Fatal("the rebuild's fetch was never parked")
			}
			// limitGoMemory runs before the replay starts: the fetch being
			// parked proves the rebuild is past it.
			if got := goLimit(); got != tc.limit {
				t.Errorf("limit while the rebuild reads = %d, want %d", got, tc.limit)
			}
			p.Release()
			if code := <-done; code != 0 {
				t.Fatalf("rebuild: exit %d\nstderr:\n%s", code, errb.String())
			}
			if got := goLimit(); got != math.MaxInt64 {
				t.Errorf("limit after the rebuild = %d, want none", got)
			}
			if d := cmp.Diff(want, scanRows(t, db, "t")); d != "" {
				t.Errorf("table (-want +got):\n%s", d)
			}
		})
	}
}
