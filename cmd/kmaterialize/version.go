package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/urfave/cli/v2"
)

// Set at build time, for builds that carry no VCS stamp (GOFLAGS=-buildvcs=false,
// a source tarball):
//
//	go build -ldflags "-X main.version=v1.2.0 -X main.commit=$(git rev-parse HEAD)" ./cmd/kmaterialize
var (
	version string
	commit  string
)

// unknown is what --version prints for what the build does not say.
const unknown = "unknown"

// buildInfo is what --version prints.
type buildInfo struct {
	Version, Commit, Go, Librdkafka string
	Modified                        bool
}

// readBuildInfo gathers the version: -ldflags -X values first, then what
// the Go toolchain stamped (the module version for `go install
// module@version`, vcs.revision when built in a checkout with VCS stamping
// on), else "unknown": never a guess.
func readBuildInfo() buildInfo {
	b := buildInfo{Version: version, Commit: commit, Go: runtime.Version()}
	_, b.Librdkafka = kafka.LibraryVersion()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.Commit == "" {
					b.Commit = s.Value
				}
			case "vcs.modified":
				b.Modified = s.Value == "true" && commit == ""
			}
		}
	}
	if b.Version == "" {
		b.Version = unknown
	}
	if b.Commit == "" {
		b.Commit = unknown
	}
	return b
}

func init() {
	// urfave/cli prints --version (and -v) through this hook; the App's
	// Version only has to be non-empty for the flag to exist.
	cli.VersionPrinter = func(c *cli.Context) {
		b := readBuildInfo()
		mod := ""
		if b.Modified {
			mod = " (modified)"
		}
		fmt.Fprintf(c.App.Writer, "kmaterialize %s\ncommit: %s%s\ngo: %s\nlibrdkafka: %s\n", b.Version, b.Commit, mod, b.Go, b.Librdkafka)
	}
}

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script (bash, zsh or fish)",
		UsageText: "kmaterialize completion bash|zsh|fish",
		Description: `Prints a script that completes kmaterialize's commands and flags in the
shell named. Source it, or install it where the shell looks for completions.

Examples:
  $ source <(kmaterialize completion bash)            # this bash session
  $ kmaterialize completion bash > /etc/bash_completion.d/kmaterialize
  $ kmaterialize completion zsh > "${fpath[1]}/_kmaterialize"
  $ kmaterialize completion fish > ~/.config/fish/completions/kmaterialize.fish`,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return &usageError{msg: "completion takes one shell: bash, zsh or fish", hint: "kmaterialize completion bash"}
			}
			var script string
			switch sh := c.Args().First(); sh {
			case "bash":
				script = bashCompletion
			case "zsh":
				script = zshCompletion
			case "fish":
				s, err := c.App.ToFishCompletion()
				if err != nil {
					return fmt.Errorf("fish completion: %w", err)
				}
				script = s
			default:
				return &usageError{msg: fmt.Sprintf("completion %q: want bash, zsh or fish", sh), hint: "kmaterialize completion bash"}
			}
			_, err := fmt.Fprint(stdoutOf(c), script)
			return err
		},
	}
}

// bashCompletion asks the binary itself (urfave/cli's
// --generate-bash-completion) for the words that may follow.
const bashCompletion = `# bash completion for kmaterialize
_kmaterialize_complete() {
  local cur words
  COMPREPLY=()
  cur="${COMP_WORDS[COMP_CWORD]}"
  words=("${COMP_WORDS[@]:0:$COMP_CWORD}")
  local opts
  if [[ "$cur" == -* ]]; then
    opts=$("${words[@]}" "$cur" --generate-bash-completion 2>/dev/null)
  else
    opts=$("${words[@]}" --generate-bash-completion 2>/dev/null)
  fi
  COMPREPLY=($(compgen -W "${opts}" -- "${cur}"))
  return 0
}
complete -o bashdefault -o default -F _kmaterialize_complete kmaterialize
`

const zshCompletion = `#compdef kmaterialize
_kmaterialize() {
  local -a opts
  local cur
  cur=${words[-1]}
  if [[ "$cur" == -* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion 2>/dev/null)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion 2>/dev/null)}")
  fi
  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}
compdef _kmaterialize kmaterialize
`
