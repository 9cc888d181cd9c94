package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kmaterialize/kmaterialize/record"
)

// A follower is the unbounded counterpart of Run: it reads a topic with
// isolation.level=read_committed from given positions (a table's
// checkpoint) and never stops at an end mark. It hands batches of records
// to its sink together with every partition's position after them, so that
// the caller can save the positions with the rows they produced. Like Run,
// it uses a fresh group.id, assigns partitions explicitly and commits
// nothing.
//
// # Where a batch ends
//
// The consumer API hides transactions: no control record, no producer id
// reaches the follower. What it can know is a stable offset: the last stable
// offset (LSO) of a partition at some moment, from a partition-EOF event
// (librdkafka raises it when a read_committed fetch at position p answers
// with LSO p, so its offset is an LSO) and from a read_committed ListOffsets
// (LSOs, asked by the refresh goroutine every Refresh). librdkafka's cached
// watermarks are the high watermark, not the LSO, and are not used.
//
// A batch ends, in each partition, only at a stable offset S that the
// follower has seen, with every record below S in it and none at or above:
// "before the first record at or above S". Why that cuts no transaction: at
// the moment the LSO was S, every transaction whose first record lies below
// S was complete (the LSO is the first offset of the oldest open
// transaction, or the high watermark when none is open). A committed
// transaction T with records on both sides of S was therefore complete
// then, with all its records written, so S was below the high watermark,
// so S was the first offset of another transaction T' still open: T' began
// inside T's records and was still open when T committed. That is the one
// way a stable cut splits a transaction, and it needs two producers.
// Aborted records are never delivered (read_committed) and cannot be split.
//
// Records read past the last stable offset seen are held (followPart.held)
// until a later stable offset covers them. FollowConfig.MaxBytes bounds what
// is held: when the held records' keys and values reach it, the batch ends
// at the positions read instead, and FollowBatch.Unstable says so. A
// partition that never idles gets no EOF (librdkafka raises one only for a
// fetch at the LSO that brings nothing, and a broker holds a fetch until a
// record comes): while records wait for a stable offset, the follower asks
// for the LSOs every StableRefresh (a read_committed ListOffsets), so a
// record written at a steady rate waits about StableRefresh, not Refresh.

// ErrCheckpointBelowLow is returned (as an *Error of kind ErrRecordsRemoved)
// when a follower's start position is below the partition's retained low:
// records the table never read were deleted, so following from there would
// silently skip them.
var ErrCheckpointBelowLow = errors.New("checkpoint below the retained low")

// FollowConfig describes one follower. Brokers, Topic, Props, Headers,
// Readers (see "Parallel followers"), Lower and Log mean what they mean
// for Run; StallTimeout bounds each metadata and
// ListOffsets request (default 30s). BatchRecords is how many records a read
// round takes before a batch is due; a batch holds fewer when records wait
// for a stable offset, and more when they then go together (at most about
// MaxBytes of them). End and Start are not used: From says where each
// partition starts and nothing ends.
// TopicConfigs and Check mean what they mean for Run, at the follower's
// start (Check sees the captured marks, the topic ID and the topic
// configuration before any partition is assigned); TopicConfigs are read
// again every ConfigRefresh and handed to Live.
type FollowConfig struct {
	Config
	// From maps a partition to its first offset to read (a checkpoint's
	// End). A partition of the topic not named (added since the
	// checkpoint) is read from its retained low. A position below the
	// retained low is ErrCheckpointBelowLow; one above the high watermark,
	// or a partition the topic does not have, is ErrBadStart.
	From map[int32]int64
	// Interval bounds how long a record read waits before it is handed to
	// the sink while records keep coming, once a stable offset covers it.
	// When the client's queue runs dry the batch is handed at once.
	// Default 200ms.
	Interval time.Duration
	// Refresh is how often the live marks (retained low, high watermark,
	// last stable offset), the partition set and the topic ID are asked
	// for. Default 1s.
	Refresh time.Duration
	// StableRefresh is how often the last stable offsets are asked for
	// while records are held for one (see "Where a batch ends"): one
	// ListOffsets request to each partition's leader. Default
	// DefaultStableRefresh.
	StableRefresh time.Duration
	// ConfigRefresh is how often TopicConfigs are read again
	// (DescribeConfigs) by the refresh goroutine, since a topic's
	// configuration can change while it is followed. Default
	// DefaultConfigRefresh; not used without TopicConfigs.
	ConfigRefresh time.Duration
	// Live, if set, is called from the follower's refresh goroutine with
	// the marks of every followed partition.
	Live func(LiveMarks)
	// MaxBytes bounds the keys and values of the records read past the
	// last stable offset seen (see "Where a batch ends"): reaching it ends
	// the batch at the positions read, inside a transaction if one is
	// being read (FollowBatch.Unstable). Default DefaultFollowMaxBytes.
	// Memory: the follower holds at most about this much, and each batch
	// it hands over is at most about this much plus BatchRecords records.
	MaxBytes int64
}

