package replay

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kmaterialize/kmaterialize/fold"
)

// A follower is the unbounded counterpart of Run: it reads a topic with
// isolation.level=read_committed from given positions (a table's
// checkpoint) and never stops at an end mark. It hands batches of records
// to its sink together with every partition's position after them, so that
// the caller can save the positions with the rows they produced. Like Run,
// it uses a fresh group.id, assigns partitions explicitly and commits
// nothing.

// ErrCheckpointBelowLow is returned (as an *Error of kind ErrRecordsRemoved)
// when a follower's start position is below the partition's retained low:
// records the table never read were deleted, so following from there would
// silently skip them.
var ErrCheckpointBelowLow = errors.New("checkpoint below the retained low")

// FollowConfig describes one follower. Brokers, Topic, Props, Headers,
// BatchRecords and Log mean what they mean for Run; StallTimeout bounds
// each metadata and ListOffsets request (default 30s). End and Start are
// not used: From says where each partition starts and nothing ends.
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
	// the sink while records keep coming. When the client's queue runs dry
	// the batch is handed at once. Default 200ms.
	Interval time.Duration
	// Refresh is how often the live marks (retained low, high watermark),
	// the partition set and the topic ID are asked for. Default 1s.
	Refresh time.Duration
	// ConfigRefresh is how often TopicConfigs are read again
	// (DescribeConfigs) by the refresh goroutine, since a topic's
	// configuration can change while it is followed. Default
	// DefaultConfigRefresh; not used without TopicConfigs.
	ConfigRefresh time.Duration
	// Live, if set, is called from the follower's refresh goroutine with
	// the marks of every followed partition.
	Live func(LiveMarks)
}

// LiveMarks are the partitions' current marks, as ListOffsets answered
// them at At.
type LiveMarks struct {
	At    time.Time
	Low   map[int32]int64
	High  map[int32]int64 // high watermark (read_uncommitted)
	Error error           // the refresh failed; Low and High are nil
	// TopicID is the topic's ID as this refresh's metadata reported it
	// (zero when unknown or when the metadata request failed). A change
	// from Plan.TopicID at the start means the topic was deleted and
	// created again: the positions followed are of another log.
	TopicID TopicID
	// TopicConfig is DescribeConfigs' answer for Config.TopicConfigs when
	// this refresh read them again (every ConfigRefresh), nil otherwise.
	TopicConfig *TopicConfig
}

// DefaultConfigRefresh is FollowConfig.ConfigRefresh's default: a topic's
// configuration (delete.retention.ms) is read again every five minutes.
const DefaultConfigRefresh = 5 * time.Minute

// FollowBatch is what a follower hands its sink: records in offset order
// within each partition, and the position (the next offset to read) of
// every followed partition after them. Transaction markers and aborted
// records move a position without a record, so a batch may have positions
// and no records.
type FollowBatch struct {
	Records   []fold.Record
	Positions map[int32]int64
	// Lows holds the retained low of partitions first read in this batch
	// (added to the topic after the follower started), which start there.
	Lows map[int32]int64
}

// FollowSink receives a follower's batches. An error stops the follower and
// is returned by Follow as is.
type FollowSink func(FollowBatch) error

// Follow reads c.Topic from c.From until ctx ends (then it returns nil) or
// an error: Check's refusal at the start, a sink error, records deleted
// under a position (ErrRecordsRemoved), the topic deleted, a fatal client
// error. Transient broker errors are retried by the client for as long as
// they last; the live marks say how far behind the follower is meanwhile.
func Follow(ctx context.Context, c FollowConfig, sink FollowSink) error {
	base := c.Config.withDefaults()
	c.Config = base
	if c.Interval <= 0 {
		c.Interval = 200 * time.Millisecond
	}
	if c.Refresh <= 0 {
		c.Refresh = time.Second
	}
	if c.ConfigRefresh <= 0 {
		c.ConfigRefresh = DefaultConfigRefresh
	}
	cl, err := newClients(c.Config)
	if err != nil {
		return err
	}
	defer cl.Close()
	plan, err := capture(ctx, cl, c.Config)
	if err != nil {
		return err
	}
	if c.Check != nil {
		// Before anything is assigned: a checkpoint the topic no longer
		// continues is refused before a record is read.
		if err := c.Check(plan); err != nil {
			return err
		}
	}
	f := &follower{c: c, cl: cl, parts: map[int32]*followPart{}, added: make(chan []PartitionBounds, 1)}
	if err := f.assign(plan); err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		f.refresh(rctx)
	}()
	err = f.loop(ctx, sink)
	cancel()
	wg.Wait()
	if ctx.Err() != nil && (err == nil || errors.Is(err, ctx.Err())) {
		return nil
	}
	return err
}

// followPart is one followed partition, owned by the read loop.
type followPart struct {
	partition int32
	pos       int64
	newLow    int64 // the low it started at when it was added; -1 otherwise
}

type follower struct {
	c     FollowConfig
	cl    *clients
	parts map[int32]*followPart
	// added carries partitions the refresh found that are not followed
	// yet, from the refresh goroutine to the loop.
	added chan []PartitionBounds
	known sync.Map // partition -> true, read by refresh
}

