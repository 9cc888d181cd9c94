package suggest

import (
	"strconv"
	"time"
)

// Duration says what a duration given without a unit should have been:
// "30" is "30s" (a bare number read as seconds, the unit of every default
// shown in help and config), "1.5" is "1.5s". ok is false for anything that
// is not a plain non-negative decimal number, for a value that already
// parses as a duration, and for a number of seconds too large for one
// (time.Duration holds about 292 years).
func Duration(value string) (hint string, ok bool) {
	if value == "" || len(value) > 32 {
		return "", false
	}
	if _, err := time.ParseDuration(value); err == nil {
		return "", false
	}
	for i, r := range value {
		if (r < '0' || r > '9') && (r != '.' || i == 0) {
			return "", false
		}
	}
	f, err := strconv.ParseFloat(value, 64)
	if err != nil || f >= float64(1<<62)/float64(time.Second) {
		return "", false
	}
	return value + "s", true
}
