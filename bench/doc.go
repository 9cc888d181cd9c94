// Package bench owns the end-to-end benchmarks: a full rebuild of a topic
// into a bbolt file against the C floor (a C read loop over the same
// librdkafka), a raw consume and kcat reading the same topic to its high
// marks, timed in the same run (BenchmarkRebuild); and point gets over the
// daemon's unix socket, idle and during a rebuild (BenchmarkServeGet).
//
// Run it with:
//
//	go test -run '^$' -bench Rebuild -benchtime 1x ./bench/
//
// The benchmarks start the kfake broker in a process of its own
// (bench/internal/kfakebroker), as a real broker would be (or use an
// Apache Kafka broker: see below), and fill a
// 6-partition topic with 1,000,000 records (100,000 distinct keys, 100-byte
// values) through a franz-go producer. BenchmarkRebuild then times, each in
// its own process, in each round:
//
//   - floor: bench/internal/floor, a read loop written in C (in its Go
//     file's cgo preamble, which declares the few librdkafka functions and
//     structs it uses) and linked against the librdkafka that
//     confluent-kafka-go bundles (2.11.1; it checks that
//     rd_kafka_version_str() is kafka.LibraryVersion()), with the replay's
//     consumer properties (replay.ConsumerProperties: the tuned defaults,
//     the fixed read_committed, no-commit ones, and the raw consume's
//     prefetch queue). It captures each partition's watermarks once,
//     assigns every partition at its low, and reads with
//     rd_kafka_consume_batch_queue from one queue to which every
//     partition's queue is forwarded, until each position reached its end
//     mark, printing only the record count: what reading the topic costs
//     librdkafka and the broker, with nothing of Go or kmaterialize on top.
//     KMATERIALIZE_BENCH_FLOOR_PER_MESSAGE=1 also times it reading one
//     message per rd_kafka_consumer_poll call (its -per-message flag), as
//     confluent-kafka-go's Poll does;
//   - raw: replay.Run with a no-op sink (this test binary re-executed): the
//     replay's consumer with exactly the replay's settings (read_committed,
//     replay.TunedDefaults, explicit assignment, position-based completion)
//     and the prefetch queue of the default --memory, no fold and no store;
//   - rebuild: the built `kmaterialize rebuild` (latest fold, default
//     --memory) into a fresh bbolt file in a temporary directory, published
//     (fsynced), with its peak RssAnon and VmRSS sampled every 10ms from
//     /proc, its VmHWM and its rusage;
//   - kcat, if kcat is on PATH: `kcat -C -o beginning -e -X
//     isolation.level=read_committed` over the same topic, an outside
//     reference (Debian's kcat 1.7.1 runs its own librdkafka, 2.0.2).
//
// The run prints once the floor's librdkafka version and kcat's version
// line. It reports the median times and, as the headline, the medians of
// each round's rebuild/floor, beside rebuild/kcat and rebuild/raw, and
// raw/floor (the replay's read loop alone against the floor); then the peak
// memory, and the first round's file against the same file compacted.
// BenchmarkFollowApply (follow_test.go) times the floor beside its raw
// consume too and reports the follower's apply rate as a fraction of the
// floor's read rate (follow/floor-rate). The floor runs alone as
//
//	go build -o /tmp/floor ./bench/internal/floor
//	/tmp/floor -brokers HOST:PORT -topic T [-X key=value]... [-per-message]
//	/tmp/floor -version
//
// and the headline alone, medians of three rounds (the floor per message
// too), on a smaller topic:
//
//	KMATERIALIZE_BENCH_RECORDS=200000 KMATERIALIZE_BENCH_FLOOR_PER_MESSAGE=1 \
//	    go test -run '^$' -bench 'Rebuild$' -benchtime 3x ./bench/
//
// Against Apache Kafka instead of kfake (its fetch path differs: sendfile,
// little broker CPU), run the same benchmarks under scripts/test-kafka,
// which starts a one-node KRaft broker and exports KMATERIALIZE_TEST_KAFKA:
//
//	scripts/test-kafka -run '^$' -bench 'Rebuild$' -benchtime 3x -timeout 60m ./bench/
//
// (KMATERIALIZE_BENCH_RECORDS=5000000 KMATERIALIZE_BENCH_KEYS=5000000 in
// front for the 5M-distinct scenario; -bench 'Rebuild$|FollowApply|ServeGet'
// for the others).
// Whenever KMATERIALIZE_TEST_KAFKA is set, the fixture uses that broker's
// PLAINTEXT listener: it creates its topics there under names of its own
// (bench-PID-TIME, 6 partitions, one replica), fills them with the same
// records, deletes them at the end, and never stops the broker. The fill
// line names the broker ("broker: Apache Kafka 4.4.0 at ..." or "broker:
// kfake in its own process"), so every result says which it ran against.
//
// BenchmarkRebuildFileSize rebuilds the topic 10 times into one file and
// compares it with a fresh rebuild's and with the compacted file.
// KMATERIALIZE_BENCH_CPUPROFILE=FILE profiles the first rebuild (and, in
// BenchmarkFollowApply, the daemon: serve --cpuprofile);
// KMATERIALIZE_BENCH_RAW_CPUPROFILE=FILE profiles each raw consume.
//
// KMATERIALIZE_BENCH_RECORDS and KMATERIALIZE_BENCH_KEYS change the topic's
// size (for example 5000000 records and 5000000 keys, to check that the
// rebuild's memory does not grow with the number of keys).
// KMATERIALIZE_BENCH_FOLD=count measures the count fold instead: every
// value is then a flat JSON event ({"id": the key, "g": one of 100 groups,
// "pad": ...}, 100 bytes) and the rebuild runs with --fold count
// --identity-field id --group-field g, so the topic has one distinct
// identity per key. KMATERIALIZE_BENCH_KCAT=0 leaves kcat out.
// KMATERIALIZE_BENCH_READERS=N reads with N readers in the raw consume and
// the rebuild (--readers N; default the rebuild's default, 2; the floor
// keeps one consumer).
//
// BenchmarkFeedLatency (feed_test.go) times a record's produce
// acknowledgement to its change line on a watcher of the daemon's change
// feed at 1000 records/s, as BenchmarkFollowLatency times it to a read.
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
//
// BenchmarkUpdate (update_test.go) fills a topic of its own with 1,000,000
// records (the same stream: 100,000 keys, 100-byte values), rebuilds it
// once, adds 100,000 records (the stream continued, so they update keys the
// table has), and then times in each round, each in its own process:
// `kmaterialize update` from a copy of that table with the default
// --memory (applied in place), the same with --memory 64MiB (merged into a
// new generation), and a full rebuild of the 1,100,000 records:
//
//	go test -run '^$' -bench Update -benchtime 3x ./bench/
package bench
