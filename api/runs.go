package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// Run is the run of a table queued or going.
type Run struct {
	ID      uint64
	Trigger string
	// Phase is "queued", "reading" (its replay) or "publishing" (merging,
	// publishing: it ends by itself, and cannot be cancelled).
	Phase    string
	QueuedAt time.Time
	// Started is when it left the queue; zero while it is queued.
	Started time.Time
}

type runWire struct {
	ID       uint64  `json:"id"`
	Trigger  string  `json:"trigger"`
	Phase    string  `json:"phase"`
	QueuedAt string  `json:"queued_at"`
	Started  *string `json:"started"`
}

// MarshalJSON writes r as the daemon sends it.
func (r Run) MarshalJSON() ([]byte, error) {
	return json.Marshal(runWire{ID: r.ID, Trigger: r.Trigger, Phase: r.Phase,
		QueuedAt: r.QueuedAt.UTC().Format(time.RFC3339Nano), Started: secondTime(r.Started)})
}

// UnmarshalJSON reads r as the daemon sends it.
func (r *Run) UnmarshalJSON(b []byte) error {
	var w runWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = Run{ID: w.ID, Trigger: w.Trigger, Phase: w.Phase}
	var err error
	if r.QueuedAt, err = parseTime("queued_at", &w.QueuedAt); err != nil {
		return err
	}
	r.Started, err = parseTime("started", w.Started)
	return err
}

// LastError is a failed run, or why a table's follower stopped (Run 0).
type LastError struct {
	Error string `json:"error"`
	// ExitCode is the exit code `kmaterialize rebuild` would have given.
	ExitCode int       `json:"exit_code"`
	Run      uint64    `json:"run"`
	At       time.Time `json:"at"`
}

type lastErrorWire struct {
	Error    string `json:"error"`
	ExitCode int    `json:"exit_code"`
	Run      uint64 `json:"run"`
	At       string `json:"at"`
}

// MarshalJSON writes e as the daemon sends it: At to the second, in UTC.
func (e LastError) MarshalJSON() ([]byte, error) {
	return json.Marshal(lastErrorWire{Error: e.Error, ExitCode: e.ExitCode, Run: e.Run, At: e.At.UTC().Format(time.RFC3339)})
}

// UnmarshalJSON reads e as the daemon sends it.
func (e *LastError) UnmarshalJSON(b []byte) error {
	var w lastErrorWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	at, err := parseTime("at", &w.At)
	*e = LastError{Error: w.Error, ExitCode: w.ExitCode, Run: w.Run, At: at}
	return err
}

// Retry is the planned retry of a table's failed first build.
type Retry struct {
	// Next is when the retry is queued; zero while it is queued or
	// running.
	Next time.Time
	// Attempts is how many builds failed.
	Attempts int
	// Backoff is the wait before Next.
	Backoff time.Duration
}

type retryWire struct {
	Next     *string `json:"next"`
	Attempts int     `json:"attempts"`
	Backoff  string  `json:"backoff"`
}

// MarshalJSON writes r as the daemon sends it.
func (r Retry) MarshalJSON() ([]byte, error) {
	return json.Marshal(retryWire{Next: nanoTime(r.Next), Attempts: r.Attempts, Backoff: r.Backoff.String()})
}

// UnmarshalJSON reads r as the daemon sends it.
func (r *Retry) UnmarshalJSON(b []byte) error {
	var w retryWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	next, err := parseTime("next", w.Next)
	if err != nil {
		return err
	}
	backoff, err := time.ParseDuration(w.Backoff)
	if err != nil {
		return fmt.Errorf("backoff: %w", err)
	}
	*r = Retry{Next: next, Attempts: w.Attempts, Backoff: backoff}
	return nil
}

// RebuildResult is the answer to POST .../rebuild: {"run"} when it
// started the run (202), the whole of it when it waited for the run (200).
type RebuildResult struct {
	// Run is the run's id.
	Run uint64 `json:"run"`
	// Done is true when the request waited for the run to end; the fields
	// below are set only then.
	Done bool `json:"-"`
	// ExitCode is the exit code `kmaterialize rebuild` would have given:
	// 0 when the run published.
	ExitCode int `json:"exit_code"`
	// Error is the run's error, "" when it published.
	Error string `json:"error"`
	// Generation is the generation published by the run, or (when it
	// failed) the one still served; 0 when there is none.
	Generation uint64 `json:"generation"`
}

// MarshalJSON writes r as the daemon sends it.
func (r RebuildResult) MarshalJSON() ([]byte, error) {
	if !r.Done {
		return json.Marshal(map[string]uint64{"run": r.Run})
	}
	return json.Marshal(struct {
		Run        uint64  `json:"run"`
		ExitCode   int     `json:"exit_code"`
		Error      *string `json:"error"`
		Generation *uint64 `json:"generation"`
	}{r.Run, r.ExitCode, nonEmpty(r.Error), nonZero(r.Generation)})
}

// UpdateResult is the answer to POST .../update: how the run ended.
type UpdateResult struct {
	Run uint64 `json:"run"`
	// ExitCode is the exit code `kmaterialize update` would have given: 0
	// when the run published.
	ExitCode int `json:"exit_code"`
	// Error is the run's error, "" when it published.
	Error string `json:"error"`
	// Generation is the generation published by the run, or (when it
	// failed) the one still served.
	Generation uint64 `json:"generation"`
	// Mode is how the table changed: "in-place", "merged" or "rebuilt";
	// "" when it failed.
	Mode    string `json:"mode"`
	Keys    int64  `json:"keys"`
	Records int64  `json:"records"` // new records the update read
	Updates int64  `json:"updates"` // updates since the last full rebuild
}

// MarshalJSON writes r as the daemon sends it.
func (r UpdateResult) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Run        uint64  `json:"run"`
		ExitCode   int     `json:"exit_code"`
		Error      *string `json:"error"`
		Generation *uint64 `json:"generation"`
		Mode       string  `json:"mode,omitempty"`
		Keys       int64   `json:"keys"`
		Records    int64   `json:"records"`
		Updates    int64   `json:"updates"`
	}{r.Run, r.ExitCode, nonEmpty(r.Error), nonZero(r.Generation), r.Mode, r.Keys, r.Records, r.Updates})
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nonZero[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}
