package replay

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kmaterialize/kmaterialize/record"
)

// Parallel partition readers.
//
// One consumer reads its partitions on one read loop, and librdkafka
// parses each broker's fetch responses on that broker's one thread: with
// Config.Readers N, the captured plan's partitions are dealt round robin
// to N readers, each its own consumer (and so its own broker threads,
// prefetch queue and batch queue) and read loop, with the replay's rules
// unchanged for its share: its own end marks, stall timeout and errors.
// The sink is called by one reader at a time, and within a partition in
// offset order, as with one reader. The first error stops the others and
// is the replay's.
//
// The memory one reader would hold is divided among them (Config.shared):
// the prefetch queue and the batch bytes, so --memory bounds N readers as
// it bounds one.

// shared is c for one of c.Readers readers: its prefetch queue and batch
// bytes a share of c's.
func (c Config) shared() Config {
	n := c.Readers
	kib, err := strconv.Atoi(c.Props[PrefetchProperty])
	if c.Props[PrefetchProperty] == "" || err != nil || kib <= 0 {
		kib, _ = strconv.Atoi(TunedDefaults[PrefetchProperty])
	}
	props := make(map[string]string, len(c.Props)+1)
	for k, v := range c.Props {
		props[k] = v
	}
	props[PrefetchProperty] = strconv.Itoa(max(kib/n, 1))
	c.Props = props
	if c.BatchBytes > 0 {
		c.BatchBytes = max(c.BatchBytes/n, 1)
	}
	return c
}

// PrefetchProperty is the librdkafka property that bounds a consumer's
// prefetch queue, in KiB: the share of memory the callers size (package
// materialize's splits) and N readers divide.
const PrefetchProperty = "queued.max.messages.kbytes"

// deal divides plan's partitions round robin into n plans (n at least 1).
func deal(plan Plan, n int) []Plan {
	shares := make([]Plan, n)
	for i := range shares {
		shares[i] = plan
		shares[i].Partitions = nil
	}
	for i, pb := range plan.Partitions {
		shares[i%n].Partitions = append(shares[i%n].Partitions, pb)
	}
	return shares
}

// runEach runs n readers' loops until all have returned, the first on the
// caller's goroutine, at its CPU priority (a daemon lowers it), and the
// others each on a goroutine of its own, which c.Lower puts at that
// priority too. The first error ends the others (their ctx is cancelled)
// and is returned, not their interruption by it.
func runEach(ctx context.Context, c Config, n int, run func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		first     error
		firstOnce sync.Once
		wg        sync.WaitGroup
	)
	one := func(i int) {
		if err := run(ctx, i); err != nil {
			firstOnce.Do(func() { first = err })
			cancel()
		}
	}
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.lower(func() { one(i) })
		}()
	}
	one(0)
	wg.Wait()
	return first
}

// runReaders reads plan with c.Readers readers, the first on cl; the
// clients it makes for the others are added to owned, which Run closes.
func runReaders(ctx context.Context, c Config, cl *clients, owned *[]*clients, plan Plan, sink Sink, started time.Time) (Result, error) {
	n := min(c.Readers, len(plan.Partitions))
	shares := deal(plan, n)
	clients := []*clients{cl}
	for i := 1; i < n; i++ {
		other, err := newClients(c)
		if err != nil {
			return Result{Plan: plan}, err
		}
		clients = append(clients, other)
		*owned = append(*owned, other)
	}

	// The sink and the progress are each called by one reader at a time,
	// under their own locks: a reader's progress never waits behind
	// another's sink, which may wait for the writer.
	var mu sync.Mutex
	one := func(b []record.Record) error {
		mu.Lock()
		defer mu.Unlock()
		return sink(b)
	}
	prog := &progressOf{c: c, snaps: make([]Progress, n)}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]Result, n)
	refused := new(atomic.Bool) // the readers' groups are refused alike: one warning

	readers := make([]*reader, n)
	for i := range readers {
		rc := c
		if c.Progress != nil {
			rc.Progress = func(p Progress) { prog.update(i, p) }
		}
		readers[i] = newReader(rc, clients[i], shares[i], one, started)
		readers[i].pr.groupRefused = refused
	}
	first := runEach(rctx, c, n, func(ctx context.Context, i int) error {
		var err error
		results[i], err = readers[i].run(ctx)
		return err
	})

	res := Result{Plan: plan}
	for _, r := range results {
		res.Records += r.Records
	}
	res.Plan.Partitions = append([]PartitionBounds(nil), plan.Partitions...)
	if c.Progress != nil {
		prog.mu.Lock()
		c.Progress(prog.combined(started))
		prog.mu.Unlock()
	}
	return res, first
}

// progressOf combines the readers' snapshots into the replay's.
type progressOf struct {
	mu    sync.Mutex // serializes the calls of c.Progress
	c     Config
	snaps []Progress
	last  time.Time
}

// update takes reader i's snapshot and reports the combined one at most
// every ProgressInterval.
func (p *progressOf) update(i int, s Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.snaps[i] = s
	if now := time.Now(); now.Sub(p.last) >= p.c.ProgressInterval {
		p.last = now
		p.c.Progress(p.combined(time.Time{}))
	}
}

// combined is every reader's partitions in one snapshot, sorted.
func (p *progressOf) combined(started time.Time) Progress {
	out := Progress{Topic: p.c.Topic}
	for _, s := range p.snaps {
		out.Records += s.Records
		out.Elapsed = max(out.Elapsed, s.Elapsed)
		out.Partitions = append(out.Partitions, s.Partitions...)
	}
	if !started.IsZero() {
		out.Elapsed = time.Since(started)
	}
	sort.Slice(out.Partitions, func(i, j int) bool { return out.Partitions[i].Partition < out.Partitions[j].Partition })
	return out
}
