package serve

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
)

// shutdown is Run's end, once its context ended. It finishes what it can
// within Config.ShutdownTimeout:
//
//  1. Config.Stopping is called (the CLI tells systemd STOPPING=1);
//  2. no new run is admitted, the schedules stop, the queued runs are
//     dropped (their result: cancelled), runs still reading their topic
//     are cancelled (they fail cleanly: nothing published, the previous
//     generation stays), the followers stop (each transaction committed
//     or rolled back) and the retry loop ends;
//  3. the listeners stop accepting; requests in flight get at most
//     ShutdownGrace (or ShutdownTimeout if shorter), then their
//     connections, open streams among them, are closed;
//  4. runs past their replay (merging, publishing) finish and publish;
//     once ShutdownTimeout has passed since the start of shutdown, they
//     too are cancelled (nothing published) and waited for.
//
// It returns when every goroutine Run owns but the HTTP servers' Serve has
// ended.
func (s *Server) shutdown(sched gocron.Scheduler, servers []*http.Server, stopFollowers, cancelAllRuns context.CancelFunc) {
	deadline := time.NewTimer(s.cfg.ShutdownTimeout)
	defer deadline.Stop()
	if s.cfg.Stopping != nil {
		s.cfg.Stopping()
	}
	// Open change feeds end now with shutting_down: the HTTP servers'
	// Shutdown waits for every answer to end.
	s.feeds.Close()
	s.reloadMu.Lock()
	s.mu.Lock()
	s.stopping = true
	dropped := len(s.queue)
	for len(s.queue) > 0 {
		s.removeQueuedLocked(s.queue[0], "at shutdown")
	}
	var reading, finishing []uint64
	for _, st := range s.runs {
		switch r := st.active; {
		case r == nil:
		case r.phase == phaseReading:
			r.cancel(errShutdown)
			reading = append(reading, r.id)
		default:
			finishing = append(finishing, r.id)
		}
	}
	s.mu.Unlock()
	if err := sched.Shutdown(); err != nil {
		s.cfg.Log.Warn().Err(err).Msg("scheduler shutdown")
	}
	s.reloadMu.Unlock()
	stopFollowers()
	s.cfg.Log.Info().Int("queued_dropped", dropped).Uints64("reading_cancelled", reading).Uints64("publishing", finishing).
		Dur("shutdown_timeout", s.cfg.ShutdownTimeout).
		Msg("shutting down: no new runs or requests; queued runs dropped, runs still reading cancelled (nothing published), runs past their replay finish")

	grace := min(ShutdownGrace, s.cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	var shutWG sync.WaitGroup
	for _, srv := range servers {
		shutWG.Add(1)
		go func() {
			defer shutWG.Done()
			if err := srv.Shutdown(sctx); err != nil {
				s.cfg.Log.Warn().Err(err).Msg("requests still in flight after the grace period; closing their connections")
				srv.Close()
			}
		}()
	}

	// runWG also counts the followers and the retry loop, which end at
	// once (stopFollowers).
	done := make(chan struct{})
	go func() {
		s.runWG.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-deadline.C:
		s.mu.Lock()
		var left []uint64
		for _, st := range s.runs {
			if st.active != nil {
				left = append(left, st.active.id)
			}
		}
		s.mu.Unlock()
		s.cfg.Log.Warn().Uints64("runs", left).Dur("shutdown_timeout", s.cfg.ShutdownTimeout).
			Msg("runs still going at shutdown_timeout: cancelling them (they publish nothing)")
		cancelAllRuns()
		<-done
	}
	shutWG.Wait()
}
