package cpushare

// Nice is the OS priority (Linux nice value, 0 being the default and 19
// the lowest) of the threads a daemon's share runs its reading work on:
// see Share.Run.
const Nice = 10

// Run runs fn and returns when it has returned. With a share made by
// ForDaemon, on Linux, fn runs on an OS thread of its own, at a lower CPU
// priority (Nice): the goroutine stays locked to that thread, and every
// thread created from it (librdkafka's, when fn creates a Kafka client)
// inherits the priority, so that when the cores are busy the kernel runs
// the daemon's read path first. That is the work the slots do not bound:
// the replay's read loop, mostly in C, and the client's own threads. The
// thread ends with fn (a goroutine that exits locked takes its thread
// with it), as a priority once lowered cannot be raised again without
// privileges. Go's own new threads never inherit it (the runtime creates
// them from a template thread when asked from a locked one).
//
// Caveat: while fn runs Go code its thread holds a P, and a kernel that
// keeps the lowered thread waiting keeps that P from the reads too (the
// runtime takes a P back from a thread in a cgo call or a system call,
// which is most of the replay's time, but preempting Go code needs the
// thread to run). The scheduler-latency metric shows such waits.
//
// Elsewhere, for a share of New, or a nil share, fn runs on the caller's
// goroutine. A priority that cannot be set leaves fn at the default one.
func (s *Share) Run(fn func()) {
	if s == nil || !s.lower {
		fn()
		return
	}
	done := make(chan struct{})
	var panicked any
	go func() {
		defer close(done)
		// A panic goes on in the caller's goroutine, where the daemon's
		// run recovers it.
		defer func() { panicked = recover() }()
		// Locked and never unlocked when it succeeds: the thread goes
		// when this goroutine ends.
		lowerThread(Nice)
		fn()
	}()
	<-done
	if panicked != nil {
		panic(panicked)
	}
}
