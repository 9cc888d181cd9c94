package schedule

import (
	"testing"
)

// FuzzParse: whatever a table's schedule says, Parse never panics; it
// fails, or returns exactly one of a positive interval and a cron
// expression (neither for ""), which written back parses the same.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "@every 10m", "@every 1h30m", "@every 0s", "@every -1m", "@every  5s", "*/5 * * * *", "0 3 * * 1-5", "@hourly", "0 0 0 * * *", " @every 1m", "61 * * * *", "@every 9223372036854775807ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := Parse(s)
		if err != nil {
			return
		}
		switch {
		case s == "":
			if spec != (Spec{}) {
				t.Fatalf(`"" parsed to %+v`, spec)
			}
			return
		case spec.Every > 0 && spec.Cron == "":
			again, err := Parse("@every " + spec.Every.String())
			if err != nil || again != spec {
				t.Fatalf("%q -> %+v -> %+v, %v", s, spec, again, err)
			}
		case spec.Every == 0 && spec.Cron != "":
			again, err := Parse(spec.Cron)
			if err != nil || again != spec {
				t.Fatalf("%q -> %+v -> %+v, %v", s, spec, again, err)
			}
		default:
			t.Fatalf("%q parsed to %+v: want exactly one of a positive interval and a cron expression", s, spec)
		}
	})
}
