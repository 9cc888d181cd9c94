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
// # Routes
//
// routes (routes.go) declares them and who may call each over TCP
// (auth.go); api/openapi.json describes them (a test holds the two
// equal), and the answers are written with package api's types. What they
// answer:
//
//	GET  /v1/tables                      {"tables": [TABLE, ...]}
//	GET  /v1/tables/{table}              TABLE (state: state.go's tableState; retry of a failed first build;
//	                                     definition {"changed","fields"} of a configured, published table)
//	GET  /v1/tables/{table}/keys/{key}   the value's bytes (application/octet-stream)
//	GET  /v1/tables/{table}/rows         JSON lines, as `scan --format jsonl`
//	GET  /v1/tables/{table}/export       the document `kmaterialize export` writes
//	GET  /v1/tables/{table}/count        {"count","generation"}
//	GET  /v1/tables/{table}/partition    ?key=K&encoding=base64: {"table","partitioner","partitions_of_topic","partition","held"} (shard.go)
//	POST .../keys/{key}, .../rows, .../count   as the GET, with {"min_positions": {"P": N}} as the body
//	POST /v1/tables/{table}/rebuild      202 {"run": ID} (queued); ?wait=1 (through the queue): 200 {"run","exit_code","error","generation"}
//	POST /v1/tables/{table}/cancel       200 {"run","phase"}: a queued run removed, a reading one cancelled
//	POST /v1/tables/{table}/update       waits: 200 {"run","exit_code","error","generation","mode","keys","records","updates"};
//	                                     ?rebuild_if_needed=1 (Config.Update; any table the file holds but a followed one)
//	POST /v1/tables/{table}/rollback     ?generation=G (default the newest kept): 200 {"generation","from","keys"}
//	GET  /v1/tables/{table}/diff         ?from=&to=&limit=&encoding=base64: JSON lines as `kmaterialize diff`
//	GET  /v1/tables/{table}/changes      ?from=CURSOR|now&encoding=base64: an open stream of JSON lines (changes.go):
//	                                     {"key","value"} (null: deleted) per change, {"commit": {"positions","generation","cursor"}}
//	                                     after each commit's, {"heartbeat": ...} without commits, {"error": {"code","message"}} at its end
//	GET  /v1/backup                      the whole database file, one read transaction's copy (backup.go); admin on TCP
//	POST /v1/compact                     the file rewritten without its free pages under the daemon: 200 {"before","after","paused_ms","swap_ms"} (maintain.go)
//	GET  /v1/openapi.json                the OpenAPI document (api/openapi.json)
//	GET  /healthz, /readyz, /metrics
//
// Every table answer carries "shard" (api.Shard): a table over a subset
// of its topic's partitions (Spec.Partitions) is a shard, and its key
// reads answer for its partitions only (shard.go): 421 key_not_here with
// the key's partition when its partitioner puts the key elsewhere, 404
// key_not_found with Kmaterialize-Partial and the partition set when it
// has no partitioner, 409 repartitioned once the topic's partition count
// changed. /readyz names a shard's partition set.
//
// Keys in the path are percent-encoded (a "/" in a key may be sent as is or
// as %2F). The rows route takes prefix= and after= as raw key bytes
// (percent-encoded in the query, whatever the encoding asked for), limit=
// (default 1000, at most 10000), generation= (pin later pages to the first
// page's Kmaterialize-Generation: 409 generation_gone once it is replaced)
// and encoding=base64; Kmaterialize-More says whether rows follow the page.
//
// Every read of a table (its status, keys, rows, count, export, and their
// 404s) names what it was read at, from its own read transaction:
// Kmaterialize-Generation, Kmaterialize-Positions ("P:N,...", per partition
// the next offset the table would apply) and Kmaterialize-Cursor (opaque:
// generation, epoch, positions); the last two are left out past 4 KiB.
// keys, rows and count take min_positions=P:N,... and wait= (0 to 30s):
// the read waits, holding no transaction, until the table has applied
// those positions (a record at offset O is in once N >= O+1), and after
// wait answers 409 positions_not_reached with the current positions
// (positions.go).
// Errors are {"error": "...", "code": "..."}, never a 5xx for bad input:
//
//	400 bad_request, bad_table_name, bad_key, bad_limit, bad_generation, bad_encoding, bad_positions, bad_wait, bad_cursor,
//	    no_partitioner, key_has_no_partition (.../partition)
//	401 unauthorized (TCP with AllowRemote: no bearer token, or an unknown one; WWW-Authenticate: Bearer)
//	403 forbidden (TCP: a POST or DELETE without the admin token; a metrics token beyond /metrics)
//	404 table_not_found, key_not_found, table_not_configured (rebuild), generation_not_found (rollback, diff), route_not_found,
//	    no_run (cancel with nothing queued or going)
//	405 method_not_allowed
//	409 generation_gone, repartitioned, positions_not_reached (with "positions"), run_in_progress (with "run": the run queued or going), run_publishing (cancel past the replay),
//	    table_followed (update of a followed table),
//	    definition_changed (update of a table the config defines otherwise than it was built)
//	410 cursor_gone (changes: a cursor the feed no longer keeps, or of an earlier epoch; with "positions" and "cursor")
//	421 key_not_here (with "partition" and "partition_set")
//	422 not_utf8 (ask with encoding=base64)
//	503 table_not_ready (never published yet; with Retry-After), table_build_failed (its first build failed: reason,
//	    exit_code, next_retry, attempts), not_ready (/readyz), shutting_down,
//	    too_many_waiters (MaxPositionWaiters reads wait for min_positions), too_many_watchers (Config.MaxWatchers feeds are open)
//	500 internal (a damaged database)
//
// # Runs
//
// A run is Table.Build, or an update (Config.Update): serve itself never
// talks to Kafka. One executor runs both (runs.go). The per-table run
// lock is the daemon's own (a scheduler's singleton mode would not cover
// requested runs): a request that finds a run queued or going gets 409, a
// scheduled run that does is skipped, logged and counted. Every run goes
// through one FIFO queue, at most Config.MaxConcurrentRuns at once
// (queue.go); a failed first build that may pass (exit code 5) is retried
// (retry.go). A failed run keeps the
// previous generation served; the table's state says failed and its
// last_error carries the exit code the CLI would have given.
//
// # Follow mode
//
// A table with Table.Follow is followed once published: a goroutine owned
// by Run applies what its topic gains (materialize.KeepCurrent), each
// transaction holding rows and checkpoint, so its state is following and
// each partition shows live_high and lag; /readyz also needs its lag
// within FollowSettings.MaxLag. A rebuild of a followed table catches up with the
// follower before it publishes (follow.go); from its catch-up to its end
// the follower stays paused, across a reload too. An update of a followed
// table is 409 table_followed: the follower keeps it current, and an
// update would race it. When following cannot go on (a
// conflict, records deleted below the checkpoint) the table stays served as
// last applied, in state failed with the reason, and is rebuilt in the
// background with FollowSettings.RebuildIfNeeded.
//
// # Definitions
//
// A table whose configured definition (Table.Spec) differs from the one
// stored with it is rebuilt by the configured one, at start and on
// SetTables; until that rebuild publishes, the old table is served and
// followed by its stored definition, and updates of it are refused
// (definition.go).
//
// # Trust
//
// The unix socket is the trust boundary: its file mode and group say who may
// read and trigger runs. It is never at its path with another mode or
// group: it is bound in a private directory beside it and linked into
// place (socket.go). The TCP listener on loopback serves reads, /metrics,
// /healthz and /readyz; a POST there needs the admin token as a bearer
// token. With AllowRemote every route on it but /healthz and /readyz needs
// a token (ReadToken, MetricsToken, AdminToken: auth.go), and TLS
// (TLSCert, at least TLS 1.2, the certificate read again by SetTables:
// tls.go) unless AllowPlaintextTokens.
//
// # Lifetime
//
// Run owns every goroutine it starts (HTTP servers, scheduler, runs,
// followers, the retry loop) and waits for them before it returns: when its
// context ends it shuts down as shutdown.go says (queued runs dropped, runs
// still reading cancelled, runs past their replay published within
// Config.ShutdownTimeout), closes the database and removes the socket.
package serve
