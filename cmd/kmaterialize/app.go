package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/config"
)

// processOptions are what the process decides about a run, not its command
// line: main sets them, run (what tests call in their own process) leaves
// them zero.
type processOptions struct {
	// limitGoMemory: rebuild and update set the Go runtime's soft memory
	// limit from their --memory (limitGoMemory) for the run. The limit is
	// the process's: only the kmaterialize process may set it, not a test
	// that shares its runtime with the other tests of its binary.
	limitGoMemory bool
}

// metaProcess is the App.Metadata key of the run's processOptions.
const metaProcess = "process"

// run builds the app and maps its error to an exit code; it is main without
// the process, so tests can call it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runProcess(ctx, args, stdout, stderr, processOptions{})
}

// runProcess is run with the process's options.
func runProcess(ctx context.Context, args []string, stdout, stderr io.Writer, po processOptions) int {
	app := newApp(args, stdout, stderr)
	app.Metadata[metaProcess] = po
	unknown := ""
	app.CommandNotFound = func(_ *cli.Context, name string) { unknown = name }
	err := app.RunContext(ctx, args)
	if err == nil && unknown != "" {
		err = unknownCommand(app, unknown)
	}
	return finish(app, err, args, stderr)
}

// newApp is the CLI: its commands, flags and the hooks every command gets.
// args are the command line it will run, for the usage errors' hints.
func newApp(args []string, stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:  "kmaterialize",
		Usage: "rebuild tables from Kafka topics into an embedded bbolt database",
		Description: `kmaterialize replays a Kafka topic up to the end offsets captured when it
starts, folds the records into a fresh generation of a table, and publishes it
atomically only when every partition is complete. It never joins, commits to,
resets or deletes any consumer group.

Exit codes: 0 ok, 1 unexpected error (also a corrupt database), 2 bad usage,
3 data conflict, 4 incomplete replay, 5 Kafka unavailable or topic missing,
6 key/table not found, 7 database busy (held by another process).

Try: kmaterialize demo (and kmaterialize help COMMAND)`,
		Writer:    stdout,
		ErrWriter: stderr,
		// --version (-v) prints readBuildInfo (version.go); completion
		// scripts ask the binary with --generate-bash-completion.
		Version:              readBuildInfo().Version,
		EnableBashCompletion: true,
		// A librdkafka value holds commas (-X debug=broker,security, -X
		// bootstrap.servers=a:9092,b:9092): repeatable flags are repeated,
		// never split at commas.
		DisableSliceFlagSeparator: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "log `LEVEL`: debug, info, warn or error; before the command name"},
			&cli.StringFlag{Name: "log-format", Value: "auto", Usage: "log `FORMAT`: auto (console on a terminal, JSON lines otherwise), console or json; before the command name"},
		},
		Commands: []*cli.Command{
			rebuildCommand(),
			updateCommand(),
			importCommand(),
			getCommand(),
			scanCommand(),
			exportCommand(),
			tablesCommand(),
			checkCommand(),
			describeCommand(),
			copyCommand(),
			verifyCommand(),
			serveCommand(),
			demoCommand(),
			devCommand(),
			pageCheckCommand(),
			compactCommand(),
			backupCommand(),
			dropCommand(),
			completionCommand(),
			rollbackCommand(),
			diffCommand(),
			watchCommand(),
			partitionCommand(),
		},
		ExitErrHandler: func(*cli.Context, error) {}, // exit codes are mapped below
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return explainUsage(c, err, args)
		},
	}
	// A command's flag errors go to the command's OnUsageError, not the
	// app's: without this an unknown flag of a command would exit 1.
	for _, cmd := range app.Commands {
		if cmd.OnUsageError == nil {
			cmd.OnUsageError = app.OnUsageError
		}
		checkRequired(cmd)
		// Between the two: a routed rebuild needs no --topic, and --config
		// may name the database.
		withDaemon(cmd)
		// After checkRequired: the file's values count as given.
		withConfig(cmd)
		withPropsFile(cmd)
		withProgressFlag(cmd)
		withInternalStack(cmd)
	}
	app.Metadata = map[string]any{"stdout": stdout, "stderr": stderr}
	return app
}

// finish prints err with its hint on stderr and returns its exit code.
func finish(app *cli.App, err error, args []string, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	removeCreatedDB(app)
	code := exitCode(err)
	// The final error passes the run's Redactor too: it may quote a
	// library's message that quotes a secret.
	msg, h := err.Error(), personalHint(hint(err), args[1:], os.Getenv)
	if red, ok := app.Metadata[metaRedactor].(*config.Redactor); ok {
		msg, h = red.String(msg), red.String(h)
	}
	fmt.Fprintf(stderr, "kmaterialize: %s\n", msg)
	if h != "" {
		fmt.Fprintf(stderr, "Try: %s\n", h)
	}
	return code
}

// processOf returns the run's processOptions (zero when run set none).
func processOf(c *cli.Context) processOptions {
	po, _ := c.App.Metadata[metaProcess].(processOptions)
	return po
}

func stdoutOf(c *cli.Context) io.Writer {
	if w, ok := c.App.Metadata["stdout"].(io.Writer); ok {
		return w
	}
	return os.Stdout
}

func stderrOf(c *cli.Context) io.Writer {
	if w, ok := c.App.Metadata["stderr"].(io.Writer); ok {
		return w
	}
	return os.Stderr
}

// usageError is bad input from the command line: exit code 2.
type usageError struct{ msg, hint string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

func isUsage(err error) bool {
	var u *usageError
	return errors.As(err, &u)
}

// checkRequired moves urfave/cli's required-flag check into the command's
// action, where a missing flag becomes a usage error (exit 2): urfave's own
// check returns an error of an unexported type that would exit 1.
func checkRequired(cmd *cli.Command) {
	var required []string
	for _, f := range cmd.Flags {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Required {
			sf.Required = false
			sf.Usage += " (required)"
			required = append(required, sf.Name)
		}
	}
	if len(required) == 0 || cmd.Action == nil {
		return
	}
	action := cmd.Action
	cmd.Action = func(c *cli.Context) error {
		for _, name := range required {
			if c.String(name) == "" {
				return &usageError{msg: fmt.Sprintf("--%s is required", name), hint: "kmaterialize " + cmd.Name + " --help"}
			}
		}
		return action(c)
	}
}