// DefaultFollowMaxBytes is FollowConfig.MaxBytes' default: 64 MiB.
const DefaultFollowMaxBytes = 64 << 20

// LiveMarks are the partitions' current marks, as ListOffsets answered
// them at At.
type LiveMarks struct {
	At    time.Time
	Low   map[int32]int64
	High  map[int32]int64 // high watermark (read_uncommitted)
	LSO   map[int32]int64 // last stable offset (read_committed)
	Error error           // the refresh failed; Low, High and LSO are nil
	// TopicID is the topic's ID as this refresh's metadata reported it
	// (zero when unknown or when the metadata request failed). A change
	// from Plan.TopicID at the start means the topic was deleted and
	// created again: the positions followed are of another log.
	TopicID TopicID
	// TopicConfig is DescribeConfigs' answer for Config.TopicConfigs when
	// this refresh read them again (every ConfigRefresh), nil otherwise.
	TopicConfig *TopicConfig
	// PartitionsOfTopic is how many partitions the topic has, as this
	// refresh's metadata reported it (0 when the metadata request
	// failed). With Config.Partitions, Low, High and LSO hold only
	// those; this counts them all, so that a shard sees its topic grow.
	PartitionsOfTopic int32
}

// DefaultStableRefresh is FollowConfig.StableRefresh's default.
const DefaultStableRefresh = 25 * time.Millisecond

// DefaultConfigRefresh is FollowConfig.ConfigRefresh's default: a topic's
// configuration (delete.retention.ms) is read again every five minutes.
const DefaultConfigRefresh = 5 * time.Minute

// FollowBatch is what a follower hands its sink: records in offset order
// within each partition, and the position (the next offset to read) of
// every followed partition after them. Transaction markers and aborted
// records move a position without a record, so a batch may have positions
// and no records. Each position is a stable offset the follower saw, or
// the partition's position in the batch before (see "Where a batch ends"),
// unless Unstable.
type FollowBatch struct {
	Records   []record.Record
	Positions map[int32]int64
	// Lows holds the retained low of partitions first read in this batch
	// (added to the topic after the follower started), which start there.
	Lows map[int32]int64
	// Bytes is the sum of the records' key and value lengths.
	Bytes int64
	// Unstable reports that FollowConfig.MaxBytes was reached before a
	// stable offset: some position is where the reading stood, possibly
	// inside a transaction.
	Unstable bool
	// TopicID is the topic's ID as metadata reported it after the
	// batch's records were fetched (zero: unknown). One other than the
	// start's (Plan.TopicID) means the topic was deleted and created
	// again: the batch may hold the new topic's records, and must not be
	// applied.
	TopicID TopicID
	// Held counts the read rounds since the last batch that would have
	// ended one (records BatchRecords, the client's queue drained, the
	// Interval passed) but ended with records held past the last stable
	// offset seen: the batch boundaries a transaction being read did not
	// get.
	Held int64
}

// FollowSink receives a follower's batches. An error stops the follower and
// is returned by Tail as is.
type FollowSink func(FollowBatch) error

