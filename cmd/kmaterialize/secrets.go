package main

import (
	"fmt"
	"io"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/config"
)

// Metadata keys of the run's output plumbing.
const (
	metaRedactor = "redactor"
	metaLogSink  = "log-sink"
)

// redactorOf returns the run's Redactor. Every secret the run is given
// (secret -X and -F properties, the --config file's Secrets) is added to
// it as it is read, and everything written to stderr (log lines, progress,
// the final error) passes through it: one place that keeps secrets out of
// the output even where a library quotes them.
func redactorOf(c *cli.Context) *config.Redactor {
	if r, ok := c.App.Metadata[metaRedactor].(*config.Redactor); ok {
		return r
	}
	r := config.NewRedactor()
	c.App.Metadata[metaRedactor] = r
	return r
}

// logSink is where the run's log lines go: stderr, or, while progress bars
// are drawn, the bars' container, which prints them above the bars.
type logSink struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// redirect sends the log lines to w until the returned function is called.
func (s *logSink) redirect(w io.Writer) (restore func()) {
	s.mu.Lock()
	prev := s.w
	s.w = w
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.w = prev
		s.mu.Unlock()
	}
}

// logSinkOf returns the run's log sink, writing to stderr at first.
func logSinkOf(c *cli.Context) *logSink {
	if s, ok := c.App.Metadata[metaLogSink].(*logSink); ok {
		return s
	}
	s := &logSink{w: stderrOf(c)}
	c.App.Metadata[metaLogSink] = s
	return s
}

// logOutput is the writer the run's logger writes to: the sink, redacted.
func logOutput(c *cli.Context) io.Writer { return redactorOf(c).Writer(logSinkOf(c)) }

// propsFileFlag is -F on every command that takes -X.
func propsFileFlag() cli.Flag {
	return &cli.StringFlag{Name: "F", EnvVars: []string{"KMATERIALIZE_PROPERTIES"},
		Usage: "librdkafka properties `FILE` as kcat -F reads it (KEY=VALUE lines, # comments), e.g. -F client.properties; -X wins over it, it wins over --config's kafka.properties"}
}

// withPropsFile gives -F to every command that takes -X.
func withPropsFile(cmd *cli.Command) {
	if hasFlag(cmd, "X") && !hasFlag(cmd, "F") {
		cmd.Flags = append(cmd.Flags, propsFileFlag())
	}
}

// fileProps returns the -F file's properties (nil without -F), secrets
// added to the run's Redactor.
func fileProps(c *cli.Context) (map[string]string, error) {
	path := c.String("F")
	if path == "" {
		return nil, nil
	}
	props, err := config.LoadProperties(path)
	if err != nil {
		return nil, fmt.Errorf("-F: %w", err)
	}
	redactorOf(c).AddProperties(props)
	return props, nil
}
