package serve

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/store"
)

// storeTable is a table whose Build publishes {"run": N} through the store
// (no Kafka), N counting its builds; each build waits for a token on
// release first.
func storeTable(name, schedule string, builds *atomic.Int64, release chan struct{}) Table {
	return Table{Name: name, Schedule: schedule, Topic: "-", Fold: "test",
		Build: func(ctx context.Context, db *store.DB, log zerolog.Logger) (materialize.Report, error) {
			n := builds.Add(1)
			if release != nil {
				select {
				case <-release:
				case <-ctx.Done():
					return materialize.Report{}, ctx.Err()
				}
			}
			g, err := db.Begin(name)
			if err != nil {
				return materialize.Report{}, err
			}
			defer g.Abort()
			if err := g.Write(func(t store.Rows) error { return t.Put([]byte("run"), []byte(fmt.Sprint(n))) }); err != nil {
				return materialize.Report{}, err
			}
			if err := g.Publish(store.TableMeta{Topic: "-", Fold: "test"}, nil); err != nil {
				return materialize.Report{}, err
			}
			m, err := db.Table(name)
			return materialize.Report{Meta: m}, err
		}}
}

// TestScheduleFiresAndSkipsOverlap runs the scheduler on a fake clock: the
// next_run of an "@every" and a cron schedule are where the clock says; a
// scheduled run fires when the clock passes it; while it runs, the next
// firing is skipped and counted (table and metrics) and starts no second
// run.
func TestScheduleFiresAndSkipsOverlap(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	now := time.Date(2026, 3, 4, 10, 2, 0, 0, time.UTC)
	fc := clockwork.NewFakeClockAt(now)
	var builds, cronBuilds atomic.Int64
	release := make(chan struct{}, 10)
	release <- struct{}{} // the first build at start goes through
	cfg := baseConfig(t, storeTable("every", "@every 10m", &builds, release), storeTable("cron", "*/5 * * * *", &cronBuilds, nil))
	cfg.MaxConcurrentRuns = 2 // the cron table's runs go while every's is held
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.clock = fc
	d := startServer(t, s)
	c := d.c
	waitFor(t, "the first builds", 30*time.Second, func() bool {
		return c.table(t, "every").State == StateReady && c.table(t, "cron").State == StateReady
	})
	rows := func() oracle { r, _, _ := c.scan(t, "every", 10); return r }
	if diff := cmp.Diff(oracle{"run": "1"}, rows()); diff != "" {
		t.Fatalf("after the first build (-want +got):\n%s", diff)
	}
	if got, want := *c.table(t, "every").NextRun, now.Add(10*time.Minute+everyOffset("every", 10*time.Minute)).Format(time.RFC3339); got != want {
		t.Fatalf("next_run of @every 10m: %s, want %s (with the table's offset)", got, want)
	}
	if got := *c.table(t, "cron").NextRun; got != "2026-03-04T10:05:00Z" {
		t.Fatalf("next_run of */5: %s, want 2026-03-04T10:05:00Z", got)
	}

	// Advance past the schedule until it fires: the scheduled run starts
	// and holds (no token).
	advanceUntil(t, fc, "the scheduled run to start", func() bool { return builds.Load() == 2 })
	tj := c.table(t, "every")
	if tj.State != StateRebuilding || tj.Run == nil || tj.Run.Trigger != triggerSchedule {
		t.Fatalf("during the scheduled run: state %s run %+v", tj.State, tj.Run)
	}
	// The next firing finds it running: skipped and counted, no new build.
	advanceUntil(t, fc, "a skipped scheduled run", func() bool { return c.table(t, "every").SkippedRuns >= 1 })
	skipped := c.table(t, "every").SkippedRuns
	if builds.Load() != 2 {
		t.Fatalf("%d builds started; an overlapping run was not skipped", builds.Load())
	}
	metric := fmt.Sprintf("kmaterialize_rebuilds_total{outcome=\"skipped\",table=\"every\"} %d\n", skipped)
	if m := c.get(t, "/metrics"); !strings.Contains(string(m.body), metric) {
		t.Fatalf("metrics lack %q", metric)
	}
	if cronBuilds.Load() < 2 {
		t.Fatalf("the cron schedule never fired (%d builds)", cronBuilds.Load())
	}

	release <- struct{}{}
	waitFor(t, "the scheduled run to publish", 30*time.Second, func() bool { return c.table(t, "every").State == StateReady })
	if diff := cmp.Diff(oracle{"run": "2"}, rows()); diff != "" {
		t.Fatalf("after the scheduled run (-want +got):\n%s", diff)
	}

	// Reload: an unchanged schedule keeps its next run, a changed one
	// starts from now, a removed table has none.
	every, cron := c.table(t, "every"), c.table(t, "cron")
	if err := s.SetTables([]Table{storeTable("every", "@every 10m", &builds, release), storeTable("cron", "*/5 * * * *", &cronBuilds, nil)}); err != nil {
		t.Fatal(err)
	}
	if got := c.table(t, "every").NextRun; *got != *every.NextRun {
		t.Fatalf("unchanged schedule: next_run %s, was %s", *got, *every.NextRun)
	}
	if err := s.SetTables([]Table{storeTable("every", "@every 1h", &builds, release)}); err != nil {
		t.Fatal(err)
	}
	if got, want := *c.table(t, "every").NextRun, fc.Now().Add(time.Hour+everyOffset("every", time.Hour)).UTC().Format(time.RFC3339); got != want {
		t.Fatalf("changed schedule: next_run %s, want %s", got, want)
	}
	if got := c.table(t, "cron"); got.NextRun != nil || got.Configured || *got.Generation != *cron.Generation {
		t.Fatalf("removed table: next_run %v configured %v generation %d (was %d)", got.NextRun, got.Configured, *got.Generation, *cron.Generation)
	}
	d.stop(t)
}