// Tail reads c.Topic from c.From until ctx ends (then it returns nil) or
// an error: Check's refusal at the start, a sink error, records deleted
// under a position (ErrRecordsRemoved), the topic deleted, a fatal client
// error. Transient broker errors are retried by the client for as long as
// they last; the live marks say how far behind the follower is meanwhile.
func Tail(ctx context.Context, c FollowConfig, sink FollowSink) error {
	base := c.Config.withDefaults()
	if base.Readers > 1 {
		// As Run's readers: the prefetch queue divided among them.
		base = base.shared()
	}
	c.Config = base.followDefaults()
	if c.Interval <= 0 {
		c.Interval = 200 * time.Millisecond
	}
	if c.Refresh <= 0 {
		c.Refresh = time.Second
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultFollowMaxBytes
	}
	if c.ConfigRefresh <= 0 {
		c.ConfigRefresh = DefaultConfigRefresh
	}
	if c.StableRefresh <= 0 {
		c.StableRefresh = DefaultStableRefresh
	}
	cl, err := newClients(c.Config)
	if err != nil {
		return err
	}
	owned := []*clients{cl} // and the other readers', closed together
	defer func() { closeClients(owned, false) }()
	plan, err := capture(ctx, cl, c.Config)
	if err != nil {
		return err
	}
	// The ID is read again after the marks: a topic recreated between
	// capture's metadata and its ListOffsets has the old ID and the new
	// log's marks (a checkpoint then past a high watermark of 0), and is
	// named by Check as recreated, with the ID its marks are of.
	if _, id, err := describeTopic(ctx, cl.admin, c.Topic, min(c.StallTimeout, 5*time.Second)); err == nil && !id.IsZero() {
		plan.TopicID = id
	}
	if c.Check != nil {
		// Before anything is assigned: a checkpoint the topic no longer
		// continues is refused before a record is read.
		if err := c.Check(plan); err != nil {
			return err
		}
	}
	if err := checkFrom(c.Topic, c.From, plan); err != nil {
		return err
	}
	t := &tail{c: c, added: make(chan []PartitionBounds, 1), sink: sink}
	n := max(min(c.Readers, len(plan.Partitions)), 1)
	shares := deal(plan, n)
	refused := new(atomic.Bool) // the readers' groups are refused alike: one warning
	for i := 0; i < n; i++ {
		fc := c
		fc.MaxBytes = max(c.MaxBytes/int64(n), 1)
		fcl := cl
		if i > 0 {
			if fcl, err = newClients(fc.Config); err != nil {
				return err
			}
			owned = append(owned, fcl)
		}
		f := &follower{c: fc, cl: fcl, t: t, parts: map[int32]*followPart{}}
		followersMade.Add(1)
		if i == 0 {
			// Partitions added to the topic go to the first reader.
			f.added = t.added
		}
		f.pr = &partReader{c: fc.Config, cl: fcl, d: f, op: "follow", logPrefix: "follow: ", lowsTimeout: f.timeout(), groupRefused: refused}
		if f.bq = f.pr.openBatches(); f.bq != nil {
			defer f.bq.close()
		}
		if err := f.assign(shares[i]); err != nil {
			return err
		}
		t.fs = append(t.fs, f)
	}
	if n > 1 {
		t.positions = make(map[int32]int64, len(plan.Partitions))
		for _, f := range t.fs {
			for p, st := range f.parts {
				t.positions[p] = st.out
			}
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		t.refresh(rctx)
	}()
	go func() {
		defer wg.Done()
		t.pollStable(rctx)
	}()
	err = t.run(rctx)
	cancel()
	wg.Wait()
	if ctx.Err() != nil && (err == nil || errors.Is(err, ctx.Err())) {
		return nil
	}
	return err
}

// Parallel followers.
//
// With Config.Readers N, a follower's partitions are dealt round robin to
// N readers at the start, as Run deals a replay's (parallel.go): each its
// own consumer, batch queue and read loop (a follower), holding its own
// partitions' records and cutting its own batches by the rules of "Where
// a batch ends", which are a partition's own. The prefetch queue and
// MaxBytes are divided among them, so that N readers hold what one does.
// What concerns the topic stays one: the refresh (live marks, partitions
// added, the topic's configuration) and the stable-offset poll run once
// for all, on the first reader's admin client; the first reader reads the
// partitions added to the topic. The sink is called by one reader at a
// time, and each batch's Positions name every followed partition: the
// reader's own after its records, every other's as the last batch handed
// over left it (those records were handed over before). The first error
// stops the others and is the follower's.

// followersMade counts the followers' readers made in this process, for
// the tests to tell how many read.
var followersMade atomic.Int64

// tail is what a follower's readers share.
type tail struct {
	c  FollowConfig
	fs []*follower
	// known holds every partition followed or handed to the first
	// reader to add (partition -> true), read by the refresh.
	known sync.Map
	// added carries partitions the refresh found that are not followed
	// yet, from the refresh goroutine to the first reader's loop.
	added chan []PartitionBounds

	sinkMu sync.Mutex
	sink   FollowSink
	// positions is every partition's position as the batches handed over
	// left it (nil with one reader, whose batches name all); guarded by
	// sinkMu.
	positions map[int32]int64
}

// run runs the readers' loops, the first on the caller's goroutine (at the
// caller's CPU priority, which a daemon lowers: Config.Lower runs the
// others at it too), until ctx ends (nil) or the first error.
func (t *tail) run(ctx context.Context) error {
	return runEach(ctx, t.c.Config, len(t.fs), func(ctx context.Context, i int) error {
		return t.fs[i].loop(ctx, t.deliver)
	})
}

// deliver hands b to the sink, one reader at a time, with the positions of
// every followed partition.
func (t *tail) deliver(b FollowBatch) error {
	t.sinkMu.Lock()
	defer t.sinkMu.Unlock()
	if t.positions != nil {
		for p, pos := range b.Positions {
			t.positions[p] = pos
		}
		b.Positions = maps.Clone(t.positions)
	}
	return t.sink(b)
}

// noteLSOs hands every reader last stable offsets read (each takes its
// own partitions').
func (t *tail) noteLSOs(lsos map[int32]int64) {
	for _, f := range t.fs {
		f.noteLSOs(lsos)
	}
}

// waiting reports whether some reader holds records for a stable offset.
func (t *tail) waiting() bool {
	for _, f := range t.fs {
		if f.waiting.Load() {
			return true
		}
	}
	return false
}

// followPart is one followed partition, owned by the read loop.
type followPart struct {
	partition int32
	pos       int64 // the next offset to read
	newLow    int64 // the low it started at when it was added; -1 otherwise
	// out is the position last handed to the sink (at the start: where
	// reading starts): records below it were delivered.
	out int64
	// held are the records read and not delivered, offsets in [out, pos),
	// in offset order; heldBytes their keys' and values' lengths.
	held      []record.Record
	heldBytes int64
	// owned is how many of the first held records have bytes of their
	// own (own), not slices of a batch's arena.
	owned int
	// stable are the stable offsets seen above out, ascending.
	stable []int64
}

// start sets the partition's position before anything is read.
func (st *followPart) start(pos int64) { st.pos, st.out = pos, pos }

// noteStable records off as a stable offset seen (an LSO at some moment).
// One at or below out can no longer be a cut.
func (st *followPart) noteStable(off int64) {
	if off <= st.out {
		return
	}
	i, found := slices.BinarySearch(st.stable, off)
	if !found {
		st.stable = slices.Insert(st.stable, i, off)
	}
}

// read takes a record at the position.
func (st *followPart) read(r record.Record) {
	st.held = append(st.held, r)
	st.heldBytes += int64(len(r.Key) + len(r.Value))
	st.pos = r.Offset + 1
}

// own copies the bytes of the held records that still point into a batch's
// arena (batch.go) into one allocation of the partition's own, so that
// what stays held pins no arena: an arena holds every partition's records
// of its batch, and one record held for an open transaction would keep
// alive the bytes of all the others, delivered long ago. Each record is
// copied at most once, after a cut that handed records over (before one,
// every record of the arenas read since the last is held).
func (st *followPart) own() {
	rest := st.held[st.owned:]
	if len(rest) == 0 {
		return
	}
	size := 0
	for _, r := range rest {
		size += len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			size += len(h.Key) + len(h.Value)
		}
	}
	buf := make([]byte, 0, size)
	keep := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		at := len(buf)
		buf = append(buf, b...)
		return buf[at:len(buf):len(buf)]
	}
	for i := range rest {
		r := &rest[i]
		r.Key, r.Value = keep(r.Key), keep(r.Value)
		if len(r.Headers) > 0 {
			hs := make([]record.Header, len(r.Headers))
			for j, h := range r.Headers {
				k := keep([]byte(h.Key))
				hs[j] = record.Header{Key: unsafe.String(unsafe.SliceData(k), len(k)), Value: keep(h.Value)}
			}
			r.Headers = hs
		}
	}
	st.owned = len(st.held)
}

