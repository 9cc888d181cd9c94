// Command warmmem touches every page of N GiB of memory once and prints
// how long that took: on this project's VM, whose hypervisor backs guest
// memory on first touch and takes freed memory back (free page reporting),
// a fresh page costs a host fault, and the time per GiB tells how cold the
// machine's memory is before a benchmark (about 0.1 s a GiB where pages
// are cheap, 1 to 2.5 s here). Touching most of the free memory after a
// boot made page-cache writes three to six times faster for the runs that
// followed; memory a process frees turns cold again (bench/RESULTS.md,
// 2026-12-04). Example: go run ./bench/internal/warmmem -gib 2
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
		// Kept until the end: a chunk freed and reused would touch the
		// same pages again.
		keep = append(keep, b)
	}
	fmt.Printf("warmmem: touched %d GiB in %s (%d)\n", *gib, time.Since(start).Round(time.Millisecond), sink)
}

var keep [][]byte