// assign checks the start positions against the captured marks and assigns
// every partition of the plan.
func (f *follower) assign(plan Plan) error {
	topic := f.c.Topic
	have := map[int32]PartitionBounds{}
	for _, pb := range plan.Partitions {
		have[pb.Partition] = pb
	}
	from := make([]int32, 0, len(f.c.From))
	for p := range f.c.From {
		from = append(from, p)
	}
	sort.Slice(from, func(i, j int) bool { return from[i] < from[j] })
	for _, p := range from {
		off := f.c.From[p]
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
	var tps []kafka.TopicPartition
	for _, pb := range plan.Partitions {
		st := &followPart{partition: pb.Partition, newLow: -1}
		if off, ok := f.c.From[pb.Partition]; ok {
			st.pos = off
		} else {
			st.pos, st.newLow = pb.Low, pb.Low
		}
		f.parts[pb.Partition] = st
		f.known.Store(pb.Partition, true)
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: pb.Partition, Offset: kafka.Offset(st.pos)})
	}
	if err := f.cl.consumer.Assign(tps); err != nil {
		return wrapErr("assign", topic, -1, -1, err)
	}
	return nil
}

// refresh asks for the live marks and the partition set every Refresh,
// until ctx ends.
func (f *follower) refresh(ctx context.Context) {
	t := time.NewTicker(f.c.Refresh)
	defer t.Stop()
	timeout := min(f.c.StallTimeout, 5*time.Second)
	// The configuration was read by capture at the start.
	configRead := time.Now()
	for {
		parts, id, err := describeTopic(ctx, f.cl.admin, f.c.Topic, timeout)
		marks := LiveMarks{At: time.Now(), TopicID: id}
		if len(f.c.TopicConfigs) > 0 && time.Since(configRead) >= f.c.ConfigRefresh {
			marks.TopicConfig = describeTopicConfig(ctx, f.cl.admin, f.c.Topic, f.c.TopicConfigs, timeout)
			configRead = time.Now()
		}
		if err == nil {
			plan := Plan{Topic: f.c.Topic, Partitions: parts}
			var lows, highs map[int32]int64
			lows, err = listOffsets(ctx, f.cl.admin, f.c.Topic, timeout, plan, kafka.EarliestOffsetSpec, kafka.IsolationLevelReadUncommitted)
			if err == nil {
				highs, err = listOffsets(ctx, f.cl.admin, f.c.Topic, timeout, plan, kafka.LatestOffsetSpec, kafka.IsolationLevelReadUncommitted)
			}
			if err == nil {
				marks.Low, marks.High = lows, highs
				var added []PartitionBounds
				for _, p := range parts {
					if _, ok := f.known.Load(p.Partition); !ok {
						p.Low, p.High = lows[p.Partition], highs[p.Partition]
						added = append(added, p)
					}
				}
				if len(added) > 0 {
					select {
					case f.added <- added:
						for _, p := range added {
							f.known.Store(p.Partition, true)
						}
					default: // the loop has not taken the last ones yet; next time
					}
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			marks.Error = err
			f.c.Log.Debug().Err(err).Str("topic", f.c.Topic).Msg("follow: live marks not refreshed")
		}
		if f.c.Live != nil {
			f.c.Live(marks)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// loop polls until ctx ends or an error, handing batches to sink.
func (f *follower) loop(ctx context.Context, sink FollowSink) error {
	var batch []fold.Record
	// A batch is handed over (the sink may keep it), so each is a new
	// slice: sized like the last one, so that a catch-up's large batches
	// do not grow by copying and a trickle's small ones stay small.
	size := 256
	lows := map[int32]int64{}
	dirty := false
	var since time.Time // when the oldest undelivered change was read
	deliver := func() error {
		if !dirty {
			return nil
		}
		b := FollowBatch{Records: batch, Positions: make(map[int32]int64, len(f.parts))}
		size = min(max(len(batch), 256), f.c.BatchRecords)
		for p, st := range f.parts {
			b.Positions[p] = st.pos
		}
		if len(lows) > 0 {
			b.Lows = lows
			lows = map[int32]int64{}
		}
		batch, dirty = nil, false
		return sink(b)
	}
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
		timeout := 100
		if dirty {
			timeout = 0
		}
		drained := false
		for i := 0; i < f.c.BatchRecords; i++ {
			ev := f.cl.consumer.Poll(timeout)
			timeout = 0
			if ev == nil {
				drained = true
				break
			}
			moved, rec, err := f.handle(ctx, ev)
			if err != nil {
				return err
			}
			if rec != nil {
				if batch == nil {
					batch = make([]fold.Record, 0, size)
				}
				batch = append(batch, *rec)
			}
			if moved {
				changed()
			}
		}
		if dirty && (drained || len(batch) >= f.c.BatchRecords || time.Since(since) >= f.c.Interval) {
			if err := deliver(); err != nil {
				return err
			}
		}
	}
}

// addPartitions assigns partitions found since the start, from their low.
func (f *follower) addPartitions(added []PartitionBounds, lows map[int32]int64) error {
	topic := f.c.Topic
	var tps []kafka.TopicPartition
	for _, pb := range added {
		if _, ok := f.parts[pb.Partition]; ok {
			continue
		}
		f.parts[pb.Partition] = &followPart{partition: pb.Partition, pos: pb.Low, newLow: pb.Low}
		lows[pb.Partition] = pb.Low
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: pb.Partition, Offset: kafka.Offset(pb.Low)})
		f.c.Log.Info().Str("topic", topic).Int32("partition", pb.Partition).Int64("low", pb.Low).
			Msg("follow: a partition was added to the topic; reading it from its retained low")
	}
	if len(tps) == 0 {
		return nil
	}
	if err := f.cl.consumer.IncrementalAssign(tps); err != nil {
		return wrapErr("assign", topic, -1, -1, err)
	}
	return nil
}

// handle applies one client event: a record (returned), a partition EOF
// (which may move the position past markers), or an error.
func (f *follower) handle(ctx context.Context, ev kafka.Event) (moved bool, rec *fold.Record, err error) {
	switch e := ev.(type) {
	case *kafka.Message:
		if e.TopicPartition.Error != nil {
			return false, nil, f.clientError(ctx, e.TopicPartition.Partition, e.TopicPartition.Error)
		}
		st := f.parts[e.TopicPartition.Partition]
		off := int64(e.TopicPartition.Offset)
		if st == nil || off < st.pos {
			return false, nil, nil
		}
		r := fold.Record{Partition: st.partition, Offset: off, Timestamp: e.Timestamp, Key: e.Key, Value: e.Value}
		if f.c.Headers && len(e.Headers) > 0 {
			r.Headers = make([]fold.Header, len(e.Headers))
			for i, h := range e.Headers {
				r.Headers[i] = fold.Header{Key: h.Key, Value: h.Value}
			}
		}
		st.pos = off + 1
		return true, &r, nil
	case kafka.PartitionEOF:
		st := f.parts[e.Partition]
		if st == nil {
			return false, nil, nil
		}
		if off := int64(e.Offset); off > st.pos {
			// Control records and aborted transactions advance the
			// position without delivering a record.
			st.pos = off
			return true, nil, nil
		}
		return false, nil, nil
	case kafka.Error:
		if e.Code() == kafka.ErrAutoOffsetReset || e.Code() == kafka.ErrOffsetOutOfRange {
			return false, nil, f.clientError(ctx, -1, e)
		}
		if e.IsFatal() {
			return false, nil, &Error{Op: "follow", Topic: f.c.Topic, Partition: -1, Offset: -1, Kind: ErrKafka, Err: e}
		}
		if classify(e) == ErrTopicNotFound {
			if _, derr := describe(ctx, f.cl.admin, f.c.Topic, min(f.c.StallTimeout, 5*time.Second)); derr != nil && errors.Is(derr, ErrTopicNotFound) {
				return false, nil, &Error{Op: "follow", Topic: f.c.Topic, Partition: -1, Offset: -1, Kind: ErrTopicNotFound, Reason: ErrTopicDeleted, Err: e,
					Detail: fmt.Sprintf("topic deleted: %q was deleted while the table followed it", f.c.Topic)}
			}
		}
		// Transient: the client retries on its own.
		f.c.Log.Debug().Err(e).Str("topic", f.c.Topic).Msg("follow: kafka client error (retrying)")
		return false, nil, nil
	}
	return false, nil, nil
}

// clientError turns an offset out of range (auto.offset.reset=error) into
// ErrRecordsRemoved naming the partition whose retained low passed its
// position.
func (f *follower) clientError(ctx context.Context, partition int32, err error) error {
	var ke kafka.Error
	if errors.As(err, &ke) && (ke.Code() == kafka.ErrAutoOffsetReset || ke.Code() == kafka.ErrOffsetOutOfRange) {
		plan := Plan{Topic: f.c.Topic}
		for p := range f.parts {
			plan.Partitions = append(plan.Partitions, PartitionBounds{Partition: p})
		}
		lows, lerr := listOffsets(ctx, f.cl.admin, f.c.Topic, min(f.c.StallTimeout, 5*time.Second), plan, kafka.EarliestOffsetSpec, kafka.IsolationLevelReadUncommitted)
		for _, st := range f.parts {
			if partition >= 0 && st.partition != partition {
				continue
			}
			if lerr == nil && lows[st.partition] > st.pos {
				return &Error{Op: "follow", Topic: f.c.Topic, Partition: st.partition, Offset: st.pos, Kind: ErrRecordsRemoved, Reason: ErrCheckpointBelowLow, Err: err,
					Detail: fmt.Sprintf("records removed under the follower: position %d but the retained low is now %d; rebuild the table", st.pos, lows[st.partition])}
			}
		}
		return &Error{Op: "follow", Topic: f.c.Topic, Partition: partition, Offset: -1, Kind: ErrRecordsRemoved, Err: err,
			Detail: "fetch offset out of range (records removed under the follower); rebuild the table"}
	}
	return wrapErr("follow", f.c.Topic, partition, -1, err)
}
