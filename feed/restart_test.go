package feed

import (
	"errors"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/api"
)

// TestWatchedAcrossRestart: a feed that restarts (Start again: a commit
// whose changes were not captured) stays watched as it was: a watch that
// was refused (410) or a watcher the restart ended still counts for
// RetainFor, so that the client's next list and watch meet. Before this,
// the restart forgot it, the next commit was not captured either and
// restarted the feed again, and the list's cursor was 410 again (seen by
// cmd/kmaterialize's TestWatchDaemonRestart: a follower's apply that had
// decided not to capture before the first watch).
func TestWatchedAcrossRestart(t *testing.T) {
	now := time.Unix(1000, 0)
	f := New(Config{RetainFor: time.Minute, Now: func() time.Time { return now }})
	c1 := api.Cursor{Epoch: 1, Generation: 1, Positions: api.Positions{0: 5}}
	f.Start("t", c1)
	old := c1
	old.Epoch = 9
	if _, err := f.Watch("t", old); !errors.Is(err, ErrCursorGone) {
		t.Fatalf("a cursor of another epoch: %v, want ErrCursorGone", err)
	}
	now = now.Add(10 * time.Second)
	c2 := api.Cursor{Epoch: 1, Generation: 1, Positions: api.Positions{0: 9}}
	f.Start("t", c2)
	if !f.Watched("t") {
		t.Fatal("a restart 10s after a refused watch: not watched")
	}

	w, err := f.Watch("t", c2)
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Hour)
	c3 := api.Cursor{Epoch: 1, Generation: 1, Positions: api.Positions{0: 12}}
	f.Start("t", c3)
	if _, _, _, err := w.Next(t.Context(), 0); !errors.Is(err, ErrCursorGone) {
		t.Fatalf("the watcher of the restarted feed: %v, want ErrCursorGone", err)
	}
	w.Close()
	now = now.Add(59 * time.Second)
	if !f.Watched("t") {
		t.Fatal("a restart that ended a watcher: not watched within RetainFor")
	}
	now = now.Add(2 * time.Second)
	f.Start("t", api.Cursor{Epoch: 1, Generation: 1, Positions: api.Positions{0: 13}})
	if f.Watched("t") {
		t.Fatal("watched past RetainFor of the last watch")
	}
}
