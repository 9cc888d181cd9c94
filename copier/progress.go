package copier

import (
	"maps"
	"slices"
	"time"

	"github.com/kmaterialize/kmaterialize/replay"
)

// reportProgress hands a snapshot to Config.Progress, or logs one line
// without it.
func (r *copyRun) reportProgress() {
	if r.c.Progress != nil {
		r.c.Progress(r.snapshot())
		return
	}
	pos := map[int32]int64{}
	for id, p := range r.parts {
		pos[id] = p.pos
	}
	r.log.Info().Int64("records", r.sum.Records).Int64("transactions", r.sum.Transactions).
		Interface("positions", pos).Msg("progress")
}

// snapshot is the copy's progress: each assigned source partition's
// position against its end, in partition order. Records counts the records
// committed (or, with Abort, produced and aborted) plus those of the open
// transaction.
func (r *copyRun) snapshot() replay.Progress {
	pr := replay.Progress{Topic: r.c.From, Records: r.sum.Records + r.batch, Elapsed: time.Since(r.started)}
	low := map[int32]int64{}
	for _, pb := range r.src.Partitions {
		low[pb.Partition] = pb.Low
	}
	for _, id := range slices.Sorted(maps.Keys(r.parts)) {
		p := r.parts[id]
		pp := replay.PartitionProgress{Partition: id, Start: p.first, Position: p.position(), State: replay.StateReading}
		if pp.Start < 0 {
			pp.Start = low[id]
		}
		if pp.Position < 0 {
			pp.Position = pp.Start
		}
		if r.ends != nil {
			pp.End = r.ends[id]
			if pp.Position >= pp.End {
				pp.State = replay.StateDone
			}
		} else if _, high, err := r.cons.GetWatermarkOffsets(r.c.From, id); err == nil && high >= 0 {
			// Follow: the high watermark the consumer last saw (cached,
			// no request).
			pp.End = high
		}
		pr.Partitions = append(pr.Partitions, pp)
	}
	return pr
}