// advanceUntil moves the fake clock ten minutes at a time until cond holds:
// a step taken before gocron armed its next timer fires nothing, so the
// clock is moved again rather than assumed to have fired.
func advanceUntil(t *testing.T, fc *clockwork.FakeClock, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 20; i++ {
		fc.Advance(10 * time.Minute)
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			if cond() {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Fatalf("waiting for %s: the schedule never fired", what)
}

// TestEveryOffset: tables on one "@every" interval get fixed offsets from
// their names, each below min(10% of the interval, 30s), not all the same;
// on the fake clock a table's run fires at its own next_run and not
// before, and an unchanged schedule keeps its offset across a reload.
func TestEveryOffset(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	now := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	fc := clockwork.NewFakeClockAt(now)
	names := []string{"alpha", "beta", "gamma", "delta"}
	builds := make([]atomic.Int64, len(names))
	var tables []Table
	for i, n := range names {
		tables = append(tables, storeTable(n, "@every 1m", &builds[i], nil))
	}
	cfg := baseConfig(t, tables...)
	cfg.MaxConcurrentRuns = len(names)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.clock = fc
	d := startServer(t, s)
	c := d.c
	waitFor(t, "the first builds", 30*time.Second, func() bool {
		for _, n := range names {
			if c.table(t, n).State != StateReady {
				return false
			}
		}
		return true
	})
	spread := 6 * time.Second // 10% of 1m, under 30s
	next := map[string]time.Time{}
	distinct := map[time.Time]bool{}
	for _, n := range names {
		tj := c.table(t, n)
		at, err := time.Parse(time.RFC3339, *tj.NextRun)
		if err != nil {
			t.Fatal(err)
		}
		if first := now.Add(time.Minute); at.Before(first) || !at.Before(first.Add(spread)) {
			t.Fatalf("table %s: next_run %s, want within [%s, %s)", n, at, first, first.Add(spread))
		}
		next[n] = at
		distinct[at] = true
	}
	if len(distinct) < 2 {
		t.Fatalf("every table got the same next_run %v: no offset", next)
	}
	// Move the clock to each next_run in turn (plus the second RFC3339
	// drops): that table runs; a table whose next_run is still ahead of
	// the clock has not.
	order := append([]string(nil), names...)
	sort.Slice(order, func(i, j int) bool { return next[order[i]].Before(next[order[j]]) })
	idx := map[string]int{}
	for i, n := range names {
		idx[n] = i
	}
	for _, n := range order {
		if to := next[n].Add(time.Second); to.After(fc.Now()) {
			fc.Advance(to.Sub(fc.Now()))
		}
		waitFor(t, "table "+n+"'s scheduled run", 30*time.Second, func() bool { return builds[idx[n]].Load() == 2 })
		for _, m := range names {
			if next[m].After(fc.Now()) && builds[idx[m]].Load() != 1 {
				t.Fatalf("table %s (next_run %s) ran with the clock at %s", m, next[m], fc.Now())
			}
		}
	}
	// A reload with the same schedules keeps each table's next_run.
	before := map[string]string{}
	for _, n := range names {
		before[n] = *c.table(t, n).NextRun
	}
	if err := s.SetTables(tables); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if got := *c.table(t, n).NextRun; got != before[n] {
			t.Fatalf("table %s: next_run %s after a reload, was %s", n, got, before[n])
		}
	}
	d.stop(t)
}
