// Command produce writes key:value lines from stdin to a topic, for
// capture.sh (the machine has no kcat).
//
//	go run ./api/testdata/produce BROKERS TOPIC < lines
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: produce BROKERS TOPIC < key:value lines")
		os.Exit(2)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(os.Args[1], ",")...))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer cl.Close()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		r := &kgo.Record{Topic: os.Args[2], Key: []byte(k), Value: []byte(v)}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
