package materialize

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/internal/failpoint"
	"github.com/kmaterialize/kmaterialize/replay"
)

// catchUp reads on, into the rebuild's generation (sink), from each
// partition's end in res up to the positions opts.CatchUp returns, and
// returns res with the plan's ends moved there: partitions the rebuild did
// not capture (added since) are read from their low. A position at or
// below the rebuild's end reads nothing (the rebuild is ahead there).
//
// The read continues the rebuild's own end positions, so it passes the
// continuation check (checkContinues, as OpCatchUp) with those positions,
// the rebuild's topic ID and capture time: a topic recreated during the
// rebuild, records deleted above the rebuild's end before the catch-up
// read them (a start below the retained low is refused, never clamped to
// it), or a compacted topic's delete.retention.ms passed since the capture
// fail it with a *StaleCheckpointError, and nothing is published.
func catchUp(ctx context.Context, opts Options, res replay.Result, sink replay.Sink) (replay.Result, error) {
	targets, err := opts.CatchUp(ctx)
	if err != nil {
		return res, fmt.Errorf("catch up with the follower: %w", err)
	}
	failpoint.Hit(failpoint.CatchUpPaused) // a crash here leaves the old table and its checkpoint; the next open removes the unpublished generation
	ends := res.Positions()
	start := map[int32]int64{}
	until := map[int32]int64{}
	for p, pos := range targets {
		end, ok := ends[p]
		if ok && pos <= end {
			continue
		}
		if ok {
			start[p] = end
		}
		until[p] = pos
	}
	if len(until) == 0 {
		return res, nil
	}
	c := opts.Replay
	c.Start = replay.Start{Offsets: start}
	c.Stop = until
	c.Progress = nil
	c.CloseBehind = false
	from := checkpoint.Checkpoint{Topic: res.Plan.Topic, CapturedAt: res.Plan.CapturedAt, TopicID: res.Plan.TopicID}
	for p, off := range start {
		from.Partitions = append(from.Partitions, checkpoint.Partition{Partition: p, High: off, End: off})
	}
	c.TopicConfigs = []string{configCleanupPolicy, configDeleteRetention}
	c.Check = func(plan replay.Plan) error { return checkContinues(OpCatchUp, opts.Table, from, plan, time.Now()) }
	more, err := replay.Run(ctx, c, sink)
	if err != nil {
		return res, fmt.Errorf("catch up with the follower: %w", err)
	}
	out := res
	out.Records += more.Records
	out.Plan.Partitions = slices.Clone(res.Plan.Partitions)
	idx := map[int32]int{}
	for i, p := range out.Plan.Partitions {
		idx[p.Partition] = i
	}
	for _, pb := range more.Plan.Partitions {
		if _, ok := until[pb.Partition]; !ok {
			continue
		}
		i, ok := idx[pb.Partition]
		if !ok {
			out.Plan.Partitions = append(out.Plan.Partitions, pb)
			continue
		}
		p := &out.Plan.Partitions[i]
		p.End = pb.End
		p.High = max(p.High, pb.End)
	}
	slices.SortFunc(out.Plan.Partitions, func(a, b replay.PartitionBounds) int { return int(a.Partition) - int(b.Partition) })
	opts.Log.Info().Str("table", opts.Table).Interface("until", until).Int64("records", more.Records).
		Msg("caught up with the follower before publishing")
	return out, nil
}
