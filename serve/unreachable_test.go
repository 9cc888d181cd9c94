package serve

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// TestUnreachableBrokerCause: a table whose brokers refuse the connection
// fails its first build with exit code 5, and both its last_error and
// /readyz say why: the broker and "connection refused" (not the stall
// timeout's "Local: Timed out").
func TestUnreachableBrokerCause(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections: the test shows nothing", addr)
	}
	tbl := Table{
		Name: "away", Topic: "away", Fold: "latest",
		Build: func(ctx context.Context, db *store.DB, log zerolog.Logger) (materialize.Report, error) {
			return materialize.Rebuild(ctx, materialize.Options{DB: db, Table: "away", Log: log,
				Replay: replay.Config{Brokers: addr, Topic: "away", StallTimeout: 30 * time.Second, Log: log}})
		},
	}
	d := start(t, baseConfig(t, tbl))
	var tj tableJSON
	waitFor(t, "the first build to fail", 60*time.Second, func() bool {
		tj = d.c.table(t, "away")
		return tj.LastError != nil
	})
	if e := tj.LastError; e.ExitCode != 5 || !strings.Contains(e.Error, addr) || !strings.Contains(e.Error, "connection refused") {
		t.Fatalf("last_error %+v, want exit code 5 naming %s and connection refused", e, addr)
	}
	r := d.c.get(t, "/readyz")
	if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), addr) || !strings.Contains(string(r.body), "connection refused") {
		t.Fatalf("/readyz %d %s, want 503 naming %s and connection refused", r.status, r.body, addr)
	}
}
