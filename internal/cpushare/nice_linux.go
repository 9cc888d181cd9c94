package cpushare

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// lowerThread locks the calling goroutine to its thread and sets that
// thread's nice value; it reports whether the goroutine is now locked
// (and must end locked, the thread then discarded).
func lowerThread(nice int) bool {
	runtime.LockOSThread()
	// PRIO_PROCESS with a thread ID sets that one thread's nice value
	// on Linux (threads have their own, see setpriority(2)).
	if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), nice); err != nil {
		runtime.UnlockOSThread()
		return false
	}
	return true
}
