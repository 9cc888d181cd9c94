package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// Output formats: one vocabulary for every command's --format (docs/rebuild.md's
// "Output formats" table says which command takes which).
const (
	formatText  = "text"  // for people: aligned columns, or a bare value
	formatJSON  = "json"  // one JSON document
	formatJSONL = "jsonl" // one JSON object per line
	formatTSV   = "tsv"   // tab-separated fields, one row per line
)

// formatsFlag is --format taking the formats in allowed, def when not
// given ("" for a default the command decides).
func formatsFlag(def string, allowed ...string) cli.Flag {
	usage := strings.Join(allowed, ", ")
	if def == "" {
		usage += " (default: see below)"
	}
	return &cli.StringFlag{Name: "format", Value: def, Usage: usage}
}

// formatOf returns --format, checked against allowed.
func formatOf(c *cli.Context, allowed ...string) (string, error) {
	return checkFormat(c.Command.Name, c.String("format"), allowed...)
}

// checkFormat returns format if command takes it (it is in allowed).
func checkFormat(command, format string, allowed ...string) (string, error) {
	for _, a := range allowed {
		if format == a {
			return format, nil
		}
	}
	return "", &usageError{msg: fmt.Sprintf("--format %q: %s takes %s", format, command, strings.Join(allowed, ", ")),
		hint: fmt.Sprintf("kmaterialize %s --format %s", command, allowed[0])}
}
