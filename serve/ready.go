package serve

import (
	"fmt"
	"net/http"
	"time"

	"github.com/kmaterialize/kmaterialize/api"
)

// readyz is 200 once every configured table has a published generation,
// else 503 naming the tables that are not ready and why.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	db := s.database(w)
	if db == nil {
		return
	}
	s.mu.Lock()
	names := s.configuredLocked()
	s.mu.Unlock()
	var tables, notReady []api.ReadyTable
	for _, n := range names {
		t, _, err := s.describe(db, n)
		if err != nil {
			s.readError(w, n, err)
			return
		}
		rt := api.ReadyTable{Name: n, State: t.State}
		if sh := t.Shard; sh != nil && sh.Subset {
			// A shard is ready for its partitions: say which.
			rt.PartitionSet = sh.PartitionSet
			if sh.Repartitioned {
				rt.Reason = repartitionedMessage(n, sh)
				notReady = append(notReady, rt)
				tables = append(tables, rt)
				continue
			}
		}
		// While the file is compacted a follower waits, and its lag
		// says nothing of the table: it is ready if published.
		if fv, followed := s.followInfo(n); followed && t.Generation != 0 && s.maintaining() != maintCompact {
			if why := fv.notReady(); why != "" {
				rt.Reason = why
				notReady = append(notReady, rt)
			}
		}
		if t.Generation == 0 {
			switch {
			case t.State == StateBuilding:
				rt.Reason = "its first build is running"
			case t.State == StateQueued:
				rt.Reason = "its first build is queued (max_concurrent_runs)"
			case t.LastError != nil && t.Retry != nil && !t.Retry.Next.IsZero():
				rt.Reason = fmt.Sprintf("its first build failed (exit code %d): %s; retried at %s", t.LastError.ExitCode, t.LastError.Error, t.Retry.Next.UTC().Format(time.RFC3339Nano))
			case t.LastError != nil:
				rt.Reason = fmt.Sprintf("its first build failed (exit code %d): %s", t.LastError.ExitCode, t.LastError.Error)
			default:
				rt.Reason = "never published"
			}
			notReady = append(notReady, rt)
		}
		tables = append(tables, rt)
	}
	if len(notReady) > 0 {
		writeJSON(w, http.StatusServiceUnavailable, api.ErrorBody{
			Error: fmt.Sprintf("%d of %d configured tables are not ready (no published generation yet, or following and behind)", len(notReady), len(names)),
			Code:  api.CodeNotReady, Tables: notReady,
		})
		return
	}
	if tables == nil {
		tables = []api.ReadyTable{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "tables": tables})
}
