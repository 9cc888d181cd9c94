// Package bench owns the end-to-end benchmarks: a raw consume of a topic to
// its high marks against a full rebuild of the same topic into a bbolt file,
// timed in the same run (BenchmarkRebuild); and point gets over the
// daemon's unix socket, idle and during a rebuild (BenchmarkServeGet).
//
// Run it with:
//
//	go test -run '^$' -bench Rebuild -benchtime 1x ./bench/
//
// The benchmark starts an in-process kfake broker, fills a 6-partition topic
// with 1,000,000 records (100,000 distinct keys, 100-byte values) through a
// franz-go producer, then times, in each iteration:
//
//   - raw: replay.Run with a no-op sink: the replay's consumer with exactly
//     the replay's settings (read_committed, replay.TunedDefaults, explicit
//     assignment, position-based completion), no fold and no store;
//   - rebuild: materialize.Rebuild with the latest fold into a fresh bbolt
//     file in a temporary directory, published (fsynced);
//   - kcat, if kcat is on PATH: `kcat -C -o beginning -e -X
//     isolation.level=read_committed` over the same topic, for comparison.
//
// It reports records/s for each, the rebuild/raw time ratio, and the peak Go
// heap above the pre-rebuild baseline while the rebuild ran. The broker runs
// in the same process, so it competes with the consumer and the writer for
// the machine's cores: the figures are end-to-end on one host, not broker-
// independent client throughput.
//
// KMATERIALIZE_BENCH_RECORDS and KMATERIALIZE_BENCH_KEYS change the topic's
// size (for example 5000000 records, to check that the rebuild's memory does
// not grow with the number of records).
//
// BenchmarkServeGet uses the same topic:
//
//	go test -run '^$' -bench ServeGet -benchtime 3x ./bench/
//
// It builds the kmaterialize binary and starts `kmaterialize serve` on the
// topic (one table, built at start), then runs 8 clients in a reader
// process of its own (this test binary re-executed), each with one
// keep-alive connection, reading random keys: for
// KMATERIALIZE_BENCH_SERVE_SECONDS (default 5) with the daemon idle, and
// from a requested rebuild of the whole topic to its end. Every answer is
// checked against a fold of the produced records (status, value, and a
// generation that never goes back); one failed read fails the benchmark.
// It reports client-side p50/p99 (and p90, p99.9, max on stdout), requests
// per second, failed reads, and from the daemon: its CPU time per read and
// the p50/p99 buckets of its own handler-time histogram (/metrics).
// KMATERIALIZE_BENCH_SERVE_RATE=N paces the clients at N requests per second
// in all (default: each sends its next read when it has the answer), and
// KMATERIALIZE_BENCH_DAEMON_GOMAXPROCS sets the daemon's GOMAXPROCS alone.
package bench
