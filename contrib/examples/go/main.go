// Command example uses the Go client package (client) to talk to the
// daemon over its unix socket: it lists the tables, gets a key and reads a
// table's rows (the client pages them, pinned to one generation).
//
// Usage: go run ./contrib/examples/go SOCKET TABLE KEY
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/kmaterialize/kmaterialize/client"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: example SOCKET TABLE KEY")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2], os.Args[3]); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

func run(sock, table, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := client.Dial(sock)
	defer cl.Close()

	tables, err := cl.Tables(ctx)
	if err != nil {
		return err
	}
	for _, t := range tables {
		fmt.Printf("table %s %s\n", t.Name, t.State)
	}

	v, _, err := cl.Get(ctx, table, []byte(key))
	var ce *client.Error
	switch {
	case errors.As(err, &ce) && ce.Code == client.CodeKeyNotFound:
		fmt.Printf("get %s not found\n", key)
	case err != nil:
		return err
	default:
		fmt.Printf("get %s %s\n", key, v)
	}

	_, err = cl.Rows(ctx, table, client.RowsOptions{PageSize: 3}, func(r client.Row) error {
		fmt.Printf("row %s\t%s\n", r.Key, r.Value)
		return nil
	})
	return err
}
