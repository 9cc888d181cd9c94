package copier

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kmaterialize/kmaterialize/replay"
)

// End detection. A bounded copy is done when the group's committed offsets
// (or, with Abort, this copier's positions) reached the source's end
// offsets captured at start, on every partition, whoever owns it.

// caughtUp reports whether a bounded copy has read every assigned partition
// to its end offset: the open transaction need not wait for more.
func (r *copyRun) caughtUp() bool {
	if r.ends == nil || len(r.parts) == 0 {
		return false
	}
	for id, p := range r.parts {
		if p.pos < r.ends[id] {
			return false
		}
	}
	return true
}

// positionsAhead reports whether a partition's position passed the group's
// committed offset without records (control records at its end).
func (r *copyRun) positionsAhead() bool {
	for _, p := range r.parts {
		if p.ahead() {
			return true
		}
	}
	return false
}

// reachedEnd reports whether the group's committed offsets (or, with
// Abort, this copier's positions) reached the end offsets captured at start
// on every source partition, whoever owns them. It fails the copy after
// StallTimeout without progress.
func (r *copyRun) reachedEnd(ctx context.Context) (bool, error) {
	if r.ends == nil {
		return false, nil
	}
	have := map[int32]int64{}
	if r.c.Abort {
		for id, p := range r.parts {
			if p.pos >= 0 {
				have[id] = p.pos
			}
		}
	} else {
		var tps []kafka.TopicPartition
		for p := range r.ends {
			tps = append(tps, kafka.TopicPartition{Topic: &r.c.From, Partition: p})
		}
		got, err := r.cons.Committed(tps, 5000)
		if err != nil {
			r.log.Debug().Err(err).Msg("read committed offsets")
			return false, nil
		}
		for _, tp := range got {
			if tp.Offset >= 0 {
				have[tp.Partition] = int64(tp.Offset)
			}
		}
	}
	var behind []int32
	for _, pb := range r.src.Partitions {
		end := r.ends[pb.Partition]
		h, ok := have[pb.Partition]
		if (ok && h >= end) || (!ok && end <= pb.Low) {
			continue
		}
		behind = append(behind, pb.Partition)
	}
	if len(behind) == 0 {
		return true, nil
	}
	if time.Since(r.progress) <= r.c.StallTimeout {
		return false, nil
	}
	lsos, _ := replay.LSOs(ctx, r.adm, r.src, r.c.StallTimeout)
	var parts []string
	for _, p := range behind {
		s := fmt.Sprintf("partition %d committed %s of end %d", p, offsetText(have, p), r.ends[p])
		if lso, ok := lsos[p]; ok && lso >= 0 && lso < r.ends[p] {
			s += fmt.Sprintf(" (an open transaction holds the last stable offset at %d)", lso)
		}
		parts = append(parts, s)
	}
	return false, fmt.Errorf("%w: no progress for %s: %s", ErrStalled, r.c.StallTimeout, strings.Join(parts, "; "))
}

func offsetText(m map[int32]int64, p int32) string {
	if v, ok := m[p]; ok {
		return fmt.Sprint(v)
	}
	return "none"
}

// stopOnSignal finishes the open transaction (commit, or abort with Abort)
// after a signal.
func (r *copyRun) stopOnSignal() error {
	if err := r.endTxn(context.Background()); err != nil {
		return err
	}
	if r.c.Follow {
		return nil
	}
	return ErrInterrupted
}
