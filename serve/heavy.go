package serve

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/kmaterialize/kmaterialize/api"
)

// Exports, diffs and counts read a whole table (or two generations) at
// disk speed: at most Config.MaxHeavyRequests of them run at once, so that
// they cannot together take the disk, the spool and the read transactions
// from every other request. One more is refused at once with 503 busy and
// Retry-After: a client retries later, rather than a queue of requests
// holding connections. A slot is held while the request reads the
// database: for a spooled answer until the spool file is written (sending
// it does not hold a slot), for a paged export until its last page.

// heavyRetryAfter is the Retry-After (seconds) of a 503 busy or spool_full.
const heavyRetryAfter = 1

// heavySlot takes a slot for a heavy request, or answers 503 and returns
// false. The caller calls the release it returns exactly once.
func (s *Server) heavySlot(w http.ResponseWriter, what string) (release func(), ok bool) {
	select {
	case s.heavy <- struct{}{}:
		released := false
		return func() {
			if !released {
				released = true
				<-s.heavy
			}
		}, true
	default:
		w.Header().Set("Retry-After", strconv.Itoa(heavyRetryAfter))
		writeError(w, http.StatusServiceUnavailable, api.CodeBusy,
			fmt.Sprintf("%s: %d exports, diffs and counts are running already (max_heavy_requests): try again after Retry-After", what, cap(s.heavy)))
		return nil, false
	}
}
