// Package progressview shows a run's per-partition progress (a rebuild, a
// copy, a verify): one bar per partition on a terminal (position against
// end, rate, ETA), drawn with mpb, with log lines printed above the bars;
// periodic JSON (or console) progress log lines on any other output.
//
// A bar's last column says how its partition ended: "done" once complete,
// and for a bar left open by a run that stopped cleanly (Done: a copy
// with --max-records, or --follow stopped by a signal); "stopped" where a
// failed or interrupted run left it (Finish). A partition that waits on an
// open transaction shows no rate and no ETA: it is not moving, and an ETA
// from its average rate would be a guess.
//
// A View is fed replay.Progress snapshots by the goroutine that runs the
// work, and closed with Done or Finish by the same owner. It owns the bars'
// render goroutines (mpb's) and ends them there.
package progressview

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/kmaterialize/kmaterialize/replay"
)

// Mode is how progress is shown.
type Mode string

const (
	// Bars draws one bar per partition (for a terminal).
	Bars Mode = "bars"
	// Lines logs the partitions' positions every Interval.
	Lines Mode = "lines"
	// Off shows nothing.
	Off Mode = "off"
)

// Field keys of the progress log lines.
const (
	keyTopic     = "topic"
	keyPartition = "partition"
)

// Options configure a View. Zero values mean the documented defaults.
type Options struct {
	Mode Mode // default Lines
	// Out is where bars are drawn (stderr).
	Out io.Writer
	// Width is the bars' line width; 0 means the terminal's (when Out is
	// one) or 100.
	Width int
	// Terminal says Out is a terminal: bars are redrawn in place there;
	// elsewhere (a file, a test's buffer) each frame is written after the
	// previous one.
	Terminal bool
	// RefreshRate is how often bars are redrawn. Default 150ms.
	RefreshRate time.Duration
	// Interval is how often Lines logs. Default 5s.
	Interval time.Duration
	// Log receives the progress lines (Lines) and nothing else from here.
	Log zerolog.Logger
	// Redirect, if set, is called when the bars start with a writer that
	// prints above them; the function it returns is called when they end.
	// It is how the caller's log lines stay readable while bars are drawn.
	Redirect func(io.Writer) (restore func())
}

// View shows progress. Update and Finish are called by one goroutine
// (the owner of the work); the bars' render goroutines read the state
// under the View's lock.
type View struct {
	o Options

	mu       sync.Mutex
	p        *mpb.Progress
	restore  func()
	bars     map[barKey]*bar
	order    []barKey
	last     replay.Progress
	have     bool // last is set
	logged   bool // last was logged
	lastLog  time.Time
	finished bool
	// clean is set by Done before the open bars are aborted: their
	// decorators (on mpb's goroutines) then say done, not stopped.
	clean atomic.Bool
}

type barKey struct {
	topic     string
	partition int32
}

type bar struct {
	b *mpb.Bar
	// state is what the decorators show. They run on the bar's own
	// goroutine while Update may be waiting for it (SetCurrent) with the
	// View's lock held, so they read this, never the lock.
	state atomic.Pointer[replay.PartitionProgress]
}

// New returns a View; nothing is drawn before the first Update.
func New(o Options) *View {
	if o.Mode == "" {
		o.Mode = Lines
	}
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
	}
	if o.RefreshRate <= 0 {
		o.RefreshRate = 150 * time.Millisecond
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	return &View{o: o, bars: map[barKey]*bar{}, lastLog: time.Now()}
}

// Tick is how often the work should call Update.
func (v *View) Tick() time.Duration {
	if v.o.Mode == Bars {
		return 200 * time.Millisecond
	}
	return time.Second
}

// Update shows a snapshot: bars are moved to it, or, every Interval, it is
// logged.
func (v *View) Update(pr replay.Progress) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.finished {
		return
	}
	if v.o.Mode == Lines && v.have && !v.logged && v.last.Topic != pr.Topic {
		// The previous topic's read ended (verify reads two): its last
		// snapshot is its final one.
		v.logLocked(v.last, true)
	}
	v.last, v.have, v.logged = pr, true, false
	switch v.o.Mode {
	case Bars:
		v.draw(pr)
	case Lines:
		if time.Since(v.lastLog) >= v.o.Interval {
			v.logLocked(pr, false)
		}
	}
}

// Done is Finish for a run that ended cleanly: a bar still open (a copy
// that stopped at --max-records, or after a signal with --follow) stops
// where it is and says done.
func (v *View) Done() {
	v.clean.Store(true)
	v.Finish()
}

// Finish shows the last snapshot as it ended (the bars stop where they
// are, complete or not, an open one saying stopped; Lines logs it, every
// partition, unless it was logged already) and stops the bars' goroutines.
// The View shows nothing after it; a second call (a deferred Finish after
// Done) does nothing.
func (v *View) Finish() {
	v.mu.Lock()
	if v.finished {
		v.mu.Unlock()
		return
	}
	v.finished = true
	if v.o.Mode == Lines && v.have && !v.logged {
		v.logLocked(v.last, true)
	}
	p, restore := v.p, v.restore
	var open []*mpb.Bar
	for _, k := range v.order {
		if b := v.bars[k]; !b.b.Completed() {
			open = append(open, b.b)
		}
	}
	v.mu.Unlock()
	if p == nil {
		return
	}
	// An incomplete bar (a failed run, a partition waiting on an open
	// transaction) is aborted in place, so that Wait returns and the last
	// frame shows where it stopped.
	for _, b := range open {
		b.Abort(false)
	}
	p.Wait()
	if restore != nil {
		restore()
	}
}

