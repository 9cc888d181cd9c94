package fold

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestHeldMatchesMap puts random keys (enough to grow the index many times,
// keys of every length from 1 byte, sharing long prefixes, and keys that
// differ from others only by trailing zero bytes), values
// (some empty, some over a chunk) and tombstones into held, resets it now
// and then, and compares its sorted rows with a map of the same puts.
func TestHeldMatchesMap(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	h := newHeld()
	want := map[string][]byte{}
	check := func() {
		t.Helper()
		keys := make([]string, 0, len(want))
		for k := range want {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if h.n != len(keys) {
			t.Fatalf("held has %d keys, want %d", h.n, len(keys))
		}
		es := h.sorted()
		for i, e := range es {
			k, v := h.entry(e.chunk, e.off)
			if string(k) != keys[i] {
				t.Fatalf("row %d: key %q, want %q", i, k, keys[i])
			}
			w := want[keys[i]]
			if (v == nil) != (w == nil) || !bytes.Equal(v, w) {
				t.Fatalf("key %q: value %q (nil %v), want %q (nil %v)", k, v, v == nil, w, w == nil)
			}
		}
	}
	for round := range 4 {
		for range 30000 {
			var k []byte
			switch rng.IntN(4) {
			case 0:
				k = []byte{byte(rng.IntN(256))}
			case 1:
				k = fmt.Appendf(nil, "shared-prefix-%06d", rng.IntN(20000))
			case 2:
				// The same 16-byte prefix as "k%d" (zero padded): a tie
				// the radix sort leaves to the key comparison.
				k = append(fmt.Appendf(nil, "k%d", rng.IntN(5000)), make([]byte, 1+rng.IntN(3))...)
			default:
				k = fmt.Appendf(nil, "k%d", rng.IntN(5000))
			}
			var v []byte
			switch x := rng.IntN(100); {
			case x < 15: // tombstone
			case x < 20:
				v = []byte{}
			case x == 20 && rng.IntN(50) == 0:
				v = bytes.Repeat([]byte{'b'}, heldChunk+rng.IntN(100))
			default:
				v = fmt.Appendf(nil, "v-%d-%d", round, rng.IntN(1e6))
			}
			h.put(k, v)
			want[string(k)] = v
		}
		check()
		if round%2 == 1 {
			h.reset()
			clear(want)
			check()
		}
	}
}

// BenchmarkHeldSorted sorts 500,000 held rows of the benchmark's keys
// (bench/: "key-%08d" in a scattered order), a spill's worth at the
// default --memory.
func BenchmarkHeldSorted(b *testing.B) {
	h := newHeld()
	for i := range 500_000 {
		h.put(fmt.Appendf(nil, "key-%08d", (i*7919)%5_000_000), []byte("v"))
	}
	for b.Loop() {
		_ = h.sorted()
	}
}
