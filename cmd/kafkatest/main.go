// Command kafkatest starts the real Apache Kafka broker of internal/kafkatest
// for tests in other processes, prints the variables that name it and runs
// until SIGTERM or SIGINT, then stops it and removes its files.
//
// stdout gets one KEY=VALUE line per variable (KMATERIALIZE_TEST_KAFKA and
// the rest, see kafkatest.Endpoint.Environ), then the line "# ready", and
// nothing after: a script reads up to that line and exports what it read
// (scripts/test-kafka does). Progress and errors go to stderr. It exits 1 if
// the broker cannot start or exits by itself.
//
// With -stdin it also stops when its standard input ends: a script that
// holds the other end (scripts/test-kafka) cannot leave the broker running
// if it is killed without a chance to signal it.
//
//	$ go run ./cmd/kafkatest
//	KMATERIALIZE_TEST_KAFKA=127.0.0.1:40123
//	...
//	# ready
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kmaterialize/kmaterialize/internal/kafkatest"
)

func main() {
	os.Exit(run())
}

func run() int {
	untilStdin := flag.Bool("stdin", false, "stop also when standard input ends")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *untilStdin {
		// This reader may still be blocked in Read when run returns; the
		// process's exit ends it.
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop()
		}()
	}

	b, err := kafkatest.Start(ctx, kafkatest.Options{Jars: kafkatest.FetchOptions{Log: os.Stderr}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "kafkatest: Apache Kafka %s ready (pid %d, jars %s, format %s, start %s); log %s\n",
		b.Version, b.Pid, b.Timings.Fetch.Round(time.Millisecond), b.Timings.Format.Round(time.Millisecond), b.Timings.Ready.Round(time.Millisecond), b.LogPath)
	for _, kv := range b.Environ() {
		fmt.Println(kv)
	}
	fmt.Println("# ready")

	code := 0
	select {
	case <-ctx.Done():
		fmt.Fprintln(os.Stderr, "kafkatest: stopping")
	case <-b.Exited():
		fmt.Fprintln(os.Stderr, "kafkatest: the broker exited by itself")
		code = 1
	}
	t0 := time.Now()
	if err := b.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "kafkatest: stopped in %s\n", time.Since(t0).Round(time.Millisecond))
	return code
}
