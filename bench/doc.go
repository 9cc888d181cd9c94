// Package bench owns the end-to-end throughput benchmark: a raw consume of a
// topic to its high marks against a full rebuild of the same topic into a
// bbolt file, timed in the same run.
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
package bench
