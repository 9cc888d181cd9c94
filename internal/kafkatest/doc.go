// Package kafkatest owns the real Apache Kafka broker that tests can start:
// its jars (brought once with Maven into a cache outside the repository), a
// fresh single-node KRaft log directory per start, the broker process, and
// the variables that name a running broker to other test processes.
//
// # Jars
//
// testdata/kafka/pom.xml pins the broker (org.apache.kafka:kafka_2.13) and
// its SLF4J provider. [Fetch] copies them with maven-dependency-plugin into
// $KMATERIALIZE_KAFKA_CACHE/kafka-<version>/ (default
// ~/.cache/kmaterialize/kafka-<version>/). The directory is published by a
// rename only after a complete copy, with a marker holding the pom's hash, so
// a half-finished fetch is never used and a changed pom fetches again.
//
// # The broker
//
// [Start] formats a new KRaft log directory in a temporary directory (with
// the SCRAM-SHA-512 credentials of an admin and a tool user), writes its own
// server.properties (no file of Kafka's is copied) and starts kafka.Kafka as
// one combined broker and controller on free loopback ports, with a 512 MiB
// heap. It listens on:
//
//   - PLAINTEXT (Broker.Addr): principal User:ANONYMOUS, a super user;
//   - SASL_PLAINTEXT with SCRAM-SHA-512 (Broker.SASLAddr): the admin is a
//     super user; the tool user has no ACL until a test grants it one;
//   - the controller's own listener, which clients never use.
//
// StandardAuthorizer is on and allow.everyone.if.no.acl.found is off, so a
// SASL principal without an ACL is refused, as on a production cluster.
// Auto topic creation is off: tests create their topics.
//
// Start returns only when the broker answers a Metadata request and a
// FindCoordinator for a group and an InitProducerId for a transactional id
// succeed, so the offsets and transaction-state topics exist. It never waits
// for a log line. [Broker.Stop] sends SIGTERM, then SIGKILL after a bound, and
// removes the log directory. A broker that fails to start, or that logs
// "No SLF4J providers" (it would log nothing else), is an error carrying the
// tail of its log.
//
// # Naming a running broker
//
// [Broker.Environ] gives the KMATERIALIZE_TEST_KAFKA* variables that
// cmd/kafkatest prints and scripts/test-kafka exports; [FromEnv] reads them
// back in a test process, which then talks to that broker instead of
// starting one.
package kafkatest
