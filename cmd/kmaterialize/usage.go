package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/internal/suggest"
)

// What urfave/cli (through the standard flag package) says about a bad
// command line, rewritten here into a message that says what to type
// instead: the nearest flag for an unknown one, the place of a global flag
// given after the command, the unit of a duration given without one.
var (
	// flagNotDefined is flag's "flag provided but not defined: -broker".
	flagNotDefined = regexp.MustCompile(`^flag provided but not defined: -+(.+)$`)
	// flagBadValue is flag's `invalid value "30" for flag -stall-timeout: parse error`.
	flagBadValue = regexp.MustCompile(`^invalid value "(.*)" for flag -+(\S+): (.*)$`)
)

// explainUsage turns urfave's flag error err, met while parsing the flags
// of c.Command (the root command for the global flags), into a usageError
// with a hint. args are the process's arguments, to find a global flag's
// value.
func explainUsage(c *cli.Context, err error, args []string) error {
	root := c.Command == nil || c.Command.Name == "" || c.Command.Name == c.App.Name
	var flags []cli.Flag
	cmdName := ""
	if root {
		flags = c.App.Flags
	} else {
		flags = c.Command.Flags
		cmdName = c.Command.Name
	}
	helpOf := "kmaterialize --help"
	if cmdName != "" {
		helpOf = "kmaterialize " + cmdName + " --help"
	}
	msg := err.Error()
	if m := flagNotDefined.FindStringSubmatch(msg); m != nil {
		name := m[1]
		if cmdName != "" && findFlag(c.App.Flags, name) != nil {
			// A global flag after the command: say where it goes, with
			// the user's own value.
			value := flagValue(args, name)
			return &usageError{
				msg:  fmt.Sprintf("--%s is a global flag: it goes before the command (%s)", name, cmdName),
				hint: fmt.Sprintf("kmaterialize --%s %s %s ...", name, value, cmdName),
			}
		}
		if root {
			if cmd := commandWithFlag(c.App.Commands, name); cmd != "" {
				return &usageError{
					msg:  fmt.Sprintf("--%s is a flag of the command, not a global flag: it goes after the command name", name),
					hint: fmt.Sprintf("kmaterialize %s --%s ... (kmaterialize %s --help)", cmd, name, cmd),
				}
			}
		}
		what := "unknown global flag"
		if cmdName != "" {
			what = cmdName + ": unknown flag"
		}
		if near := suggest.Nearest(name, flagNames(flags)); near != "" {
			return &usageError{msg: fmt.Sprintf("%s %s; did you mean %s?", what, dashed(name), dashed(near)), hint: helpOf}
		}
		return &usageError{msg: fmt.Sprintf("%s %s", what, dashed(name)), hint: helpOf}
	}
	if m := flagBadValue.FindStringSubmatch(msg); m != nil {
		value, name := m[1], m[2]
		if _, ok := findFlag(flags, name).(*cli.DurationFlag); ok {
			if fixed, ok := suggest.Duration(value); ok {
				return &usageError{
					msg:  fmt.Sprintf("--%s %s: a duration needs a unit: use %s", name, value, fixed),
					hint: fmt.Sprintf("--%s %s (units: ms, s, m, h)", name, fixed),
				}
			}
			return &usageError{
				msg:  fmt.Sprintf("--%s %q: not a duration", name, value),
				hint: fmt.Sprintf("--%s 30s (a number with a unit: ms, s, m, h; e.g. 1m30s)", name),
			}
		}
		return &usageError{msg: fmt.Sprintf("--%s %q: %s", name, value, m[3]), hint: helpOf}
	}
	return &usageError{msg: msg, hint: helpOf}
}

