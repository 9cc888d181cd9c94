// Package cpushare owns the daemon's "rebuild work slots": a weighted
// semaphore that bounds how many goroutines run CPU-bound rebuild and
// follow work at once, so that this work never holds every one of the Go
// scheduler's Ps and a read handler that becomes runnable finds a P
// without waiting for a time slice to end (Go preempts a running
// goroutine only after about 10 ms).
//
// # Rules
//
//   - A unit of work (a batch folded, a run spilled, a block of the merge
//     built or committed, a follower's apply) runs between Acquire and
//     Release; between units the goroutine yields (Yield, or Release,
//     which yields), so that a handler waiting in the run queue gets the
//     P first.
//   - Never wait for a slot while holding a lock that a slot holder may
//     wait for, bbolt's write lock above all: acquire before a write
//     transaction begins, release after it ends. With one slot, a
//     goroutine that held the write lock and waited for the slot would
//     wait for ever on one that held the slot and waited for the lock.
//   - Never hold a slot while waiting on a channel for another stage of
//     the same work (release first): the other stage may need the slot.
//
// The work the slots do not bound, the replay's read loop (mostly in C)
// and the Kafka client's own threads, runs in Share.Run, on a thread of
// its own at a lower CPU priority (nice.go), so that when the cores
// themselves are busy the kernel runs the reads first.
//
// A nil *Share is unlimited: every method returns at once (the CLI's
// rebuild keeps all the cores; nothing else runs in its process).
package cpushare

import (
	"context"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sync/semaphore"
)

// Share is a set of rebuild work slots. It is safe for concurrent use by
// any number of goroutines; the waiters are served first come, first
// served.
type Share struct {
	sem   *semaphore.Weighted
	slots int
	lower bool // Run lowers the priority (ForDaemon)
}

// New returns a share of n slots (at least 1).
func New(n int) *Share {
	n = max(n, 1)
	return &Share{sem: semaphore.NewWeighted(int64(n)), slots: n}
}

// ForDaemon returns the share a daemon's rebuilds and followers take
// turns on, given the CPUs the daemon may use (SetDaemonProcs): cores-1
// slots, at least 1, so that one core's P is left to the read path
// whenever there are two or more, and whose Run reads at a lower CPU
// priority.
func ForDaemon(cores int) *Share {
	return NewLowered(cores - 1)
}

// SpareProcs is how many Ps the daemon runs beyond its cores. A rebuild's
// goroutines spend much of their time in cgo calls (the batch reader waits
// in librdkafka for records and copies them out in C), and Go leaves a P
// with its M for the length of such a call until sysmon takes it back,
// 20 us to 10 ms later. With as many Ps as cores, a read whose goroutine
// became runnable while the rebuild's calls held the Ps waited for that:
// p99 19.8 ms during a rebuild, where the handler took 0.25 ms and Go's
// scheduler latency reached 2 to 8 ms. Two more Ps than cores (the
// slots still count the cores) took it to 6.1 ms, the scheduler latency
// p99 to 128 us (bench/RESULTS.md, 2026-12-04). The kernel still shares
// the cores; the rebuild's read threads run at nice 10 (nice.go).
const SpareProcs = 2

// SetDaemonProcs sets the daemon's GOMAXPROCS to its cores plus
// SpareProcs and returns the cores: Go's default GOMAXPROCS at the start
// (the CPUs of the process's affinity mask, or its cgroup's CPU limit when
// lower). Where the GOMAXPROCS environment variable is set, the operator
// chose the Ps: they are kept, and the cores are the fewer of them and the
// CPUs. Call it once, at the daemon's start.
func SetDaemonProcs() (cores int) {
	cores = runtime.GOMAXPROCS(0)
	if os.Getenv("GOMAXPROCS") != "" {
		return max(min(cores, runtime.NumCPU()), 1)
	}
	runtime.GOMAXPROCS(cores + SpareProcs)
	return cores
}

// NewLowered is New whose Run reads at a lower CPU priority, as
// ForDaemon's, with n slots (at least 1).
func NewLowered(n int) *Share {
	s := New(n)
	s.lower = true
	return s
}

// Slots is the number of slots; 0 for a nil (unlimited) share.
func (s *Share) Slots() int {
	if s == nil {
		return 0
	}
	return s.slots
}

// Acquire waits for a slot, or for ctx to end (then it returns ctx's
// error, wrapped, and holds no slot). A nil share returns nil at once.
func (s *Share) Acquire(ctx context.Context) error {
	if s == nil {
		return nil
	}
	if err := s.sem.Acquire(ctx, 1); err != nil {
		return fmt.Errorf("wait for a rebuild work slot: %w", err)
	}
	return nil
}

// Release gives back a slot taken by Acquire and yields the P, so that a
// goroutine waiting for one (a read handler) runs before the caller goes
// on. A nil share only returns.
func (s *Share) Release() {
	if s == nil {
		return
	}
	s.sem.Release(1)
	runtime.Gosched()
}

// Yield lets a goroutine that holds no slot give its P to a waiting
// goroutine between two units of work that are not worth a slot (the
// replay's hand-off of a batch). A nil share only returns.
func (s *Share) Yield() {
	if s != nil {
		runtime.Gosched()
	}
}

// Do runs fn in a slot: Acquire, fn, Release. It returns Acquire's error
// without running fn, or fn's.
func (s *Share) Do(ctx context.Context, fn func() error) error {
	if err := s.Acquire(ctx); err != nil {
		return err
	}
	defer s.Release()
	return fn()
}
