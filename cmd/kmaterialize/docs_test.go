package main

// The docs' own checks: every relative link in README.md, docs/,
// CHANGELOG.md and bench/ points at a file (and a heading) that exists, and
// every kmaterialize command line the docs show parses with the CLI's own
// flag parser. Nothing is run: each command's action is replaced by one
// that only records that it was reached, so placeholders such as HOST:PORT
// or FILE stay strings.

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

const repoRoot = "../.."

// docFiles are the markdown files the project publishes.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md", "bench/RESULTS.md"}
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no docs/*.md pages")
	}
	for _, p := range pages {
		rel, _ := filepath.Rel(repoRoot, p)
		files = append(files, rel)
	}
	return files
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// docLine is a line of a doc with where it is.
type docLine struct {
	file  string
	line  int
	text  string
	fence bool // inside a ``` block
}

func docLines(text, file string) []docLine {
	var out []docLine
	fence := false
	for i, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fence = !fence
			continue
		}
		out = append(out, docLine{file: file, line: i + 1, text: l, fence: fence})
	}
	return out
}

// slug is GitHub's anchor for a heading: lower case, punctuation other
// than - and _ dropped, spaces to -.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the headings' anchors of a markdown file (outside code).
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range docLines(text, "") {
		if l.fence {
			continue
		}
		m := regexp.MustCompile(`^#{1,6} (.*)$`).FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

var linkRE = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)

func TestDocsLinks(t *testing.T) {
	checked := 0
	for _, file := range docFiles(t) {
		text := readDoc(t, file)
		for _, l := range docLines(text, file) {
			if l.fence {
				continue
			}
			// Inline code is not a link.
			plain := regexp.MustCompile("`[^`]*`").ReplaceAllString(l.text, "")
			for _, m := range linkRE.FindAllStringSubmatch(plain, -1) {
				target := m[1]
				if regexp.MustCompile(`^[a-z]+:`).MatchString(target) {
					continue // http:, https:, mailto:
				}
				path, anchor, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), path)
				}
				checked++
				info, err := os.Stat(filepath.Join(repoRoot, dest))
				if err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", file, l.line, target, dest)
					continue
				}
				if anchor == "" {
					continue
				}
				if info.IsDir() || !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s:%d: link %q: an anchor into %s, which is not a markdown file", file, l.line, target, dest)
					continue
				}
				if !anchors(readDoc(t, dest))[anchor] {
					t.Errorf("%s:%d: link %q: %s has no heading #%s", file, l.line, target, dest, anchor)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d relative links found: the scan is broken", checked)
	}
}

// shellWords splits a shell line into words, as far as the docs need: quotes,
// backslashes, $(...), and the end of the command at an unquoted |, ;, &,
// && or ||, or a comment. Redirections are dropped.
func shellWords(line string) (words []string) {
	var w strings.Builder
	inWord, quote, depth := false, rune(0), 0
	flush := func() {
		if inWord {
			words = append(words, w.String())
		}
		w.Reset()
		inWord = false
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else if r == '\\' && quote == '"' && i+1 < len(rs) {
				i++
				w.WriteRune(rs[i])
			} else {
				w.WriteRune(r)
			}
		case depth > 0:
			w.WriteRune(r)
			if r == '(' {
				depth++
			} else if r == ')' {
				depth--
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '\\' && i+1 < len(rs):
			i++
			w.WriteRune(rs[i])
			inWord = true
		case r == '$' && i+1 < len(rs) && rs[i+1] == '(':
			w.WriteString("$(")
			i++
			depth, inWord = 1, true
		case r == ' ' || r == '\t':
			flush()
		case r == '|' || r == ';' || r == '&':
			flush()
			return dropRedirections(words)
		case r == '#' && !inWord:
			flush()
			return dropRedirections(words)
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	flush()
	return dropRedirections(words)
}

var redirRE = regexp.MustCompile(`^[0-9]*(>>?|<<?|>&|<&)`)

func dropRedirections(words []string) []string {
	var out []string
	for i := 0; i < len(words); i++ {
		if m := redirRE.FindString(words[i]); m != "" {
			if m == words[i] {
				i++ // the target is the next word
			}
			continue
		}
		out = append(out, words[i])
	}
	return out
}

// docCommand is a kmaterialize command line shown in the docs.
type docCommand struct {
	where string
	args  []string
}

var cronFieldRE = regexp.MustCompile(`^[0-9*/,\-]+$`)

// commandAt returns the kmaterialize command line that words start, when
// they start one: after a prompt, variable assignments, a wrapper such as
// sudo or exec, a cron schedule or a unit's ExecStart=.
func commandAt(words []string) ([]string, bool) {
	if len(words) >= 6 && func() bool {
		for _, f := range words[:5] {
			if !cronFieldRE.MatchString(f) {
				return false
			}
		}
		return true
	}() {
		words = words[5:]
	}
	for len(words) > 0 {
		w := words[0]
		switch {
		case w == "$" || w == "sudo" || w == "exec" || w == "nohup" || w == "time" || w == "env":
			words = words[1:]
		case regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`).MatchString(w) && !strings.HasPrefix(w, "ExecStart="):
			words = words[1:]
		case strings.HasPrefix(w, "ExecStart="):
			words[0] = strings.TrimPrefix(w, "ExecStart=")
			if words[0] == "" {
				words = words[1:]
			}
			return commandAt(words)
		case len(words) >= 3 && w == "go" && words[1] == "run" && words[2] == "./cmd/kmaterialize":
			return append([]string{"kmaterialize"}, words[3:]...), true
		case w == "kmaterialize" || strings.HasSuffix(w, "/kmaterialize") && !strings.HasPrefix(w, "./cmd/"):
			return append([]string{"kmaterialize"}, words[1:]...), true
		default:
			return nil, false
		}
	}
	return nil, false
}

