// Command kfakebroker runs the embedded kfake broker (internal/localkafka)
// in a process of its own, as the benchmark needs it: the broker then does
// not share the Go runtime, heap and scheduler of the consumer it serves,
// as a real Kafka broker would not. It creates the topic given by -topic
// and -partitions, prints the broker's address on a line of stdout, and
// runs until stdin closes or it gets SIGINT or SIGTERM.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

func main() {
	topic := flag.String("topic", "", "topic to create (none if empty)")
	partitions := flag.Int("partitions", 6, "partitions of -topic")
	flag.Parse()
	br, err := localkafka.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfakebroker:", err)
		os.Exit(1)
	}
	defer br.Close()
	if *topic != "" {
		if err := br.CreateTopic(*topic, int32(*partitions), nil); err != nil {
			fmt.Fprintln(os.Stderr, "kfakebroker:", err)
			os.Exit(1)
		}
	}
	fmt.Println(br.Addr)
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case <-done:
	case <-sig:
	}
}
