package copier

import (
	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// rebalance runs inside Poll, on the loop's goroutine. On a revocation the
// open transaction is aborted: its records were never committed, and the
// partitions' next owner starts from the group's committed offsets.
func (r *copyRun) rebalance(cons *kafka.Consumer, ev kafka.Event) error {
	// The callback assigns and unassigns itself (eager protocol). Left to
	// confluent-kafka-go v2.11.1, it would first ask for the rebalance
	// protocol, a call that can block forever when the revocation comes
	// from inside Close (confluent-kafka-go #1016, librdkafka #4041).
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		if err := cons.Assign(e.Partitions); err != nil {
			r.failed = fmt.Errorf("assign %v: %w", partitionsOf(e.Partitions), err)
			return nil
		}
		if r.closing {
			return nil
		}
		parts := make([]kafka.TopicPartition, len(e.Partitions))
		copy(parts, e.Partitions)
		committed := map[int32]int64{}
		got, err := cons.Committed(parts, int(r.c.StallTimeout/time.Millisecond))
		if err != nil {
			// Not fatal: without it, a partition's rewind target is the
			// first position this copier reads, which is where the
			// group's committed offset put the consumer.
			r.log.Warn().Err(err).Msg("could not read committed offsets of the new assignment")
		}
		for _, tp := range got {
			committed[tp.Partition] = int64(tp.Offset) // negative: none
		}
		for _, tp := range e.Partitions {
			c, ok := committed[tp.Partition]
			if !ok {
				c = -1
			}
			r.parts[tp.Partition] = newPartition(tp.Partition, c)
		}
		r.joined = true
		r.log.Info().Interface("partitions", partitionsOf(e.Partitions)).Msg("partitions assigned")
	case kafka.RevokedPartitions:
		if !r.closing {
			if r.inTxn {
				if err := r.abort(context.Background(), "partitions revoked"); err != nil {
					r.failed = err
				}
			}
			for _, tp := range e.Partitions {
				delete(r.parts, tp.Partition)
			}
			r.log.Info().Interface("partitions", partitionsOf(e.Partitions)).Msg("partitions revoked")
		}
		if err := cons.Unassign(); err != nil && !r.closing {
			r.failed = fmt.Errorf("unassign %v: %w", partitionsOf(e.Partitions), err)
		}
	}
	return nil
}

func partitionsOf(tps []kafka.TopicPartition) []int32 {
	out := make([]int32, len(tps))
	for i, tp := range tps {
		out[i] = tp.Partition
	}
	return out
}
