package decode

import (
	"errors"
	"fmt"
)

// ErrUnavailable is returned (as a *RegistryError) when the Schema
// Registry cannot be reached, refuses the credentials (401, 403) or
// answers with a server error after the client's retries. No record is at
// fault: the run fails (the CLI's exit 5), whatever --on-bad-record says.
var ErrUnavailable = errors.New("schema registry unavailable")

// ErrBadSetting is returned (as a *SettingError) by New for settings that
// cannot work: an unknown format, a registry format without a registry
// URL, a malformed URL, conflicting credentials. Bad usage, before any
// record is read.
var ErrBadSetting = errors.New("invalid decode setting")

// RegistryError is a failed request to the Schema Registry. It matches
// ErrUnavailable. Its message holds no credential.
type RegistryError struct {
	URL string // without user information
	// What was asked, e.g. "schema id 7".
	What string
	// Where is the record that needed it, e.g. "orders/2@17".
	Where string
	Msg   string // the cause's message, credentials removed
	Err   error
}

// Error returns e.g. `schema registry http://sr:8081: fetching schema id 7
// for record orders/2@17: dial tcp 127.0.0.1:8081: connect: connection refused`.
func (e *RegistryError) Error() string {
	return fmt.Sprintf("schema registry %s: fetching %s for record %s: %s", e.URL, e.What, e.Where, e.Msg)
}

// Unwrap returns the cause.
func (e *RegistryError) Unwrap() error { return e.Err }

// Is reports whether target is ErrUnavailable.
func (e *RegistryError) Is(target error) bool { return target == ErrUnavailable }

// SettingError is a decode setting that cannot work. It matches
// ErrBadSetting.
type SettingError struct {
	Msg string
	Err error
}

func (e *SettingError) Error() string { return e.Msg }

// Unwrap returns the cause, if any.
func (e *SettingError) Unwrap() error { return e.Err }

// Is reports whether target is ErrBadSetting.
func (e *SettingError) Is(target error) bool { return target == ErrBadSetting }
