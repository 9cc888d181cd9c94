package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/store"
)

// pageCheckCommandName is the hidden subcommand that walks a database's
// pages in a child process: bbolt reports some damage by panicking in a
// goroutine of its own, which would end the process that runs the walk (see
// store.PageCheck). Its output is for the parent only.
const pageCheckCommandName = "internal-page-check"

// pageCheckGOGCEnv carries the parent's GOGC (empty when unset) to the
// page-check child, which pageCheck starts with GOGC=off: the child is this
// whole executable, whose package initialization allocates several MB (the
// Schema Registry serdes build their descriptors) and would run one or two
// collections for nothing, about 4 ms of a daemon's start on two cores. The
// child's action restores the parent's setting before the walk.
const pageCheckGOGCEnv = "KMATERIALIZE_PAGE_CHECK_GOGC"

func pageCheckCommand() *cli.Command {
	return &cli.Command{
		Name:   pageCheckCommandName,
		Hidden: true,
		Usage:  "walk the database's pages (run by kmaterialize itself in a child process)",
		Flags: []cli.Flag{
			dbFlag(true),
			lockTimeoutFlag(),
			&cli.BoolFlag{Name: "full", Usage: "bbolt's full consistency check"},
		},
		Action: func(c *cli.Context) error {
			restorePageCheckGC()
			return store.PageCheckMain(c.String("db"), lockTimeout(c), c.Bool("full"), stdoutOf(c))
		},
	}
}

// pageCheckMain runs the hidden command as pageCheck starts it (its name,
// --db PATH, --lock-timeout DURATION and perhaps --full) without building
// the CLI, which takes its commands' construction, a millisecond or more of
// the child's start, for nothing. ok is false for any other command line,
// which the CLI then runs (and reports, if it is wrong).
func pageCheckMain(args []string, stdout, stderr io.Writer) (code int, ok bool) {
	pa, ok := parsePageCheckArgs(args)
	if !ok {
		return 0, false
	}
	restorePageCheckGC()
	if err := store.PageCheckMain(pa.db, pa.timeout, pa.full, stdout); err != nil {
		fmt.Fprintf(stderr, "kmaterialize: %s\n", err)
		return 1, true
	}
	return 0, true
}

// pageCheckArgs are the hidden command's flags.
type pageCheckArgs struct {
	db      string
	timeout time.Duration // as store.Options wants it (storeLockTimeout)
	full    bool
}

// parsePageCheckArgs reads args (the whole command line) as the hidden
// command with its flags and nothing else; ok is false for anything else.
func parsePageCheckArgs(args []string) (pa pageCheckArgs, ok bool) {
	if len(args) < 2 || args[1] != pageCheckCommandName {
		return pa, false
	}
	fs := flag.NewFlagSet(pageCheckCommandName, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&pa.db, "db", "", "")
	fs.DurationVar(&pa.timeout, "lock-timeout", store.DefaultLockTimeout, "")
	fs.BoolVar(&pa.full, "full", false, "")
	if fs.Parse(args[2:]) != nil || fs.NArg() > 0 || pa.db == "" {
		return pageCheckArgs{}, false
	}
	pa.timeout = storeLockTimeout(pa.timeout)
	return pa, true
}

// pageCheck runs the page walk in a child: this same executable with the
// hidden subcommand.
var pageCheck = store.ChildPageCheck(func(ctx context.Context, path string, timeout time.Duration, full bool) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	args := []string{pageCheckCommandName, "--db", path, "--lock-timeout", timeout.String()}
	if full {
		args = append(args, "--full")
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	// The last of a duplicated variable wins.
	cmd.Env = append(os.Environ(), "GOGC=off", pageCheckGOGCEnv+"="+os.Getenv("GOGC"))
	return cmd
})

// restorePageCheckGC sets the collector as the parent's GOGC would have
// (read as the runtime reads it: off, a decimal percentage, anything else
// 100) when pageCheck started this process; otherwise GOGC was this
// process's own already.
func restorePageCheckGC() {
	v, ok := os.LookupEnv(pageCheckGOGCEnv)
	if !ok {
		return
	}
	percent := 100
	if v == "off" {
		percent = -1
	} else if n, err := strconv.ParseInt(v, 10, 32); err == nil && !strings.HasPrefix(v, "+") {
		percent = int(n)
	}
	debug.SetGCPercent(percent)
}
