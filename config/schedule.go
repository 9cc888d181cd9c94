package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// CheckSchedule checks a table's schedule: "" (unscheduled), "@every
// DURATION" (a positive Go duration), or a 5-field cron expression (minute
// hour day-of-month month day-of-week) as robfig/cron/v3's standard parser
// reads it, the parser gocron's CronJob uses. Descriptors such as @hourly
// and a seconds field are refused: the daemon's scheduler takes these two
// forms only, and this check must accept exactly what it accepts.
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
		if dur <= 0 {
			return fmt.Errorf("schedule %q: the interval must be positive", s)
		}
		return nil
	}
	want := "want \"@every DURATION\" or 5 cron fields (minute hour day-of-month month day-of-week)"
	if n := len(strings.Fields(s)); n != 5 {
		return fmt.Errorf("schedule %q: %d fields; %s", s, n, want)
	}
	if _, err := cron.ParseStandard(s); err != nil {
		return fmt.Errorf("schedule %q: %v; %s", s, err, want)
	}
	return nil
}