// cut is where a batch may end in this partition now: the largest stable
// offset seen that the position has reached, if it is above out.
func (st *followPart) cut() (int64, bool) {
	i, _ := slices.BinarySearch(st.stable, st.pos+1)
	if i == 0 {
		return 0, false
	}
	return st.stable[i-1], true
}

// below is how many held records lie below offset at.
func (st *followPart) below(at int64) int {
	n, _ := slices.BinarySearchFunc(st.held, at, func(r record.Record, off int64) int { return cmp.Compare(r.Offset, off) })
	return n
}

// take appends the held records below at to into, moves out there, and
// keeps the rest in the same array: the records are copied into the
// batch, so no slice of the array outlives the call, and reading a
// partition appends to an array that stops growing once it holds a
// round's records.
func (st *followPart) take(at int64, into []record.Record) []record.Record {
	n := st.below(at)
	for _, r := range st.held[:n] {
		st.heldBytes -= int64(len(r.Key) + len(r.Value))
	}
	into = append(into, st.held[:n]...)
	m := copy(st.held, st.held[n:])
	// What was moved or handed over must not pin its arena from here.
	clear(st.held[m:])
	st.held = st.held[:m]
	st.owned = max(st.owned-n, 0)
	st.out = at
	i, _ := slices.BinarySearch(st.stable, at+1)
	st.stable = slices.Delete(st.stable, 0, i)
	if len(st.stable) == 0 {
		st.stable = nil
	}
	return into
}

