package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/internal/dbdamage"
	"github.com/kmaterialize/kmaterialize/store"
)

// TestCallbackPanicIsInternalError: a read whose row callback panics is
// exit 1 "internal error" with no hint (no --replace-corrupt) and the
// panic's stack in the debug log; the same read over a damaged page is
// still "database is corrupt" with the --replace-corrupt hint. The command
// goes through the wrapping and reporting every command gets (run).
func TestCallbackPanicIsInternalError(t *testing.T) {
	good := filepath.Join(t.TempDir(), "good.db")
	buildDB(t, good, 3000)
	bad := filepath.Join(t.TempDir(), "bad.db")
	buildDB(t, bad, 3000)
	l, err := dbdamage.Inspect(bad, "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := dbdamage.Garbage(bad, l.PageSize, l.Leaves[0], 1); err != nil {
		t.Fatal(err)
	}

	// runRead runs a command that reads every row of table t at path,
	// calling row for each, as run does with its commands.
	runRead := func(path string, row func(k, v []byte)) (int, string) {
		cmd := &cli.Command{Name: "read", Action: func(c *cli.Context) error {
			db, err := store.Open(path, &store.Options{ReadOnly: true})
			if err != nil {
				return err
			}
			defer db.Close()
			return db.Scan("t", nil, 0, func(k, v []byte) error { row(k, v); return nil })
		}}
		withInternalStack(cmd)
		var stderr bytes.Buffer
		app := &cli.App{Name: "kmaterialize", Writer: &bytes.Buffer{}, ErrWriter: &stderr,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "log-level", Value: "info"},
				&cli.StringFlag{Name: "log-format", Value: "auto"},
			},
			Commands:       []*cli.Command{cmd},
			ExitErrHandler: func(*cli.Context, error) {},
			Metadata:       map[string]any{"stderr": &stderr},
		}
		args := []string{"kmaterialize", "--log-level", "debug", "--log-format", "json", "read"}
		err := app.RunContext(context.Background(), args)
		code := finish(app, err, args, &stderr)
		t.Logf("exit %d, stderr:\n%s", code, stderr.String())
		return code, stderr.String()
	}

	rows := 0
	code, out := runRead(good, func(k, v []byte) {
		if rows++; rows == 10 {
			panic("row callback bug")
		}
	})
	if rows != 10 {
		t.Fatalf("the callback ran %d times, want the panic at the 10th row", rows)
	}
	if code != exitError {
		t.Errorf("exit %d, want %d", code, exitError)
	}
	if !strings.Contains(out, "kmaterialize: internal error: panic") || !strings.Contains(out, "row callback bug") {
		t.Errorf("stderr does not say internal error with the panic's value")
	}
	if strings.Contains(out, "corrupt") || strings.Contains(out, "Try:") {
		t.Errorf("stderr calls it corruption or gives a hint")
	}
	if !strings.Contains(out, `"level":"debug"`) || !strings.Contains(out, "internal_test.go") || !strings.Contains(out, `"stack"`) {
		t.Errorf("the debug log does not hold the panic's stack")
	}

	code, out = runRead(bad, func(k, v []byte) {})
	if code != exitError || !strings.Contains(out, "database is corrupt") || !strings.Contains(out, "--replace-corrupt") {
		t.Errorf("damaged page: exit %d, stderr %q; want exit 1, corrupt, the --replace-corrupt hint", code, out)
	}
	if strings.Contains(out, "internal error") {
		t.Errorf("damaged page reported as an internal error")
	}
}
