package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/replay"
)

// progress shows a rebuild's per-partition position against its end mark:
// redrawn in place on a terminal, as log lines at an interval otherwise.
type progress struct {
	w        io.Writer
	log      zerolog.Logger
	tty      bool
	interval time.Duration
	lines    int
	last     replay.Progress
	lastLog  time.Time
}

func newProgress(w io.Writer, log zerolog.Logger, interval time.Duration) *progress {
	return &progress{w: w, log: log, tty: isTerminal(w), interval: interval, lastLog: time.Now()}
}

// tick is how often the replay should call update.
func (p *progress) tick() time.Duration {
	if p.tty {
		return 200 * time.Millisecond
	}
	return time.Second
}

func (p *progress) update(pr replay.Progress) {
	p.last = pr
	if p.tty {
		p.draw(pr)
		return
	}
	if time.Since(p.lastLog) < p.interval {
		return
	}
	p.lastLog = time.Now()
	for _, pp := range pr.Partitions {
		if pp.State == replay.StateDone {
			continue
		}
		ev := p.log.Info().Str(keyTopic, pr.Topic).Int32(keyPartition, pp.Partition).
			Int64("position", pp.Position).Int64("end", pp.End).Str("state", string(pp.State))
		ev.Msg("progress")
	}
	p.log.Info().Str(keyTopic, pr.Topic).Int64("records", pr.Records).Int("partitions_done", done(pr)).
		Int("partitions", len(pr.Partitions)).Msg("progress")
}

func done(pr replay.Progress) int {
	n := 0
	for _, pp := range pr.Partitions {
		if pp.State == replay.StateDone {
			n++
		}
	}
	return n
}

func (p *progress) draw(pr replay.Progress) {
	var b strings.Builder
	if p.lines > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", p.lines)
	}
	rate := 0.0
	if s := pr.Elapsed.Seconds(); s > 0 {
		rate = float64(pr.Records) / s
	}
	fmt.Fprintf(&b, "\x1b[2K%s: %d records, %.0f/s, %d/%d partitions done\n", pr.Topic, pr.Records, rate, done(pr), len(pr.Partitions))
	for _, pp := range pr.Partitions {
		span := pp.End - pp.Start
		frac := 1.0
		if span > 0 {
			frac = float64(pp.Position-pp.Start) / float64(span)
		}
		n := int(frac * 30)
		bar := strings.Repeat("#", n) + strings.Repeat(".", 30-n)
		note := ""
		if pp.State == replay.StateWaiting {
			note = fmt.Sprintf("  waiting: open transaction holds the LSO at %d", pp.Position)
		}
		fmt.Fprintf(&b, "\x1b[2K  p%-3d [%s] %d/%d%s\n", pp.Partition, bar, pp.Position, pp.End, note)
	}
	p.lines = 1 + len(pr.Partitions)
	fmt.Fprint(p.w, b.String())
}

func (p *progress) finish() {}
