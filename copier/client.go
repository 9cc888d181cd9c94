package copier

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kmaterialize/kmaterialize/replay"
)

// This file owns the clients' lifecycle: their configuration, the
// producer's transactional init, and the bounded close that works around
// confluent-kafka-go's known hangs.

func (r *copyRun) open(ctx context.Context, wg *sync.WaitGroup) error {
	c := r.c
	pcfg, err := replay.ClientConfig(c.Brokers, c.Props)
	if err != nil {
		return err
	}
	for k, v := range map[string]any{
		"transactional.id":   c.TransactionalID,
		"enable.idempotence": true,
		// Errors surface from CommitTransaction (it flushes); per-message
		// delivery reports would only be a channel to drain.
		"go.delivery.reports": false,
		"linger.ms":           5,
	} {
		_ = pcfg.SetKey(k, v)
	}
	if c.Repartition {
		_ = pcfg.SetKey("partitioner", "murmur2_random")
	}
	r.p, err = kafka.NewProducer(pcfg)
	if err != nil {
		return fmt.Errorf("create producer: %w", err)
	}
	bootstrap, _ := pcfg.Get("bootstrap.servers", "")
	watch := replay.NewBootstrapWatch(fmt.Sprint(bootstrap), c.StallTimeout)
	wg.Add(2)
	go replay.ForwardLogs(r.p.Logs(), r.log, wg, watch.Observe)
	go func() { // errors not tied to a call: log them; calls report their own
		defer wg.Done()
		for ev := range r.p.Events() {
			if e, ok := ev.(kafka.Error); ok {
				r.log.Warn().Err(e).Msg("producer error")
			}
		}
	}()
	r.adm, err = kafka.NewAdminClientFromProducer(r.p)
	if err != nil {
		return fmt.Errorf("create admin client: %w", err)
	}
	// The first request: a wrong broker address fails it fast.
	wctx, stop := watch.Bind(ctx)
	r.src, err = replay.Marks(wctx, r.adm, c.From, c.StallTimeout)
	err = watch.Err(wctx, "metadata", c.From, err)
	stop()
	if err != nil {
		return err
	}
	watch.Reached()
	if r.dst, err = replay.Marks(ctx, r.adm, c.To, c.StallTimeout); err != nil {
		return err
	}
	if !c.Repartition && len(r.dst.Partitions) < len(r.src.Partitions) {
		return fmt.Errorf("%w: %s has %d partitions, %s has %d; each record keeps its partition number, so create the destination with at least %d partitions or use --repartition",
			ErrBadDestination, c.To, len(r.dst.Partitions), c.From, len(r.src.Partitions), len(r.src.Partitions))
	}
	if !c.Follow {
		r.ends = map[int32]int64{}
		for _, p := range r.src.Partitions {
			r.ends[p.Partition] = p.High
		}
	}
	ictx, cancel := context.WithTimeout(ctx, c.StallTimeout)
	defer cancel()
	if err := r.p.InitTransactions(ictx); err != nil {
		return r.classifyFatal("init transactions", err)
	}

	ccfg, err := replay.ClientConfig(c.Brokers, c.Props)
	if err != nil {
		return err
	}
	for k, v := range map[string]any{
		"group.id":                 c.Group,
		"group.instance.id":        InstanceID(c.TransactionalID),
		"enable.auto.commit":       false,
		"enable.auto.offset.store": false,
		// A new group starts at the earliest retained record. A committed
		// offset that retention deleted resets there too: copyRecord logs
		// that jump (see partition.expected) instead of skipping silently.
		"auto.offset.reset":        "earliest",
		"isolation.level":          "read_committed",
		"enable.partition.eof":     true,
		"allow.auto.create.topics": false,
	} {
		_ = ccfg.SetKey(k, v)
	}
	r.cons, err = kafka.NewConsumer(ccfg)
	if err != nil {
		return fmt.Errorf("create consumer: %w", err)
	}
	r.consLogs.Add(1)
	go replay.ForwardLogs(r.cons.Logs(), r.log, &r.consLogs)
	if err := r.cons.SubscribeTopics([]string{c.From}, r.rebalance); err != nil {
		return fmt.Errorf("subscribe to %s: %w", c.From, err)
	}
	r.log.Info().Str("from", c.From).Str("to", c.To).Str("group", c.Group).Str("transactional_id", c.TransactionalID).
		Interface("end_offsets", r.ends).Bool("abort", c.Abort).Msg("copy started")
	return nil
}

// Bounds on the consumer's Close. confluent-kafka-go v2.11.1 has two known
// ways to block in Close forever: after a fatal error (a fenced static
// member: it drops rd_kafka_consumer_close_queue's error, fixed upstream in
// PR #1588, not released here), and when a rebalance reaches the consumer
// after its close started (the rebalance calls wait for a group handler
// that is terminating; confluent-kafka-go #1016, librdkafka #4041). A copy's
// results are already committed in its transactions when Close runs, so
// close waits this long and then leaves the consumer to the process's exit
// (the CLI exits right after), logging why.
const (
	consumerCloseGrace      = 10 * time.Second
	fatalConsumerCloseGrace = 3 * time.Second
)

func (r *copyRun) close() error {
	var errs []error
	if r.cons != nil {
		r.closing = true
		// Static membership: no LeaveGroup is sent, so a restart with the
		// same transactional id takes the partitions back at once.
		grace := consumerCloseGrace
		if r.consumerFatal {
			grace = fatalConsumerCloseGrace
		}
		closed := make(chan error, 1)
		go func() {
			err := r.cons.Close()
			r.consLogs.Wait()
			closed <- err
		}()
		select {
		case err := <-closed:
			if err != nil {
				errs = append(errs, fmt.Errorf("close consumer: %w", err))
			}
		case <-time.After(grace):
			r.log.Warn().Bool("fatal", r.consumerFatal).Dur("waited", grace).
				Msg("the consumer does not close (a known confluent-kafka-go bug); its work is committed, leaving it to the process exit")
		}
	}
	if r.adm != nil {
		r.adm.Close()
	}
	if r.p != nil {
		r.p.Close()
	}
	return errors.Join(errs...)
}