// logLocked logs pr: a line per partition still being read (every
// partition when final), then a summary line.
func (v *View) logLocked(pr replay.Progress, final bool) {
	v.lastLog, v.logged = time.Now(), true
	done := 0
	for _, pp := range pr.Partitions {
		if pp.State == replay.StateDone {
			done++
			if !final {
				continue
			}
		}
		v.o.Log.Info().Str(keyTopic, pr.Topic).Int32(keyPartition, pp.Partition).
			Int64("position", pp.Position).Int64("end", pp.End).Str("state", string(pp.State)).Msg("progress")
	}
	v.o.Log.Info().Str(keyTopic, pr.Topic).Int64("records", pr.Records).Int("partitions_done", done).
		Int("partitions", len(pr.Partitions)).Msg("progress")
}

// draw moves each partition's bar to the snapshot, adding bars for
// partitions (or a topic) not seen before.
func (v *View) draw(pr replay.Progress) {
	if v.p == nil {
		opts := []mpb.ContainerOption{mpb.WithOutput(v.o.Out), mpb.WithRefreshRate(v.o.RefreshRate)}
		if !v.o.Terminal {
			opts = append(opts, mpb.WithAutoRefresh())
		}
		w := v.o.Width
		if w <= 0 && !v.o.Terminal {
			w = 100
		}
		if w > 0 {
			opts = append(opts, mpb.WithWidth(w))
		}
		v.p = mpb.New(opts...)
		if v.o.Redirect != nil {
			v.restore = v.o.Redirect(&aboveBars{p: v.p, fallback: v.o.Out})
		}
	}
	for _, pp := range pr.Partitions {
		k := barKey{pr.Topic, pp.Partition}
		b := v.bars[k]
		if b == nil {
			b = v.newBar(k)
			v.bars[k] = b
			v.order = append(v.order, k)
		}
		b.state.Store(&pp)
		span := pp.End - pp.Start
		cur := min(max(pp.Position-pp.Start, 0), max(span, 0))
		if b.b.Completed() || b.b.Aborted() {
			continue
		}
		switch {
		case pp.State == replay.StateDone:
			// Complete at the end mark, whatever the span (an empty
			// partition has none).
			b.b.SetTotal(max(span, cur), false)
			b.b.SetCurrent(max(span, cur))
			b.b.SetTotal(-1, true)
		case span > 0:
			b.b.SetTotal(span, false)
			b.b.SetCurrent(cur)
		}
	}
}

func (v *View) newBar(k barKey) *bar {
	b := &bar{}
	label := fmt.Sprintf("%s p%d", k.topic, k.partition)
	state := func() replay.PartitionProgress {
		if s := b.state.Load(); s != nil {
			return *s
		}
		return replay.PartitionProgress{Partition: k.partition}
	}
	b.b = v.p.AddBar(0,
		mpb.PrependDecorators(decor.Name(label, decor.WCSyncSpaceR)),
		mpb.AppendDecorators(
			decor.Any(func(decor.Statistics) string {
				s := state()
				return fmt.Sprintf("%d/%d", s.Position, s.End)
			}, decor.WCSyncSpace),
			// No rate or ETA while the partition waits on an open
			// transaction: it is not moving.
			override(decor.AverageSpeed(0, "%.0f offsets/s", decor.WCSyncSpace), func(decor.Statistics) (string, bool) {
				return "", state().State == replay.StateWaiting
			}),
			override(decor.AverageETA(decor.ET_STYLE_GO, decor.WCSyncSpace), func(st decor.Statistics) (string, bool) {
				switch {
				case st.Completed, st.Aborted && v.clean.Load():
					return "done", true
				case st.Aborted:
					return "stopped", true
				case state().State == replay.StateWaiting:
					return "", true
				}
				return "", false
			}),
			decor.Any(func(decor.Statistics) string {
				if s := state(); s.State == replay.StateWaiting {
					return fmt.Sprintf("waiting: an open transaction holds the LSO at %d", s.Position)
				}
				return ""
			}, decor.WCSyncSpace),
		),
	)
	return b
}

// override shows what instead returns, when it says so, in place of d's
// own text (in d's column). It unwraps to d, so mpb still drives d (the
// average decorators' start time).
func override(d decor.Decorator, instead func(decor.Statistics) (string, bool)) decor.Decorator {
	return overridden{d, instead}
}

type overridden struct {
	decor.Decorator
	instead func(decor.Statistics) (string, bool)
}

func (o overridden) Decor(st decor.Statistics) (string, int) {
	if str, ok := o.instead(st); ok {
		return o.Format(str)
	}
	return o.Decorator.Decor(st)
}

func (o overridden) Unwrap() decor.Decorator { return o.Decorator }

// aboveBars writes log lines above the bars while they are drawn, and to
// fallback once the bars' container has ended (a line logged between
// Finish's Wait and the restore is not lost).
type aboveBars struct {
	p        *mpb.Progress
	fallback io.Writer
}

func (a *aboveBars) Write(b []byte) (int, error) {
	n, err := a.p.Write(b)
	var done mpb.ErrDone[*mpb.Progress]
	if err != nil && errors.As(err, &done) {
		return a.fallback.Write(b)
	}
	return n, err
}
