package materialize

import "testing"

// TestSplitMemoryReaders: every reader beyond the first takes M/32 from the
// fold's held rows, never below M/8, and the parts' worst case (Go parts
// doubled by garbage, plus the C prefetch queue) stays within M for any
// reader count the spec allows.
func TestSplitMemoryReaders(t *testing.T) {
	for _, m := range []int64{1 << 20, 64 << 20, DefaultMemory, 4 << 30} {
		one := splitMemory(m, 1)
		if want := int(m / 4); one.hold != want {
			t.Errorf("memory %d, 1 reader: hold %d, want M/4 = %d", m, one.hold, want)
		}
		for n := 1; n <= MaxReaders; n++ {
			s := splitMemory(m, n)
			want := max(m/4-int64(n-1)*(m/32), m/8)
			if int64(s.hold) != want {
				t.Errorf("memory %d, %d readers: hold %d, want %d", m, n, s.hold, want)
			}
			if s.prefetchKiB != one.prefetchKiB || s.batchBytes != one.batchBytes || s.queue != one.queue || s.buffer != one.buffer {
				t.Errorf("memory %d, %d readers: %+v changed more than the hold (1 reader: %+v)", m, n, s, one)
			}
			goLive := int64(s.batchBytes+s.queue) + 2*int64(s.buffer) + int64(s.hold)
			if total := 2*goLive + int64(s.prefetchKiB)*1024; total > m {
				t.Errorf("memory %d, %d readers: worst case %d exceeds it (%+v)", m, n, total, s)
			}
		}
	}
	if readers(0) != DefaultReaders || readers(-1) != DefaultReaders || readers(3) != 3 {
		t.Errorf("readers(0), readers(-1), readers(3) = %d, %d, %d", readers(0), readers(-1), readers(3))
	}
}
