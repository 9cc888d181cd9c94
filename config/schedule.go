package config

import "github.com/kmaterialize/kmaterialize/internal/schedule"

// CheckSchedule checks a table's schedule with the daemon's own rule
// (package internal/schedule): "" (unscheduled), "@every DURATION", or 5
// cron fields.
func CheckSchedule(s string) error {
	_, err := schedule.Parse(s)
	return err
}
