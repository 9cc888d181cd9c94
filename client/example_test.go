package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kmaterialize/kmaterialize/client"
)

// A service reads one key and scans a prefix from the daemon on the host.
func Example() {
	cl := client.Dial("/run/kmaterialize/tables.sock")
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	v, gen, err := cl.Get(ctx, "balances", []byte("acct-42"))
	switch {
	case client.IsCode(err, client.CodeKeyNotFound):
		fmt.Println("no balance for acct-42")
	case client.IsCode(err, client.CodeTableNotReady):
		fmt.Println("the daemon is still building balances")
	case errors.Is(err, client.ErrUnreachable):
		fmt.Println("no daemon on that socket")
	case err != nil:
		fmt.Println(err)
	default:
		fmt.Printf("acct-42 = %s (generation %d)\n", v, gen)
	}

	// Every row with prefix acct-4, in pages, all from one generation.
	_, err = cl.Rows(ctx, "balances", client.RowsOptions{Prefix: []byte("acct-4")}, func(r client.Row) error {
		fmt.Printf("%s = %s\n", r.Key, r.Value)
		return nil
	})
	if client.IsCode(err, client.CodeGenerationGone) {
		fmt.Println("republished mid-scan: scan again")
	}
}
