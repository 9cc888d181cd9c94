// Command warmmem touches every page of N GiB of memory once and exits, so
// that a VM whose hypervisor backs guest memory on first touch has backed
// it before a benchmark runs: on this project's VM a freshly booted guest
// paid a host fault for each page the kernel handed out the first time,
// which made page-cache writes three to six times slower for a while
// (bench/RESULTS.md, 2026-12-04). Give it most of the machine's free
// memory: go run ./bench/internal/warmmem -gib 21
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	gib := flag.Int("gib", 1, "GiB of memory to touch")
	flag.Parse()
	if *gib < 1 {
		fmt.Fprintln(os.Stderr, "warmmem: -gib must be at least 1")
		os.Exit(2)
	}
	start := time.Now()
	const chunk = 1 << 30
	var sink byte
	for i := 0; i < *gib; i++ {
		b := make([]byte, chunk)
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1
		}
		sink ^= b[len(b)-4096]
		// Kept until the end: a chunk freed and reused would touch the same pages again.
		keep = append(keep, b)
	}
	fmt.Printf("warmmem: touched %d GiB in %s (%d)\n", *gib, time.Since(start).Round(time.Millisecond), sink)
}

var keep [][]byte
