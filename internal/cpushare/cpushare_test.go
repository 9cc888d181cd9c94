package cpushare

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSlotsBoundConcurrency: with n slots, of many goroutines at most n
// hold one at a time (counted by the holders themselves), every one of
// them gets its turn, and with n holders parked the next one gets in only
// when one of them releases.
func TestSlotsBoundConcurrency(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		s := New(n)
		if s.Slots() != n {
			t.Fatalf("New(%d).Slots() = %d", n, s.Slots())
		}
		var holding, most, done atomic.Int64
		const workers, rounds = 8, 200
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					err := s.Do(context.Background(), func() error {
						h := holding.Add(1)
						for {
							m := most.Load()
							if h <= m || most.CompareAndSwap(m, h) {
								break
							}
						}
						runtime.Gosched() // let the others try to get in
						holding.Add(-1)
						done.Add(1)
						return nil
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if m := most.Load(); m > int64(n) {
			t.Fatalf("%d slots: %d goroutines held one at once", n, m)
		}
		if d := done.Load(); d != workers*rounds {
			t.Fatalf("%d slots: %d units ran, want %d", n, d, workers*rounds)
		}

		// n holders parked: the next Acquire waits until one releases.
		for range n {
			if err := s.Acquire(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		got := make(chan error, 1)
		var released atomic.Bool
		go func() {
			err := s.Acquire(context.Background())
			if err == nil && !released.Load() {
				err = errors.New("got a slot while all were held")
			}
			got <- err
		}()
		runtime.Gosched()
		released.Store(true)
		s.Release()
		if err := <-got; err != nil {
			t.Fatalf("%d slots: %v", n, err)
		}
		for range n { // the n-1 left and the waiter's
			s.Release()
		}
	}
}

// TestAcquireCanceled: an Acquire that waits for a full share returns its
// context's error when the context ends, holding nothing: once the holder
// releases, all the slots can be taken again.
func TestAcquireCanceled(t *testing.T) {
	s := New(2)
	for range 2 {
		if err := s.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() { got <- s.Acquire(ctx) }()
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire on a full share, canceled: %v, want context.Canceled", err)
	}
	ran := false
	if err := s.Do(ctx, func() error { ran = true; return nil }); !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("Do with a canceled context: %v, ran %v; want context.Canceled, not run", err, ran)
	}
	s.Release()
	s.Release()
	// The canceled waiter took nothing: both slots are free. (The deadline
	// only turns a leaked slot into a failure instead of a hang.)
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 2 {
		if err := s.Acquire(ctx); err != nil {
			t.Fatalf("a slot leaked by the canceled Acquire: %v", err)
		}
	}
}

// TestNilIsUnlimited: a nil share never waits, even on a canceled context,
// and runs what Do is given.
func TestNilIsUnlimited(t *testing.T) {
	var s *Share
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 3 {
		if err := s.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ran := false
	if err := s.Do(ctx, func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("nil Do: %v, ran %v", err, ran)
	}
	s.Release()
	s.Yield()
	if s.Slots() != 0 {
		t.Fatalf("nil Slots() = %d, want 0", s.Slots())
	}
}

// TestForDaemon: cores-1 slots, at least one.
func TestForDaemon(t *testing.T) {
	for cores, want := range map[int]int{0: 1, 1: 1, 2: 1, 3: 2, 8: 7} {
		if got := ForDaemon(cores).Slots(); got != want {
			t.Errorf("%d cores: %d slots, want %d", cores, got, want)
		}
	}
}

// TestSetDaemonProcs: the cores are the default GOMAXPROCS, and the Ps
// SpareProcs more; a GOMAXPROCS from the environment is kept, its cores at
// most the CPUs.
func TestSetDaemonProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	t.Setenv("GOMAXPROCS", "")
	runtime.GOMAXPROCS(2)
	if cores := SetDaemonProcs(); cores != 2 || runtime.GOMAXPROCS(0) != 2+SpareProcs {
		t.Fatalf("default: cores %d, GOMAXPROCS %d; want 2 and %d", cores, runtime.GOMAXPROCS(0), 2+SpareProcs)
	}
	t.Setenv("GOMAXPROCS", "64")
	runtime.GOMAXPROCS(64)
	if cores := SetDaemonProcs(); cores != min(64, runtime.NumCPU()) || runtime.GOMAXPROCS(0) != 64 {
		t.Fatalf("GOMAXPROCS=64 set: cores %d, GOMAXPROCS %d; want %d and 64", cores, runtime.GOMAXPROCS(0), min(64, runtime.NumCPU()))
	}
}
