// Package schedule owns the one rule for a table's schedule, shared by the
// config file's check and the daemon's scheduler, so that what a config
// accepts is exactly what the daemon runs.
//
// A schedule is "" (unscheduled), "@every DURATION" (a positive Go
// duration), or a 5-field cron expression (minute hour day-of-month month
// day-of-week) as robfig/cron/v3's standard parser reads it, the parser
// gocron's CronJob uses. Descriptors such as @hourly and a seconds field are
// refused.
package schedule

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Spec is a parsed schedule: exactly one of Every and Cron is set, or
// neither for an unscheduled table.
type Spec struct {
	Every time.Duration
	Cron  string
}

const want = `want "@every DURATION" (e.g. "@every 10m") or 5 cron fields (minute hour day-of-month month day-of-week)`

// Parse parses s. Its errors name s and say what is accepted.
func Parse(s string) (Spec, error) {
	if s == "" {
		return Spec{}, nil
	}
	if strings.TrimSpace(s) != s {
		return Spec{}, fmt.Errorf("schedule %q: leading or trailing spaces", s)
	}
	if rest, ok := strings.CutPrefix(s, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return Spec{}, fmt.Errorf("schedule %q: %q is not a duration; %s", s, rest, want)
		}
		if d <= 0 {
			return Spec{}, fmt.Errorf("schedule %q: the interval must be positive", s)
		}
		return Spec{Every: d}, nil
	}
	if n := len(strings.Fields(s)); n != 5 {
		return Spec{}, fmt.Errorf("schedule %q: %d fields; %s", s, n, want)
	}
	if _, err := cron.ParseStandard(s); err != nil {
		return Spec{}, fmt.Errorf("schedule %q: %v; %s", s, err, want)
	}
	return Spec{Cron: s}, nil
}
