// Package serve owns the daemon: it holds the database read-write, keeps the
// configured tables fresh (a build at start for every table never
// published, then schedules and requested runs, one run per table at a
// time), and answers other processes over HTTP on a unix socket (and,
// optionally, loopback TCP).
//
// # Reads
//
// Every read is answered from one bbolt read transaction, so from one
// published generation, which the response names (the
// Kmaterialize-Generation header, or the generation field). A rebuild
// writes an unpublished generation beside the published one; reads keep
// seeing the published one until the rebuild's publish commits, then the new
// one: never a mix. The daemon serves every table the file holds; Config.Tables
// says which it rebuilds.
//
// # Runs
//
// A run is Table.Build: serve itself never talks to Kafka. The per-table run
// lock is the daemon's own (a scheduler's singleton mode would not cover
// requested runs): a request that finds a run going gets 409, a scheduled
// run that does is skipped, logged and counted. A failed run keeps the
// previous generation served; the table's state says failed and its
// last_error carries the exit code the CLI would have given.
//
// # Trust
//
// The unix socket is the trust boundary: its file mode and group say who may
// read and trigger runs. The TCP listener serves reads, /metrics, /healthz
// and /readyz; a POST there needs the admin token as a bearer token.
//
// # Lifetime
//
// Run owns every goroutine it starts (HTTP servers, scheduler, runs) and
// waits for them before it returns: when its context ends it stops
// accepting, lets requests in flight finish (at most ShutdownGrace), cancels
// running rebuilds (they publish nothing), closes the database and removes
// the socket.
package serve
