package config

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid is returned (as an *Error) by Load and Parse when the file
// cannot be read, does not parse, or holds a value that is not allowed.
// Nothing should start on such a config.
var ErrInvalid = errors.New("invalid config")

// ErrUnknownTable is returned (as an *UnknownTableError) by Config.Table
// for a name the file does not define.
var ErrUnknownTable = errors.New("table not in the config")

// Error is a problem with the config file, with where it is. It matches
// ErrInvalid. Its message never holds a secret value.
type Error struct {
	Path  string // the config file; "" when parsed from bytes
	Line  int    // 1-based; 0 when unknown
	Field string // e.g. "tables[1].fold", "kafka.properties.sasl.password"
	Msg   string
	Err   error // the cause, if any
}

// Error returns e.g. `config kmaterialize.yaml:12: tables[1].fold: "sum":
// want latest or count`.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config")
	if e.Path != "" {
		b.WriteString(" " + e.Path)
	}
	if e.Line > 0 {
		if e.Path == "" {
			b.WriteString(" line")
		}
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is ErrInvalid.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// UnknownTableError is a table name the config does not define. It matches
// ErrUnknownTable.
type UnknownTableError struct {
	Path   string
	Name   string
	Tables []string // the names the config defines, in file order
}

// Error returns e.g. `table "x" is not in config k.yaml, which has
// balances, votes`.
func (e *UnknownTableError) Error() string {
	has := "no tables"
	if len(e.Tables) > 0 {
		has = "tables " + strings.Join(e.Tables, ", ")
	}
	return fmt.Sprintf("table %q is not in config %s, which has %s", e.Name, e.Path, has)
}

// Is reports whether target is ErrUnknownTable.
func (e *UnknownTableError) Is(target error) bool { return target == ErrUnknownTable }
