package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kmaterialize/kmaterialize/materialize"
)

// ReadMemory is the daemon's read-path share of its memory: the buffers
// and pages of the requests it answers (spool buffers, rows pages, HTTP
// buffers). It is fixed: the request bounds are sized to fit it.
const ReadMemory int64 = 64 << 20

// MinMemory is the smallest memory a table or the daemon may be given
// (as --memory): below it the run files would be tiny and many.
const MinMemory int64 = 1 << 20

// ParseSize parses a memory size: bytes, or a number with a binary unit
// (KiB, MiB, GiB; K, M, G and KB, MB, GB mean the same), at least
// MinMemory. It is the syntax of the CLI's --memory too, which words the
// refusal its own way from the *SizeError.
func ParseSize(s string) (int64, error) {
	bad := func(why, detail string) error { return &SizeError{Value: s, Why: why, Detail: detail} }
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	}
	var mult float64
	switch unit {
	case "", "b":
		mult = 1
	case "k", "kb", "kib":
		mult = 1 << 10
	case "m", "mb", "mib":
		mult = 1 << 20
	case "g", "gb", "gib":
		mult = 1 << 30
	default:
		return 0, bad("unknown unit "+strconv.Quote(unit), " (a size: bytes, or a number with KiB, MiB or GiB, e.g. 256MiB)")
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || n < 0 {
		return 0, bad("not a size", " (bytes, or a number with KiB, MiB or GiB, e.g. 256MiB)")
	}
	v := int64(n * mult)
	if v < MinMemory {
		return 0, bad("below the minimum of 1MiB", "")
	}
	return v, nil
}

// SizeError is a size ParseSize refuses: Why is the reason, Detail the
// syntax reminder that follows it in Error.
type SizeError struct {
	Value, Why, Detail string
}

func (e *SizeError) Error() string { return fmt.Sprintf("%q: %s%s", e.Value, e.Why, e.Detail) }

// FormatSize shows a size in the largest binary unit that divides it
// (bytes otherwise), as ParseSize reads it back.
func FormatSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.name)
		}
	}
	return strconv.FormatInt(n, 10)
}

// MemoryParts are what the daemon's memory must cover. The daemon's
// memory (the config's top-level memory) is at least their Total.
type MemoryParts struct {
	// Followers is the sum of the followed tables' memory: a follower
	// runs all the time, also while its table rebuilds.
	Followers int64
	// FollowerCount is how many tables are followed.
	FollowerCount int
	// Runs is MaxConcurrentRuns times the largest table's memory: the
	// rebuilds and updates that may run at once.
	Runs int64
	// MaxConcurrentRuns is max_concurrent_runs (see maxConcurrentRuns);
	// LargestRun the largest table's memory.
	MaxConcurrentRuns int
	LargestRun        int64
	// Read is the read path's share, ReadMemory.
	Read int64
	// Feeds is what the change feeds of all tables may retain: feed:
	// max_bytes, or its default (FeedMaxBytes).
	Feeds int64
	// Total is Followers + Runs + Read + Feeds.
	Total int64
}

// Defaults of the feed: section, as the daemon applies them (serve.Config,
// package feed): DefaultFeedRetainBytes, and twice it for max_bytes.
const (
	DefaultFeedRetainBytes int64 = 64 << 20
)

// FeedMaxBytes is the change feeds' memory: feed.max_bytes, or twice
// retain_bytes (default DefaultFeedRetainBytes).
func (c *Config) FeedMaxBytes() int64 {
	if c.Feed.MaxBytes > 0 {
		return c.Feed.MaxBytes
	}
	r := c.Feed.RetainBytes
	if r <= 0 {
		r = DefaultFeedRetainBytes
	}
	return 2 * r
}

// tableMemory is a table's memory bound: its memory, or the default.
func tableMemory(s materialize.Spec) int64 {
	if s.Memory > 0 {
		return s.Memory
	}
	return materialize.DefaultMemory
}

// maxConcurrentRuns is how many runs (rebuilds and updates) the daemon
// runs at once: max_concurrent_runs, 1 when the file does not say.
func (c *Config) maxConcurrentRuns() int {
	if c.MaxConcurrentRuns > 0 {
		return c.MaxConcurrentRuns
	}
	return 1
}

// Memory returns what the daemon's memory must cover for c's tables.
func (c *Config) MemoryParts() MemoryParts {
	p := MemoryParts{MaxConcurrentRuns: c.maxConcurrentRuns(), Read: ReadMemory, Feeds: c.FeedMaxBytes()}
	for _, t := range c.Tables {
		m := tableMemory(t.Spec)
		if t.Follow {
			p.Followers += m
			p.FollowerCount++
		}
		p.LargestRun = max(p.LargestRun, m)
	}
	p.Runs = int64(p.MaxConcurrentRuns) * p.LargestRun
	p.Total = p.Followers + p.Runs + p.Read + p.Feeds
	return p
}

// String says how the parts add up, e.g. "followers 2 x 256MiB = 512MiB
// + max_concurrent_runs 1 x the largest table's 256MiB + reads 64MiB +
// change feeds 128MiB =
// 832MiB" (a follower's memory is the sum of the followed tables').
func (p MemoryParts) String() string {
	return fmt.Sprintf("followers (%d) %s + max_concurrent_runs %d x the largest table's %s + reads %s + change feeds %s = %s",
		p.FollowerCount, FormatSize(p.Followers), p.MaxConcurrentRuns, FormatSize(p.LargestRun), FormatSize(p.Read), FormatSize(p.Feeds), FormatSize(p.Total))
}

// checkMemory sets c.Memory: the file's memory, which must cover the
// parts, or their total when the file has none.
func (p *parser) checkMemory(c *Config, memory string) error {
	parts := c.MemoryParts()
	if memory == "" {
		c.Memory = parts.Total
		return nil
	}
	m, err := ParseSize(memory)
	if err != nil {
		return p.errorf(p.line("memory"), "memory", "%v", err)
	}
	if m < parts.Total {
		return p.errorf(p.line("memory"), "memory", "%s is less than what it must cover: %s; raise memory or lower the tables' memory", FormatSize(m), parts)
	}
	c.Memory = m
	return nil
}