// follower is one reader of a follower's partitions (see "Parallel
// followers"): its consumer, its partitions' records held, its batches.
type follower struct {
	c     FollowConfig
	cl    *clients
	t     *tail
	parts map[int32]*followPart
	// added is the tail's for the first reader (the partitions added to
	// the topic it reads), nil for the others.
	added chan []PartitionBounds
	// lsos are the last stable offsets the refresh read, for the loop to
	// take (nil once taken).
	lsoMu sync.Mutex
	lsos  map[int32]int64
	// waiting is set by the loop while records are held for a stable
	// offset: pollStable asks for the LSOs then.
	waiting atomic.Bool
	// pr reads the partitions for the loop: their records, EOFs and
	// client errors (partreader.go); the follower is its driver.
	pr *partReader
	// bq is the queue the partitions are read from in batches (batch.go);
	// nil: one message a Poll.
	bq *batchQueue
}

// checkFrom checks the start positions from against the captured marks of
// every partition of plan.
func checkFrom(topic string, from map[int32]int64, plan Plan) error {
	have := map[int32]PartitionBounds{}
	for _, pb := range plan.Partitions {
		have[pb.Partition] = pb
	}
	for _, p := range slices.Sorted(maps.Keys(from)) {
		off := from[p]
		pb, ok := have[p]
		switch {
		case !ok:
			return &Error{Op: "follow", Topic: topic, Partition: p, Offset: off, Kind: ErrBadStart,
				Detail: fmt.Sprintf("the checkpoint names partition %d, which topic %q does not have (was it deleted and created again?); rebuild the table", p, topic)}
		case off < pb.Low:
			return &Error{Op: "follow", Topic: topic, Partition: p, Offset: off, Kind: ErrRecordsRemoved, Reason: ErrCheckpointBelowLow,
				Detail: fmt.Sprintf("the checkpoint of partition %d is at %d, below the retained low %d: records %d..%d were deleted before the table read them; rebuild the table",
					p, off, pb.Low, off, pb.Low-1)}
		case off > pb.High:
			return &Error{Op: "follow", Topic: topic, Partition: p, Offset: off, Kind: ErrBadStart,
				Detail: fmt.Sprintf("the checkpoint of partition %d is at %d, above the high watermark %d (was the topic deleted and created again?); rebuild the table", p, off, pb.High)}
		}
	}
	return nil
}

// assign assigns every partition of plan (the reader's share, its start
// positions checked by checkFrom).
func (f *follower) assign(plan Plan) error {
	topic := f.c.Topic
	var tps []kafka.TopicPartition
	for _, pb := range plan.Partitions {
		st := &followPart{partition: pb.Partition, newLow: -1}
		if off, ok := f.c.From[pb.Partition]; ok {
			st.start(off)
		} else {
			st.start(pb.Low)
			st.newLow = pb.Low
		}
		f.parts[pb.Partition] = st
		f.t.known.Store(pb.Partition, true)
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: pb.Partition, Offset: kafka.Offset(st.pos)})
	}
	if err := f.forward(tps); err != nil {
		return err
	}
	if err := f.cl.consumer.Assign(tps); err != nil {
		return wrapErr("assign", topic, -1, -1, err)
	}
	return nil
}

// forward forwards the partitions' fetch queues to the batch queue before
// they are assigned (batchQueue.forward).
func (f *follower) forward(tps []kafka.TopicPartition) error {
	if f.bq == nil {
		return nil
	}
	parts := make([]int32, len(tps))
	for i, tp := range tps {
		parts[i] = tp.Partition
	}
	if err := f.bq.forward(parts); err != nil {
		return wrapErr("assign", f.c.Topic, -1, -1, err)
	}
	return nil
}

