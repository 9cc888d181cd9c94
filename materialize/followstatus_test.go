package materialize

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/replay"
)

// TestFollowStatusInherits: a status made from the last follower's
// (NewFollowStatus) knows its live marks before its own first refresh, and
// its lag is the new checkpoint's ends against them once the follower
// starts; Refreshed stays false until its own refresh. A status made from
// nothing has no lag (-1).
func TestFollowStatusInherits(t *testing.T) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	prev := &FollowStatus{}
	prev.start(checkpoint.Checkpoint{Partitions: []checkpoint.Partition{{Partition: 0, End: 100}, {Partition: 1, End: 40}}})
	prev.live(replay.LiveMarks{At: at, High: map[int32]int64{0: 150, 1: 40}, Low: map[int32]int64{0: 0, 1: 0}})
	if lag := prev.Snapshot().MaxLag(); lag != 50 {
		t.Fatalf("the last follower's lag %d, want 50", lag)
	}

	s := NewFollowStatus(prev)
	snap := s.Snapshot()
	if snap.MaxLag() != 50 || !snap.LiveAt.Equal(at) || snap.Refreshed {
		t.Fatalf("inherited status: lag %d, live_at %s, refreshed %v; want 50, %s, false", snap.MaxLag(), snap.LiveAt, snap.Refreshed, at)
	}
	// The new generation's checkpoint is ahead of the last follower's
	// positions on partition 0 (the rebuild's catch-up read on).
	s.start(checkpoint.Checkpoint{Partitions: []checkpoint.Partition{{Partition: 0, End: 120}, {Partition: 1, End: 40}}})
	want := []PartitionStatus{{Partition: 0, End: 120, LiveHigh: 150, Lag: 30}, {Partition: 1, End: 40, LiveHigh: 40, Lag: 0}}
	snap = s.Snapshot()
	if diff := cmp.Diff(want, snap.Partitions); diff != "" || snap.Refreshed {
		t.Fatalf("started on the new checkpoint (-want +got), refreshed %v:\n%s", snap.Refreshed, diff)
	}
	s.live(replay.LiveMarks{At: at.Add(time.Second), High: map[int32]int64{0: 160, 1: 41}})
	if snap := s.Snapshot(); !snap.Refreshed || snap.MaxLag() != 40 {
		t.Fatalf("after its own refresh: refreshed %v, lag %d; want true, 40", snap.Refreshed, snap.MaxLag())
	}
	if lag := NewFollowStatus(nil).Snapshot().MaxLag(); lag != -1 {
		t.Fatalf("a fresh status's lag %d, want -1 (not read yet)", lag)
	}
}

// TestFollowStatusLiveBeforeStart: live marks read before anything was
// followed (the marks a table's first build watches, before its follower
// starts) are kept, each partition at its low, and the follower's start
// takes them over; a fresh status took them with a panic (a nil map).
func TestFollowStatusLiveBeforeStart(t *testing.T) {
	at := time.Date(2026, 12, 6, 22, 0, 0, 0, time.UTC)
	s := NewFollowStatus(nil)
	s.live(replay.LiveMarks{At: at, High: map[int32]int64{0: 150}, Low: map[int32]int64{0: 20}})
	want := []PartitionStatus{{Partition: 0, End: 20, LiveHigh: 150, Lag: 130}}
	if diff := cmp.Diff(want, s.Snapshot().Partitions); diff != "" {
		t.Fatalf("before the start (-want +got):\n%s", diff)
	}
	s.start(checkpoint.Checkpoint{Partitions: []checkpoint.Partition{{Partition: 0, End: 140}}})
	want = []PartitionStatus{{Partition: 0, End: 140, LiveHigh: 150, Lag: 10}}
	if diff := cmp.Diff(want, s.Snapshot().Partitions); diff != "" {
		t.Fatalf("started (-want +got):\n%s", diff)
	}
}
