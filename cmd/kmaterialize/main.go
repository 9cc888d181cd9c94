// Command kmaterialize rebuilds tables from Apache Kafka topics into an
// embedded bbolt database and answers queries about them.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// A second signal forces the exit: the first one asked for a clean
	// stop (nothing published, generation dropped) and that is taking
	// too long for the operator.
	go func() {
		<-ctx.Done()
		stop()
		forced := make(chan os.Signal, 1)
		signal.Notify(forced, os.Interrupt, syscall.SIGTERM)
		<-forced
		fmt.Fprintln(os.Stderr, "kmaterialize: second signal, exiting now")
		os.Exit(130)
	}()
	// The page-check child (pagecheck.go) does without the CLI, not
	// without the signal handling above: a first SIGINT or SIGTERM, which
	// the terminal or systemd sends the child too, must not end its walk
	// (a child killed without a result would mean a corrupt file).
	if code, ok := pageCheckMain(os.Args, os.Stdout, os.Stderr); ok {
		stop()
		os.Exit(code)
	}
	code := runProcess(ctx, os.Args, os.Stdout, os.Stderr, processOptions{limitGoMemory: true})
	stop()
	os.Exit(code)
}