// refresh asks for the live marks and the partition set every Refresh,
// until ctx ends, on the first reader's admin client.
func (t *tail) refresh(ctx context.Context) {
	f := t.fs[0]
	tick := time.NewTicker(f.c.Refresh)
	defer tick.Stop()
	timeout := min(f.c.StallTimeout, 5*time.Second)
	// The configuration was read by capture at the start.
	configRead := time.Now()
	for {
		marks, parts := readLive(ctx, f.cl.admin, f.c.Topic, f.c.Partitions, timeout)
		if len(f.c.TopicConfigs) > 0 && time.Since(configRead) >= f.c.ConfigRefresh {
			marks.TopicConfig = describeTopicConfig(ctx, f.cl.admin, f.c.Topic, f.c.TopicConfigs, timeout)
			configRead = time.Now()
		}
		err := marks.Error
		if err == nil {
			t.noteLSOs(marks.LSO)
			var added []PartitionBounds
			for _, p := range parts {
				if _, ok := t.known.Load(p.Partition); !ok {
					p.Low, p.High = marks.Low[p.Partition], marks.High[p.Partition]
					added = append(added, p)
				}
			}
			if len(added) > 0 {
				select {
				case t.added <- added:
					for _, p := range added {
						t.known.Store(p.Partition, true)
					}
				default: // the loop has not taken the last ones yet; next time
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			f.c.Log.Debug().Err(err).Str("topic", f.c.Topic).Msg("follow: live marks not refreshed")
		}
		if f.c.Live != nil {
			f.c.Live(marks)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// readLive asks for topic's partitions, topic ID and live marks (retained
// low, high watermark, last stable offset): of the partitions in keep, or
// of all when keep is nil (the partitions returned are those too). On
// failure marks.Error says why and its maps are nil.
func readLive(ctx context.Context, admin *kafka.AdminClient, topic string, keep []int32, timeout time.Duration) (LiveMarks, []PartitionBounds) {
	parts, id, err := describeTopic(ctx, admin, topic, timeout)
	marks := LiveMarks{At: time.Now(), TopicID: id}
	var lows, highs, lsos map[int32]int64
	if err == nil {
		marks.PartitionsOfTopic = int32(len(parts))
		if keep != nil {
			parts = slices.DeleteFunc(parts, func(pb PartitionBounds) bool { return !slices.Contains(keep, pb.Partition) })
		}
		plan := Plan{Topic: topic, Partitions: parts}
		lows, err = listOffsets(ctx, admin, topic, timeout, plan, kafka.EarliestOffsetSpec, kafka.IsolationLevelReadUncommitted)
		if err == nil {
			highs, err = listOffsets(ctx, admin, topic, timeout, plan, kafka.LatestOffsetSpec, kafka.IsolationLevelReadUncommitted)
		}
		if err == nil {
			lsos, err = LSOs(ctx, admin, plan, timeout)
		}
	}
	if err != nil {
		marks.Error = err
		return marks, parts
	}
	marks.Low, marks.High, marks.LSO = lows, highs, lsos
	return marks, parts
}

// WatchLive asks for c.Topic's live marks every refresh (default 1s), as a
// follower's refresh does, and hands each answer (a failed one with its
// Error) to live, until ctx ends; it returns nil then, or the error of
// creating its client. It reads no record and assigns no partition: it
// is what keeps a paused follower's lag current (a followed table's
// rebuild stops its follower for the catch-up and the publish). c's
// Brokers, Props and Log are used; StallTimeout bounds each request (at
// most 5s, as the follower's refresh).
func WatchLive(ctx context.Context, c Config, refresh time.Duration, live func(LiveMarks)) error {
	c = c.withDefaults()
	if refresh <= 0 {
		refresh = time.Second
	}
	cl, err := newClients(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	timeout := min(c.StallTimeout, 5*time.Second)
	t := time.NewTicker(refresh)
	defer t.Stop()
	for {
		marks, _ := readLive(ctx, cl.admin, c.Topic, c.Partitions, timeout)
		if ctx.Err() != nil {
			return nil
		}
		live(marks)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// loop polls until ctx ends or an error, handing batches to sink. A read
// round polls up to BatchRecords events; a batch is due after a round that
// drained the client's queue, read BatchRecords records, or came
// Interval after the oldest change not handed over, and goes only as far as
// stable offsets allow (cut).
func (f *follower) loop(ctx context.Context, sink FollowSink) error {
	lows := map[int32]int64{}
	dirty := false      // something read or moved that the sink has not seen
	var since time.Time // when dirty became true
	var held int64      // due rounds that ended with records held
	changed := func() {
		if !dirty {
			dirty, since = true, time.Now()
		}
	}
	// New partitions start with their position at the low, which the sink
	// must see (and save) even before they hold a record.
	for p, st := range f.parts {
		if st.newLow >= 0 {
			lows[p] = st.newLow
			changed()
		}
	}
	for {
		if ctx.Err() != nil {
			return nil
		}
		select {
		case added := <-f.added:
			if err := f.addPartitions(added, lows); err != nil {
				return err
			}
			changed()
		default:
		}
		f.takeLSOs()
		// Polling without waiting drains the queue before a batch goes;
		// with nothing to hand over yet, the poll waits (no busy loop
		// while records are held for a stable offset).
		timeout := 100
		if len(lows) > 0 || f.cuttable() {
			timeout = 0
		}
		// The round ends, too, when what is held reaches the byte
		// budget: it must not overshoot by a round's records.
		drained, n := false, 0
		_, heldBytes := f.holding()
		for n < f.c.BatchRecords && heldBytes < f.c.MaxBytes && f.bq != nil {
			moved, err := f.pr.serveEvents(ctx)
			if err != nil {
				return err
			}
			br, err := f.pr.readBatch(ctx, f.bq, timeout, f.c.BatchRecords-n, f.c.MaxBytes-heldBytes)
			timeout = 0
			if err != nil {
				return err
			}
			n += br.records
			heldBytes += br.bytes
			if moved || br.moved {
				changed()
			}
			if br.messages == 0 {
				drained = true
				break
			}
		}
		for n < f.c.BatchRecords && heldBytes < f.c.MaxBytes && f.bq == nil {
			ev := f.cl.consumer.Poll(timeout)
			timeout = 0
			if ev == nil {
				drained = true
				break
			}
			moved, rec, err := f.pr.handle(ctx, ev)
			if err != nil {
				return err
			}
			if rec != nil {
				n++
				heldBytes += int64(len(rec.Key) + len(rec.Value))
			}
			if moved {
				changed()
			}
		}
		if !dirty {
			continue
		}
		if !drained && n < f.c.BatchRecords && time.Since(since) < f.c.Interval && heldBytes < f.c.MaxBytes {
			continue
		}
		b, ok := f.cut(heldBytes >= f.c.MaxBytes)
		if f.bq != nil && len(b.Records) > 0 {
			// Only a cut hands over records while others of their
			// batch's arena stay held: until one does, an arena's
			// records are all held and pin nothing delivered, so a
			// follower catching up (every record held until an
			// unstable cut takes them all) copies nothing.
			for _, st := range f.parts {
				st.own()
			}
		}
		if len(lows) > 0 {
			b.Lows, lows, ok = lows, map[int32]int64{}, true
		}
		left, _ := f.holding()
		f.waiting.Store(left > 0)
		if left > 0 {
			// A batch was due and records stay behind: a boundary
			// the reading did not get.
			held++
		}
		if !ok {
			continue
		}
		b.Held, held = held, 0
		if dirty = left > 0; dirty {
			since = time.Now()
		}
		// The records were fetched by name, and a topic deleted and
		// created again under it (KIP-516: another topic ID) is fetched
		// from at the same positions before the next refresh notices:
		// the client names no topic ID per record. So the ID is read
		// again after the fetch and before the sink applies anything
		// (one metadata request a batch): a record of a new topic was
		// fetched only if this read sees another ID, or none.
		parts, id, err := describeTopic(ctx, f.cl.admin, f.c.Topic, f.timeout())
		if err != nil && len(parts) == 0 {
			return err
		}
		b.TopicID = id
		if err := sink(b); err != nil {
			return err
		}
	}
}

// timeout bounds the follower's own metadata requests, as the refresh's.
func (f *follower) timeout() time.Duration { return min(f.c.StallTimeout, 5*time.Second) }

// noteLSOs hands the loop last stable offsets read (by the refresh or
// pollStable), keeping the larger of two not taken yet.
func (f *follower) noteLSOs(lsos map[int32]int64) {
	f.lsoMu.Lock()
	defer f.lsoMu.Unlock()
	if f.lsos == nil {
		f.lsos = make(map[int32]int64, len(lsos))
	}
	for p, off := range lsos {
		if cur, ok := f.lsos[p]; !ok || off > cur {
			f.lsos[p] = off
		}
	}
}

// pollStable asks for the followed partitions' last stable offsets every
// StableRefresh while the loop holds records for one, until ctx ends. A
// failed request is left to the refresh, which reports its errors.
func (t *tail) pollStable(ctx context.Context) {
	tick := time.NewTicker(t.c.StableRefresh)
	defer tick.Stop()
	timeout := min(t.c.StallTimeout, 5*time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !t.waiting() {
			continue
		}
		plan := Plan{Topic: t.c.Topic}
		t.known.Range(func(k, _ any) bool {
			plan.Partitions = append(plan.Partitions, PartitionBounds{Partition: k.(int32)})
			return true
		})
		if lsos, err := LSOs(ctx, t.fs[0].cl.admin, plan, timeout); err == nil {
			t.noteLSOs(lsos)
		}
	}
}

// takeLSOs notes the last stable offsets the refresh read.
func (f *follower) takeLSOs() {
	f.lsoMu.Lock()
	lsos := f.lsos
	f.lsos = nil
	f.lsoMu.Unlock()
	for p, off := range lsos {
		if st := f.parts[p]; st != nil {
			st.noteStable(off)
		}
	}
}

// cuttable reports whether some partition may end a batch above where the
// last one ended.
func (f *follower) cuttable() bool {
	for _, st := range f.parts {
		if at, ok := st.cut(); ok && at > st.out {
			return true
		}
	}
	return false
}

// holding is how many records are held, and their keys' and values'
// lengths.
func (f *follower) holding() (records int, bytes int64) {
	for _, st := range f.parts {
		records += len(st.held)
		bytes += st.heldBytes
	}
	return records, bytes
}

// cut builds the next batch: every partition ends at its cut (see "Where a
// batch ends"), or stays where the last batch left it. If what stays held
// is still at the byte budget (over is the budget reached before), every
// partition ends at its position instead and the batch is Unstable. ok is
// false when the batch would change nothing.
func (f *follower) cut(over bool) (b FollowBatch, ok bool) {
	ends := make(map[int32]int64, len(f.parts))
	n := 0 // records the batch takes
	var left int64
	for p, st := range f.parts {
		ends[p] = st.out
		at, found := st.cut()
		if !found || at <= st.out {
			left += st.heldBytes
			continue
		}
		ends[p], ok = at, true
		i := st.below(at)
		n += i
		for _, r := range st.held[i:] {
			left += int64(len(r.Key) + len(r.Value))
		}
	}
	if over && left >= f.c.MaxBytes {
		b.Unstable, n = true, 0
		for p, st := range f.parts {
			ends[p] = st.pos
			n += len(st.held)
			ok = ok || st.pos > st.out
		}
	}
	if !ok {
		return b, false
	}
	b.Records = make([]record.Record, 0, n)
	b.Positions = make(map[int32]int64, len(f.parts))
	for p, st := range f.parts {
		if ends[p] > st.out {
			from := len(b.Records)
			b.Records = st.take(ends[p], b.Records)
			for _, r := range b.Records[from:] {
				b.Bytes += int64(len(r.Key) + len(r.Value))
			}
		}
		b.Positions[p] = st.out
	}
	return b, true
}

// addPartitions assigns partitions found since the start, from their low.
func (f *follower) addPartitions(added []PartitionBounds, lows map[int32]int64) error {
	topic := f.c.Topic
	var tps []kafka.TopicPartition
	for _, pb := range added {
		if _, ok := f.parts[pb.Partition]; ok {
			continue
		}
		st := &followPart{partition: pb.Partition, newLow: pb.Low}
		st.start(pb.Low)
		f.parts[pb.Partition] = st
		lows[pb.Partition] = pb.Low
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: pb.Partition, Offset: kafka.Offset(pb.Low)})
		f.c.Log.Info().Str("topic", topic).Int32("partition", pb.Partition).Int64("low", pb.Low).
			Msg("follow: a partition was added to the topic; reading it from its retained low")
	}
	if len(tps) == 0 {
		return nil
	}
	if err := f.forward(tps); err != nil {
		return err
	}
	if err := f.cl.consumer.IncrementalAssign(tps); err != nil {
		return wrapErr("assign", topic, -1, -1, err)
	}
	return nil
}

// position is the partReader's driver's: every partition assigned is
// read.
func (f *follower) position(p int32) (int64, bool) {
	st := f.parts[p]
	if st == nil {
		return 0, false
	}
	return st.pos, true
}

// record holds a record read by its partition.
func (f *follower) record(r record.Record) (bool, error) {
	f.parts[r.Partition].read(r)
	return true, nil
}

// eof notes off as a stable offset: a read_committed fetch at off answered
// with it as the LSO (see "Where a batch ends").
func (f *follower) eof(p int32, off int64) (moved bool, err error) {
	st := f.parts[p]
	if off > st.pos {
		// Control records and aborted transactions advance the
		// position without delivering a record.
		st.pos = off
		moved = true
	}
	st.noteStable(off)
	return moved, nil
}

func (f *follower) lowsPlan() Plan {
	plan := Plan{Topic: f.c.Topic}
	for p := range f.parts {
		plan.Partitions = append(plan.Partitions, PartitionBounds{Partition: p})
	}
	return plan
}

func (f *follower) reading() []int32 {
	ps := make([]int32, 0, len(f.parts))
	for p := range f.parts {
		ps = append(ps, p)
	}
	return ps
}

func (f *follower) removed(p int32, pos, low int64, err error) *Error {
	return &Error{Op: "follow", Topic: f.c.Topic, Partition: p, Offset: pos, Kind: ErrRecordsRemoved, Reason: ErrCheckpointBelowLow, Err: err,
		Detail: fmt.Sprintf("records removed under the follower: position %d but the retained low is now %d; rebuild the table", pos, low)}
}

func (f *follower) outOfRange(p int32, err error) *Error {
	return &Error{Op: "follow", Topic: f.c.Topic, Partition: p, Offset: -1, Kind: ErrRecordsRemoved, Err: err,
		Detail: "fetch offset out of range (records removed under the follower); rebuild the table"}
}

func (f *follower) deleted(cause error) *Error {
	return &Error{Op: "follow", Topic: f.c.Topic, Partition: -1, Offset: -1, Kind: ErrTopicNotFound, Reason: ErrTopicDeleted, Err: cause,
		Detail: fmt.Sprintf("topic deleted: %q was deleted while the table followed it", f.c.Topic)}
}
