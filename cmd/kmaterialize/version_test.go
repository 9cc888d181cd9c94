package main

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// binExec runs the binary bin with args and stdin, returning its result.
func binExec(t *testing.T, bin, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatal(err)
		}
	}
	r := result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
	t.Logf("$ %s %s\n-> exit %d\nstdout:\n%.2000s\nstderr:\n%s", filepath.Base(bin), strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

// versionFields parses --version's "name: value" lines (the first line is
// "kmaterialize VERSION").
func versionFields(t *testing.T, out string) map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	first, ok := strings.CutPrefix(lines[0], "kmaterialize ")
	if !ok {
		t.Fatalf("--version's first line %q does not start with kmaterialize", lines[0])
	}
	f := map[string]string{"version": first}
	for _, l := range lines[1:] {
		k, v, ok := strings.Cut(l, ": ")
		if !ok {
			t.Fatalf("--version line %q is not NAME: VALUE", l)
		}
		f[k] = v
	}
	return f
}

// TestVersion: the binary built by TestMain (no VCS stamp: GOFLAGS may
// say -buildvcs=false, and no -ldflags) says "unknown" for version and
// commit rather than guessing; one built with -ldflags -X prints exactly
// those values. Both print the Go version and the librdkafka version this
// test process links (kafka.LibraryVersion, asked here).
func TestVersion(t *testing.T) {
	_, rdk := kafka.LibraryVersion()
	r := binExec(t, binPath, "", "--version")
	if r.code != 0 {
		t.Fatalf("--version: exit %d", r.code)
	}
	f := versionFields(t, r.stdout)
	if f["librdkafka"] != rdk || f["go"] != runtime.Version() {
		t.Fatalf("--version: librdkafka %q go %q, want %q and %q", f["librdkafka"], f["go"], rdk, runtime.Version())
	}
	// The test binary's own build says whether a VCS stamp is there.
	stamped := false
	if out, err := exec.Command("go", "env", "GOFLAGS").Output(); err == nil && !strings.Contains(string(out), "-buildvcs=false") {
		stamped = true // a checkout with VCS stamping may give a revision
	}
	if !stamped && (f["version"] != unknown || f["commit"] != unknown) {
		t.Fatalf("--version without a stamp or -ldflags: version %q commit %q, want %q for both", f["version"], f["commit"], unknown)
	}
	if r2 := binExec(t, binPath, "", "-v"); r2.stdout != r.stdout {
		t.Fatalf("-v printed %q, --version %q", r2.stdout, r.stdout)
	}

	var b [20]byte
	rand.Read(b[:])
	wantCommit := hex.EncodeToString(b[:])
	wantVersion := "v9.8.7-test." + wantCommit[:6]
	bin := filepath.Join(t.TempDir(), "kmaterialize")
	build := exec.Command("go", "build", "-o", bin, "-ldflags", "-X main.version="+wantVersion+" -X main.commit="+wantCommit, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("build with -ldflags: %v", err)
	}
	f = versionFields(t, binExec(t, bin, "", "--version").stdout)
	if f["version"] != wantVersion || f["commit"] != wantCommit || f["librdkafka"] != rdk {
		t.Fatalf("--version of a -ldflags build: %v, want version %s commit %s librdkafka %s", f, wantVersion, wantCommit, rdk)
	}
}

// TestCompletion: the bash script, sourced in a real bash with the binary
// on PATH, completes command names and a command's flags (the binary
// answers --generate-bash-completion); zsh's script registers itself for
// kmaterialize; fish's names every command; an unknown shell is exit 2
// with a hint.
func TestCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash is needed for the completion test: %v", err)
	}
	r := binExec(t, binPath, "", "completion", "bash")
	if r.code != 0 {
		t.Fatalf("completion bash: exit %d", r.code)
	}
	script := filepath.Join(t.TempDir(), "kmaterialize.bash")
	if err := os.WriteFile(script, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) []string {
		t.Helper()
		// COMP_WORDS as bash fills it: the words so far, the last being
		// the one under the cursor.
		prog := "source " + script + "\nCOMP_WORDS=("
		for _, w := range words {
			prog += "'" + w + "' "
		}
		prog += ")\nCOMP_CWORD=" + strconv.Itoa(len(words)-1) + "\n_kmaterialize_complete\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
		cmd := exec.Command(bash, "--norc", "--noprofile", "-c", prog)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(binPath)+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash completion of %q: %v\n%s", words, err, out)
		}
		got := strings.Fields(string(out))
		t.Logf("complete %q -> %q", words, got)
		return got
	}
	has := func(got []string, want ...string) {
		t.Helper()
		set := map[string]bool{}
		for _, g := range got {
			set[g] = true
		}
		for _, w := range want {
			if !set[w] {
				t.Fatalf("completions %q lack %q", got, w)
			}
		}
	}
	if got := complete("kmaterialize", "sc"); len(got) != 1 || got[0] != "scan" {
		t.Fatalf("completion of sc: %q, want [scan]", got)
	}
	got := complete("kmaterialize", "d")
	has(got, "describe", "demo", "drop")
	for _, g := range got {
		if !strings.HasPrefix(g, "d") {
			t.Fatalf("completion of d offers %q", g)
		}
	}
	has(complete("kmaterialize", "scan", "--k"), "--keys-only", "--key-encoding")
	has(complete("kmaterialize", "get", "-"), "--db", "--table", "--key-encoding", "--format", "--base64")
	has(complete("kmaterialize", "describe", "--g"), "--group")

	if r := binExec(t, binPath, "", "completion", "zsh"); r.code != 0 || !strings.HasPrefix(r.stdout, "#compdef kmaterialize\n") ||
		!strings.Contains(r.stdout, "--generate-bash-completion") {
		t.Fatalf("completion zsh: exit %d, script:\n%s", r.code, r.stdout)
	}
	r = binExec(t, binPath, "", "completion", "fish")
	if r.code != 0 {
		t.Fatalf("completion fish: exit %d", r.code)
	}
	for _, cmd := range []string{"scan", "get", "drop", "describe", "completion"} {
		if !regexp.MustCompile(`(?m)^complete .*-c kmaterialize .*-a '` + cmd + `'`).MatchString(r.stdout) {
			t.Fatalf("fish completion has no line for %s:\n%s", cmd, r.stdout)
		}
	}
	if r := binExec(t, binPath, "", "completion", "tcsh"); r.code != exitUsage || !strings.Contains(r.stderr, "Try: ") {
		t.Fatalf("completion tcsh: exit %d, want %d with a hint", r.code, exitUsage)
	}
}