// unknownCommand is the error for a command name the app does not have,
// with the nearest one when there is one.
func unknownCommand(app *cli.App, name string) error {
	var names []string
	for _, cmd := range app.Commands {
		if !cmd.Hidden {
			names = append(names, cmd.Names()...)
		}
	}
	if near := suggest.Nearest(name, names); near != "" {
		return &usageError{msg: fmt.Sprintf("unknown command %q; did you mean %q?", name, near), hint: "kmaterialize help " + near}
	}
	return &usageError{msg: fmt.Sprintf("unknown command %q", name), hint: "kmaterialize help lists the commands"}
}

// flagValue returns the value given with --name in args ("VALUE" when it
// cannot be found), for a hint that repeats the user's own command.
func flagValue(args []string, name string) string {
	if v, ok := givenValue(args, name); ok {
		return v
	}
	return "VALUE"
}

// givenValue is the value of the flag named name (or one of its aliases) in
// args: --name VALUE, --name=VALUE, -name VALUE.
func givenValue(args []string, names ...string) (string, bool) {
	for i, a := range args {
		if a == "--" {
			break
		}
		for _, name := range names {
			for _, prefix := range []string{"--" + name, "-" + name} {
				if v, ok := strings.CutPrefix(a, prefix+"="); ok && v != "" {
					return v, true
				}
				if a == prefix && i+1 < len(args) && args[i+1] != "" && !strings.HasPrefix(args[i+1], "-") {
					return args[i+1], true
				}
			}
		}
	}
	return "", false
}

// placeholders are the stand-ins that hints use for the user's own values,
// with the flags (and environment variable) that give them. None of them
// is a secret.
var placeholders = []struct {
	text  string // as it appears in a hint
	flag  string // "--db " + the value replaces text
	names []string
	env   string
}{
	{"--db PATH", "--db", []string{"db"}, "KMATERIALIZE_DB"},
	{"--db FILE", "--db", []string{"db"}, "KMATERIALIZE_DB"},
	{"--brokers HOST:PORT", "--brokers", []string{"brokers", "b"}, "KMATERIALIZE_BROKERS"},
	{"--brokers B", "--brokers", []string{"brokers", "b"}, "KMATERIALIZE_BROKERS"},
	{"--topic TOPIC", "--topic", []string{"topic", "t"}, ""},
	{"--table NAME", "--table", []string{"table"}, ""},
	{"--from ledger", "--from", []string{"from"}, ""},
	{"--to ledger-copy", "--to", []string{"to"}, ""},
	{"--group ledger-copier", "--group", []string{"group"}, ""},
	{"--transactional-id ledger-copier-1", "--transactional-id", []string{"transactional-id"}, ""},
}

// personalHint puts the user's own values (from args, or their
// environment variables) in place of a hint's placeholders: "kmaterialize
// tables --db PATH" after a run with --db /data/t.db is "kmaterialize
// tables --db /data/t.db".
func personalHint(h string, args []string, getenv func(string) string) string {
	for _, p := range placeholders {
		if !strings.Contains(h, p.text) {
			continue
		}
		v, ok := givenValue(args, p.names...)
		if !ok && p.env != "" {
			v = getenv(p.env)
			ok = v != ""
		}
		if ok && !strings.ContainsAny(v, " \t\n'\"") {
			h = strings.ReplaceAll(h, p.text, p.flag+" "+v)
		}
	}
	return h
}

func findFlag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			return f
		}
	}
	return nil
}

// commandWithFlag is the first command that has flag name, or "".
func commandWithFlag(cmds []*cli.Command, name string) string {
	for _, cmd := range cmds {
		if !cmd.Hidden && findFlag(cmd.Flags, name) != nil {
			return cmd.Name
		}
	}
	return ""
}

// flagNames are the long names of flags (a one-letter alias is too short to
// be a typo of anything), help included.
func flagNames(flags []cli.Flag) []string {
	var out []string
	for _, f := range flags {
		for _, n := range f.Names() {
			if len(n) > 1 {
				out = append(out, n)
			}
		}
	}
	return append(out, "help")
}

// dashed is a flag name as it is typed: -X, --brokers.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}
