package materialize

import (
	"slices"
	"sync"
	"time"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/replay"
)

// FollowStatus is a follower's state for the daemon's API and metrics:
// per partition the position applied and the live marks, and the apply
// counters. Its methods are safe for concurrent use.
type FollowStatus struct {
	mu      sync.Mutex
	parts   map[int32]*PartitionStatus
	records int64 // records applied
	applies int64 // transactions committed
	last    time.Time
	samples []rateSample
	liveAt  time.Time
	liveErr error
	// refreshed: this status's follower (or watcher) has refreshed the
	// live marks; liveAt may be older, inherited (NewFollowStatus).
	refreshed bool

	// unstable counts applies that ended where no stable offset was
	// seen (the byte budget reached), held the read rounds that kept
	// records back for one.
	unstable int64
	held     int64
}

// PartitionStatus is one followed partition.
type PartitionStatus struct {
	Partition int32 `json:"partition"`
	// End is the position applied (the checkpoint's end).
	End int64 `json:"end"`
	// LiveHigh is the partition's high watermark at the last refresh (at
	// least End); -1 before the first.
	LiveHigh int64 `json:"live_high"`
	// Lag is LiveHigh - End: records (and markers) not applied yet.
	Lag int64 `json:"lag"`
}

// FollowSnapshot is a copy of a FollowStatus.
type FollowSnapshot struct {
	Partitions []PartitionStatus // sorted by partition
	Records    int64             // records applied since the follower started
	Applies    int64             // transactions committed
	LastApply  time.Time         // zero before the first
	Rate       float64           // records applied per second, over the last 10s or so
	LiveAt     time.Time         // when the live marks were last refreshed
	LiveError  error             // the last refresh's error, nil when it worked
	// Refreshed reports that this status's own follower has refreshed
	// the live marks at least once (it got past its start); the marks
	// may be inherited before (NewFollowStatus).
	Refreshed bool

	// UnstableCuts counts applies that ended where the follower had seen
	// no stable offset, because FollowOptions.MaxApplyBytes was reached
	// first: such an apply may show part of a transaction.
	UnstableCuts int64
	// Held counts the read rounds that would have ended a batch (by
	// record count, a drained queue or the interval) but kept records
	// back to reach a stable offset: the cuts inside a transaction that
	// did not happen.
	Held int64
}

type rateSample struct {
	at      time.Time
	records int64
}

// MaxLag is the largest lag of any partition; -1 when the live marks were
// never read.
func (s FollowSnapshot) MaxLag() int64 {
	out := int64(-1)
	for _, p := range s.Partitions {
		if p.LiveHigh >= 0 {
			out = max(out, p.Lag)
		}
	}
	return out
}

// Snapshot returns a copy of the status.
func (s *FollowStatus) Snapshot() FollowSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := FollowSnapshot{Records: s.records, Applies: s.applies, UnstableCuts: s.unstable, Held: s.held,
		LastApply: s.last, LiveAt: s.liveAt, LiveError: s.liveErr, Refreshed: s.refreshed}
	for _, p := range s.parts {
		out.Partitions = append(out.Partitions, *p)
	}
	slices.SortFunc(out.Partitions, func(a, b PartitionStatus) int { return int(a.Partition) - int(b.Partition) })
	now := time.Now()
	if len(s.samples) > 0 {
		first := s.samples[0]
		if d := now.Sub(first.at).Seconds(); d > 0 {
			out.Rate = float64(s.records-first.records) / d
		}
	}
	return out
}

// NewFollowStatus returns a status for a follower that replaces prev's
// (nil: none): it starts with prev's live marks, so that the lag stays
// known, not "high watermarks not read yet", from the moment a follower
// restarts (after a rebuild's publish, a reload) until its own first
// refresh. The marks are of the topic, not of a generation: the lag is
// then the new checkpoint's ends against them. FollowSnapshot.Refreshed
// stays false until this status's own refresh.
func NewFollowStatus(prev *FollowStatus) *FollowStatus {
	s := &FollowStatus{}
	if prev == nil {
		return s
	}
	prev.mu.Lock()
	defer prev.mu.Unlock()
	s.parts = make(map[int32]*PartitionStatus, len(prev.parts))
	for p, ps := range prev.parts {
		c := *ps
		s.parts[p] = &c
	}
	s.liveAt, s.liveErr = prev.liveAt, prev.liveErr
	return s
}

// start sets the positions to the checkpoint's, keeping the live marks
// known (a retried follower's, or NewFollowStatus's).
func (s *FollowStatus) start(cp checkpoint.Checkpoint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.parts
	s.parts = map[int32]*PartitionStatus{}
	for _, p := range cp.Partitions {
		ps := &PartitionStatus{Partition: p.Partition, End: p.End, LiveHigh: -1}
		if o := old[p.Partition]; o != nil {
			ps.LiveHigh = o.LiveHigh
		}
		ps.update()
		s.parts[p.Partition] = ps
	}
	s.samples = []rateSample{{at: time.Now(), records: s.records}}
}

func (s *FollowStatus) applied(cp checkpoint.Checkpoint, n int64, unstable bool, held int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.records += n
	s.applies++
	s.held += held
	if unstable {
		s.unstable++
	}
	s.last = now
	for _, p := range cp.Partitions {
		ps := s.parts[p.Partition]
		if ps == nil {
			ps = &PartitionStatus{Partition: p.Partition, LiveHigh: -1}
			s.parts[p.Partition] = ps
		}
		ps.End = p.End
		ps.update()
	}
	s.sample(now)
}

// sample keeps about one sample a second over the last 10s.
func (s *FollowStatus) sample(now time.Time) {
	if n := len(s.samples); n > 0 && now.Sub(s.samples[n-1].at) < time.Second {
		return
	}
	s.samples = append(s.samples, rateSample{at: now, records: s.records})
	for len(s.samples) > 1 && now.Sub(s.samples[0].at) > 10*time.Second {
		s.samples = s.samples[1:]
	}
}

func (s *FollowStatus) live(m replay.LiveMarks) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.liveAt, s.liveErr, s.refreshed = m.At, m.Error, true
	if m.Error != nil {
		return
	}
	if s.parts == nil {
		// Marks watched before anything was followed (WatchLive during a
		// table's first build, before start).
		s.parts = map[int32]*PartitionStatus{}
	}
	for p, high := range m.High {
		ps := s.parts[p]
		if ps == nil {
			// A partition added to the topic: nothing applied yet.
			ps = &PartitionStatus{Partition: p, End: m.Low[p]}
			s.parts[p] = ps
		}
		ps.LiveHigh = high
		ps.update()
	}
	s.sample(time.Now())
}

// update recomputes the lag; a live high older than the last apply may be
// below End.
func (p *PartitionStatus) update() {
	if p.LiveHigh < 0 {
		p.Lag = 0
		return
	}
	p.LiveHigh = max(p.LiveHigh, p.End)
	p.Lag = p.LiveHigh - p.End
}