// docCommands finds the command lines: in code blocks (joining lines that
// end in a backslash, and each command of a pipeline or list), and inline
// code that starts with kmaterialize.
func docCommands(t *testing.T) []docCommand {
	var out []docCommand
	for _, file := range docFiles(t) {
		lines := docLines(readDoc(t, file), file)
		for i := 0; i < len(lines); i++ {
			l := lines[i]
			where := file + ":" + strconv.Itoa(l.line)
			if !l.fence {
				for _, m := range regexp.MustCompile("`(kmaterialize [^`]*)`").FindAllStringSubmatch(l.text, -1) {
					if args, ok := commandAt(shellWords(m[1])); ok {
						out = append(out, docCommand{where, args})
					}
				}
				continue
			}
			text := l.text
			for strings.HasSuffix(text, `\`) && i+1 < len(lines) && lines[i+1].fence {
				i++
				text = strings.TrimSuffix(text, `\`) + " " + lines[i].text
			}
			// Each command of a pipeline or list: split where shellWords
			// stops, outside quotes.
			for _, seg := range shellSegments(text) {
				if args, ok := commandAt(shellWords(seg)); ok {
					out = append(out, docCommand{where, args})
				}
			}
		}
	}
	return out
}

// shellSegments splits line at unquoted |, ;, && and || (and stops at a
// comment).
func shellSegments(line string) []string {
	var out []string
	quote, start := rune(0), 0
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '\\':
			i++
		case r == '#' && (i == 0 || rs[i-1] == ' '):
			return append(out, string(rs[start:i]))
		case r == '|' || r == ';' || r == '&':
			if r == '&' && i+1 < len(rs) && rs[i+1] == '>' || i > 0 && (rs[i-1] == '>' || rs[i-1] == '<') {
				continue // &> file, 2>&1
			}
			out = append(out, string(rs[start:i]))
			for i+1 < len(rs) && (rs[i+1] == '|' || rs[i+1] == '&') {
				i++
			}
			start = i + 1
		}
	}
	return append(out, string(rs[start:]))
}

// parseOnly returns the app with every action replaced by one that records
// being reached, and no hooks: nothing runs but the flag parser.
func parseOnly(args []string, out *bytes.Buffer) (app *cli.App, reached *string) {
	app = newApp(args, out, out)
	app.Setup() // adds the help command, whose action is replaced too
	for i, cmd := range app.Commands {
		if cmd.Name == "help" {
			// urfave/cli's help command is one package variable: replace
			// a copy's action, never the original's.
			c := *cmd
			c.Subcommands = nil
			app.Commands[i] = &c
		}
	}
	reached = new(string)
	app.Before, app.After = nil, nil
	app.Action = func(c *cli.Context) error { *reached = "kmaterialize"; return nil }
	// The help command is among its own subcommands: each command once.
	seen := map[*cli.Command]bool{}
	var strip func(prefix string, cmds []*cli.Command)
	strip = func(prefix string, cmds []*cli.Command) {
		for _, cmd := range cmds {
			if seen[cmd] {
				continue
			}
			seen[cmd] = true
			name := prefix + " " + cmd.Name
			cmd.Before, cmd.After = nil, nil
			cmd.Action = func(*cli.Context) error { *reached = name; return nil }
			strip(name, cmd.Subcommands)
		}
	}
	strip("kmaterialize", app.Commands)
	return app, reached
}

func TestDocsCommandsParse(t *testing.T) {
	cmds := docCommands(t)
	if len(cmds) < 100 {
		t.Fatalf("only %d kmaterialize command lines found in the docs: the scan is broken", len(cmds))
	}
	names := map[string]bool{}
	for _, c := range cmds {
		var out bytes.Buffer
		app, reached := parseOnly(c.args, &out)
		unknown := ""
		app.CommandNotFound = func(_ *cli.Context, name string) { unknown = name }
		err := app.RunContext(context.Background(), c.args)
		if err == nil && unknown != "" {
			err = unknownCommand(app, unknown)
		}
		helpOrVersion := false
		for _, a := range c.args {
			helpOrVersion = helpOrVersion || a == "--help" || a == "-h" || a == "--version" || a == "-v"
		}
		switch {
		case err != nil:
			t.Errorf("%s: %s\n  does not parse: %v", c.where, strings.Join(c.args, " "), err)
		case *reached == "" && !helpOrVersion:
			t.Errorf("%s: %s\n  parses but names no command", c.where, strings.Join(c.args, " "))
		}
		names[*reached] = true
	}
	// Every command is shown somewhere in the docs.
	app, _ := parseOnly(nil, &bytes.Buffer{})
	for _, cmd := range app.Commands {
		if cmd.Hidden {
			continue
		}
		found := false
		for n := range names {
			found = found || n == "kmaterialize "+cmd.Name || strings.HasPrefix(n, "kmaterialize "+cmd.Name+" ")
		}
		if !found {
			t.Errorf("no line of the docs shows kmaterialize %s", cmd.Name)
		}
	}
	t.Logf("%d command lines parsed", len(cmds))
}

// The parser's own cases: what the docs scan finds in a line.
func TestDocsCommandScan(t *testing.T) {
	cases := []struct {
		line string
		want [][]string
	}{
		{`kmaterialize get --db balances.db --table t acct-1    # 120: the last value`, [][]string{{"kmaterialize", "get", "--db", "balances.db", "--table", "t", "acct-1"}}},
		{`$ kmaterialize scan --db x.db --table t --format tsv | sort > out.tsv`, [][]string{{"kmaterialize", "scan", "--db", "x.db", "--table", "t", "--format", "tsv"}}},
		{`printf 'a:1\n' | kcat -P -b $B -t t -K: && kmaterialize rebuild --topic 't x' --db "a b.db" 2>&1`, [][]string{{"kmaterialize", "rebuild", "--topic", "t x", "--db", "a b.db"}}},
		{`*/15 * * * * kmaterialize rebuild --topic t --db /var/lib/k/b.db || logger -t k "failed: exit $?"`, [][]string{{"kmaterialize", "rebuild", "--topic", "t", "--db", "/var/lib/k/b.db"}}},
		{`ExecStart=/usr/local/bin/kmaterialize serve --config /etc/kmaterialize/k.yaml`, [][]string{{"kmaterialize", "serve", "--config", "/etc/kmaterialize/k.yaml"}}},
		{`KMATERIALIZE_BROKERS=HOST:PORT kmaterialize describe --topic t`, [][]string{{"kmaterialize", "describe", "--topic", "t"}}},
		{`go run ./cmd/kmaterialize demo     # embedded broker`, [][]string{{"kmaterialize", "demo"}}},
		{`go build -o kmaterialize ./cmd/kmaterialize`, nil},
		{`# kmaterialize: database busy: balances.db is held`, nil},
	}
	for _, c := range cases {
		var got [][]string
		for _, seg := range shellSegments(c.line) {
			if args, ok := commandAt(shellWords(seg)); ok {
				got = append(got, args)
			}
		}
		if strings.Join(flat(got), "\x00") != strings.Join(flat(c.want), "\x00") || len(got) != len(c.want) {
			t.Errorf("%s\n got %q\nwant %q", c.line, got, c.want)
		}
	}
	// And a line that does not parse is caught.
	var out bytes.Buffer
	args := []string{"kmaterialize", "rebuild", "--broker", "HOST:PORT"}
	app, _ := parseOnly(args, &out)
	if err := app.RunContext(context.Background(), args); err == nil {
		t.Errorf("%q parsed", args)
	}
}

func flat(xs [][]string) []string {
	var out []string
	for _, x := range xs {
		out = append(out, strings.Join(x, " "))
	}
	return out
}

// TestDocsACLTable: the README's table of the ACLs each command needs is
// docs/security.md's, row for row (security.md is where it is explained;
// the README shows it because operators look there first).
func TestDocsACLTable(t *testing.T) {
	rows := func(file string) []string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		const head = "| command | resource, pattern type, operation |"
		s := string(b)
		i := strings.Index(s, head)
		if i < 0 {
			t.Fatalf("%s has no ACL table (%q)", file, head)
		}
		var out []string
		for _, line := range strings.Split(s[i:], "\n") {
			if !strings.HasPrefix(line, "|") {
				break
			}
			out = append(out, line)
		}
		if len(out) < 4 {
			t.Fatalf("%s's ACL table has %d lines", file, len(out))
		}
		return out
	}
	readme, security := rows("README.md"), rows("docs/security.md")
	if strings.Join(readme, "\n") != strings.Join(security, "\n") {
		t.Fatalf("README.md's ACL table differs from docs/security.md's:\nREADME:\n%s\nsecurity.md:\n%s",
			strings.Join(readme, "\n"), strings.Join(security, "\n"))
	}
}
