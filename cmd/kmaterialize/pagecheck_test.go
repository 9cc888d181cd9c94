package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// TestPageCheckMain: the page-check child's way around the CLI runs the
// command line pageCheck gives it, the walk's verdict on stdout, and leaves
// every other command line to the CLI.
func TestPageCheckMain(t *testing.T) {
	good := filepath.Join(t.TempDir(), "good.db")
	buildDB(t, good, 3000)
	// (A damaged file's walk may crash the process that runs it: the
	// children of the daemon tests walk those.)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--db", good, "--lock-timeout", "3s"}, `{"result":"ok"}` + "\n"},
		{[]string{"--db", good, "--lock-timeout", "0s", "--full"}, `{"result":"ok"}` + "\n"},
		{[]string{"--db", filepath.Join(t.TempDir(), "none.db"), "--lock-timeout", "3s"}, `"result":"error"`},
	} {
		var out, errOut bytes.Buffer
		code, ok := pageCheckMain(append([]string{"kmaterialize", pageCheckCommandName}, tc.args...), &out, &errOut)
		if !ok || code != 0 || !bytes.Contains(out.Bytes(), []byte(tc.want)) || errOut.Len() != 0 {
			t.Errorf("%v: code %d ok %v, stdout %q stderr %q; want 0 true and %q", tc.args, code, ok, out.String(), errOut.String(), tc.want)
		}
	}
	for _, args := range [][]string{
		{"kmaterialize"},
		{"kmaterialize", "get", "--db", good},
		{"kmaterialize", pageCheckCommandName},
		{"kmaterialize", pageCheckCommandName, "--lock-timeout", "3s"},
		{"kmaterialize", pageCheckCommandName, "--db", good, "extra"},
		{"kmaterialize", pageCheckCommandName, "--db", good, "--no-such-flag"},
		{"kmaterialize", pageCheckCommandName, "--db", good, "--lock-timeout", "soon"},
	} {
		var out, errOut bytes.Buffer
		if _, ok := pageCheckMain(args, &out, &errOut); ok || out.Len() != 0 || errOut.Len() != 0 {
			t.Errorf("%q: ok %v, stdout %q stderr %q; want it left to the CLI", args, ok, out.String(), errOut.String())
		}
	}
}

// TestRestorePageCheckGC: the child takes the GOGC the parent passed as the
// runtime reads GOGC, and keeps its own when no parent passed one.
func TestRestorePageCheckGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv(pageCheckGOGCEnv, "") // restored at the end
	for _, tc := range []struct {
		env  string
		set  bool
		want int
	}{
		{"", true, 100},
		{"50", true, 50},
		{"off", true, -1},
		{"-1", true, -1},
		{"+50", true, 100},
		{"lots", true, 100},
		{"", false, 77},
	} {
		debug.SetGCPercent(77)
		if tc.set {
			os.Setenv(pageCheckGOGCEnv, tc.env)
		} else {
			os.Unsetenv(pageCheckGOGCEnv)
		}
		restorePageCheckGC()
		if got := debug.SetGCPercent(100); got != tc.want {
			t.Errorf("%s=%q (set %v): GC percent %d, want %d", pageCheckGOGCEnv, tc.env, tc.set, got, tc.want)
		}
	}
}

// FuzzPageCheckArgs: any command line (arguments separated by NUL) is
// either the hidden command's, whose flags pageCheck's own rendering of
// them reads back the same, or left to the CLI; none panics.
func FuzzPageCheckArgs(f *testing.F) {
	for _, seed := range []string{
		"--db\x00/tmp/x.db\x00--lock-timeout\x003s",
		"--db\x00/tmp/x.db\x00--lock-timeout\x000s\x00--full",
		"--db=/tmp/x.db\x00--full=false",
		"--lock-timeout\x00-5m\x00--db\x00a b",
		"--db\x00x\x00extra",
		"--no-such-flag",
		"-db\x00x\x00-full=true\x00--",
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := []string{"kmaterialize", pageCheckCommandName}
		if line != "" {
			args = append(args, strings.Split(line, "\x00")...)
		}
		pa, ok := parsePageCheckArgs(args)
		if !ok {
			if pa != (pageCheckArgs{}) {
				t.Fatalf("%q: refused but parsed %+v", args, pa)
			}
			return
		}
		if pa.db == "" || (pa.timeout <= 0 && pa.timeout != -1) {
			t.Fatalf("%q: parsed %+v", args, pa)
		}
		// As pageCheck renders the flags for its child.
		again := []string{"kmaterialize", pageCheckCommandName, "--db", pa.db, "--lock-timeout", pa.timeout.String()}
		if pa.full {
			again = append(again, "--full")
		}
		back, ok := parsePageCheckArgs(again)
		if !ok || back != pa {
			t.Fatalf("%q parsed %+v; its rendering %q parsed %+v (ok %v)", args, pa, again, back, ok)
		}
	})
}
