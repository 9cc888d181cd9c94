package main

import (
	"context"
	"os"
	"os/exec"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/store"
)

// pageCheckCommandName is the hidden subcommand that walks a database's
// pages in a child process: bbolt reports some damage by panicking in a
// goroutine of its own, which would end the process that runs the walk (see
// store.PageCheck). Its output is for the parent only.
const pageCheckCommandName = "internal-page-check"

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
			return store.PageCheckMain(c.String("db"), lockTimeout(c), c.Bool("full"), stdoutOf(c))
		},
	}
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
	return exec.CommandContext(ctx, exe, args...)
})
