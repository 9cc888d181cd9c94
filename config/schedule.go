package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// CheckSchedule checks a table's schedule: "" (unscheduled), "@every
// DURATION" (a positive Go duration of at least a second), or a 5-field cron
// expression (minute hour day-of-month month day-of-week, or a descriptor
// such as @hourly). It parses with robfig/cron/v3's standard parser, the one
// gocron's CronJob uses, so what passes here is what the daemon's
// scheduler accepts. The one check of schedule syntax: the daemon uses it
// too.
func CheckSchedule(s string) error {
	if s == "" {
		return nil
	}
	if strings.TrimSpace(s) != s {
		return fmt.Errorf("schedule %q: leading or trailing spaces", s)
	}
	if d, ok := strings.CutPrefix(s, "@every "); ok {
		dur, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil {
			return fmt.Errorf("schedule %q: %q is not a duration (e.g. 10m, 1h30m)", s, d)
		}
		if dur < time.Second {
			return fmt.Errorf("schedule %q: the interval must be at least 1s", s)
		}
		return nil
	}
	if _, err := cron.ParseStandard(s); err != nil {
		return fmt.Errorf("schedule %q: %v; want \"@every DURATION\" or 5 cron fields (minute hour day-of-month month day-of-week)", s, err)
	}
	return nil
}
