package main

import (
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/internal/progressview"
)

// progressFlag is --progress, for every command that reads partitions
// (rebuild, copy, verify).
func progressFlag() cli.Flag {
	return &cli.StringFlag{Name: "progress", Value: "auto",
		Usage: "auto (bars on a terminal, log lines otherwise), bars (one bar per partition), lines (a progress log line per partition every --progress-interval) or off"}
}

func progressIntervalFlag() cli.Flag {
	return &cli.DurationFlag{Name: "progress-interval", Value: 5 * time.Second, Usage: "how often --progress lines logs progress (the default when stderr is not a terminal)"}
}

// withProgressFlag gives --progress to every command that has
// --progress-interval.
func withProgressFlag(cmd *cli.Command) {
	if hasFlag(cmd, "progress-interval") && !hasFlag(cmd, "progress") {
		cmd.Flags = append(cmd.Flags, progressFlag())
	}
}

// endProgress ends prog as the run ended: done for a clean stop (err nil),
// stopped otherwise.
func endProgress(prog *progressview.View, err error) {
	if err == nil {
		prog.Done()
		return
	}
	prog.Finish()
}

// newProgress returns the command's progress view on stderr: bars on a
// terminal, with the log lines redirected above them; progress log lines
// every --progress-interval otherwise.
func newProgress(c *cli.Context, log zerolog.Logger) (*progressview.View, error) {
	w := stderrOf(c)
	tty := isTerminal(w)
	var mode progressview.Mode
	switch m := c.String("progress"); m {
	case "", "auto":
		mode = progressview.Lines
		if tty {
			mode = progressview.Bars
		}
	case "bars":
		mode = progressview.Bars
	case "lines":
		mode = progressview.Lines
	case "off":
		mode = progressview.Off
	default:
		return nil, usageErrorf("--progress %q: want auto, bars, lines or off", m)
	}
	interval := c.Duration("progress-interval")
	if c.IsSet("progress-interval") && interval <= 0 {
		return nil, usageErrorf("--progress-interval %s: must be positive", interval)
	}
	return progressview.New(progressview.Options{
		Mode: mode, Out: w, Terminal: tty, Interval: interval, Log: log,
		Redirect: logSinkOf(c).redirect,
	}), nil
}
