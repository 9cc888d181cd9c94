package materialize

import (
	"errors"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/replay"
)

// TestFollowCapturedAt: a followed table's checkpoint claims the time of a
// live-marks refresh as its capture time only when every partition's
// position reached the high watermark that refresh saw; a follower behind
// keeps the earlier capture time (an update's tombstone-retention rule
// counts from it, and a record it has not read may be older than the apply).
func TestFollowCapturedAt(t *testing.T) {
	prev := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := prev.Add(time.Hour)
	marks := replay.LiveMarks{At: at, High: map[int32]int64{0: 10, 1: 20}}
	for _, tc := range []struct {
		name      string
		live      replay.LiveMarks
		positions map[int32]int64
		want      time.Time
	}{
		{"caught up", marks, map[int32]int64{0: 10, 1: 20}, at},
		{"past the marks", marks, map[int32]int64{0: 12, 1: 20}, at},
		{"one partition behind", marks, map[int32]int64{0: 9, 1: 20}, prev},
		{"a partition the follower does not read yet", marks, map[int32]int64{0: 10}, prev},
		{"a partition the marks lack", marks, map[int32]int64{0: 10, 1: 20, 2: 0}, prev},
		{"no refresh yet", replay.LiveMarks{}, map[int32]int64{0: 10, 1: 20}, prev},
		{"a refresh older than the checkpoint", replay.LiveMarks{At: prev.Add(-time.Minute), High: marks.High}, map[int32]int64{0: 10, 1: 20}, prev},
		{"a failed refresh is not kept", replay.LiveMarks{At: at, Error: errors.New("down")}, map[int32]int64{0: 10, 1: 20}, prev},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &applier{}
			a.noteLive(tc.live)
			if got := a.capturedAt(prev, tc.positions); !got.Equal(tc.want) {
				t.Errorf("capturedAt = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestFollowCapturedAtBehindMarks: a follower that keeps up with a busy
// topic is never at the newest marks' high watermarks, but it passed an
// older refresh's: its checkpoint claims that refresh's time, not the
// newest's (records between are unread) and not the previous capture
// time (which would age past delete.retention.ms while it keeps up).
func TestFollowCapturedAtBehindMarks(t *testing.T) {
	prev := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	a := &applier{}
	for i, high := range []int64{10, 20, 30} {
		a.noteLive(replay.LiveMarks{At: prev.Add(time.Duration(i+1) * time.Second), High: map[int32]int64{0: high}})
	}
	if got, want := a.capturedAt(prev, map[int32]int64{0: 25}), prev.Add(2*time.Second); !got.Equal(want) {
		t.Fatalf("at 25 of marks 10, 20, 30: capturedAt %s, want the second refresh's %s", got, want)
	}
	if got := a.capturedAt(prev, map[int32]int64{0: 5}); !got.Equal(prev) {
		t.Fatalf("behind every refresh: capturedAt %s, want the previous %s", got, prev)
	}
	if got, want := a.capturedAt(prev, map[int32]int64{0: 30}), prev.Add(3*time.Second); !got.Equal(want) {
		t.Fatalf("at the newest: capturedAt %s, want %s", got, want)
	}
}
