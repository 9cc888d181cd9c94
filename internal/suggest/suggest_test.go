package suggest

import "testing"

func TestNearest(t *testing.T) {
	commands := []string{"rebuild", "update", "import", "get", "scan", "export", "tables", "check", "describe",
		"copy", "verify", "serve", "demo", "compact", "drop", "completion", "rollback", "diff", "help"}
	flags := []string{"config", "brokers", "b", "topic", "t", "table", "db", "stall-timeout", "end", "X", "F"}
	fields := []string{"name", "topic", "fold", "schedule", "end", "stall_timeout", "follow", "follow_interval", "max_lag"}
	for _, tc := range []struct {
		name       string
		candidates []string
		want       string
	}{
		{"rebuld", commands, "rebuild"},  // a letter left out
		{"rebiuld", commands, "rebuild"}, // two letters swapped
		{"REBUILD", commands, "rebuild"}, // case
		{"udpate", commands, "update"},   // swapped, distance 2
		{"verfy", commands, "verify"},    // a letter left out
		{"tabels", commands, "tables"},   // swapped
		{"rollb", commands, "rollback"},  // an abbreviation
		{"frobnicate", commands, ""},     // nothing like it
		{"x", commands, ""},              // too short to guess
		{"", commands, ""},               // nothing given
		{"broker", flags, "brokers"},     // a letter left out
		{"stall-timout", flags, "stall-timeout"},
		{"stall", flags, "stall-timeout"}, // the only flag starting so
		{"tpoic", flags, "topic"},
		{"folow", fields, "follow"},
		{"stall-timeout", fields, "stall_timeout"}, // dash for underscore
		{"max-lag", fields, "max_lag"},
		{"follow_intervall", fields, "follow_interval"},
		{"colour", fields, ""},
		{"get", commands, "get"}, // an exact name is itself
	} {
		if got := Nearest(tc.name, tc.candidates); got != tc.want {
			t.Errorf("Nearest(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"kitten", "sitting", 3},
		{"rebuld", "rebuild", 1}, {"flaw", "lawn", 2}, {"same", "same", 0},
		{"tpoic", "topic", 1}, {"ab", "ba", 1}, {"abc", "ca", 3},
	} {
		if got := distance(tc.a, tc.b); got != tc.want {
			t.Errorf("distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := distance(tc.b, tc.a); got != tc.want {
			t.Errorf("distance(%q, %q) = %d, want %d (symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}
