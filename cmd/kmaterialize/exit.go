package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/config"
	"github.com/kmaterialize/kmaterialize/copier"
	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/exportdoc"
	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/localkafka"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/serve"
	"github.com/kmaterialize/kmaterialize/store"
)

// Exit codes, as documented in docs/operations.md ("Exit codes").
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitConflict    = 3
	exitIncomplete  = 4
	exitUnavailable = 5
	exitNotFound    = 6
	exitBusy        = 7
)

// exitCode maps an error kind to its exit code: the one place that does.
func exitCode(err error) int {
	var de *daemonError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &de):
		// The daemon's answer, mapped to the direct path's code in route.go.
		return de.code
	case errors.Is(err, store.ErrInternal):
		// Before the others: the panic's value may be any error.
		return exitError
	case isUsage(err), errors.Is(err, replay.ErrBadStart), errors.Is(err, replay.ErrBadEnd), errors.Is(err, replay.ErrBadProperty),
		errors.Is(err, replay.ErrPartitionsMissing),
		errors.Is(err, config.ErrInvalid), errors.Is(err, config.ErrUnknownTable), errors.Is(err, materialize.ErrBadSpec),
		errors.As(err, new(*serve.ConfigError)), errors.Is(err, decode.ErrBadSetting), errors.Is(err, localkafka.ErrBadDevTopic):
		return exitUsage
	case errors.Is(err, fold.ErrInvalidData), errors.Is(err, materialize.ErrWouldEmpty), errors.Is(err, materialize.ErrTooManyChanges),
		errors.Is(err, materialize.ErrRepartitioned):
		return exitConflict
	case errors.Is(err, materialize.ErrStaleCheckpoint) && replay.NotAuthorized(err):
		// A checkpoint that cannot be checked because the principal may
		// not read the topic's configuration (DescribeConfigs): the ACL
		// is what is missing, as for any other refusal.
		return exitUnavailable
	case errors.Is(err, materialize.ErrStaleCheckpoint):
		// Before ErrUnavailable: a stale checkpoint's reason may quote an
		// unreadable topic configuration, which is not an outage.
		return exitIncomplete
	case errors.Is(err, materialize.ErrNoSpec), errors.Is(err, exportdoc.ErrImport):
		return exitUsage
	case errors.As(err, new(*errLedgerMismatch)):
		return exitConflict
	case errors.Is(err, copier.ErrStalled), errors.Is(err, copier.ErrInterrupted):
		return exitIncomplete
	case errors.Is(err, decode.ErrUnavailable):
		return exitUnavailable
	case errors.Is(err, replay.ErrUnavailable), errors.Is(err, replay.ErrTopicNotFound),
		errors.Is(err, copier.ErrUnauthorized), errors.Is(err, replay.ErrTopicDeleted):
		return exitUnavailable
	case errors.Is(err, replay.ErrStalled), errors.Is(err, replay.ErrRecordsRemoved),
		errors.Is(err, context.Canceled), errors.Is(err, materialize.ErrCheckpointMoved):
		return exitIncomplete
	case errors.Is(err, store.ErrKeyNotFound), errors.Is(err, store.ErrTableNotFound), errors.Is(err, store.ErrNoDatabase),
		errors.Is(err, replay.ErrGroupNotFound), errors.Is(err, store.ErrGenerationNotFound):
		return exitNotFound
	case errors.Is(err, store.ErrLocked):
		return exitBusy
	}
	return exitError
}

// hint says what to try next, for the errors where there is something.
func hint(err error) string {
	var u *usageError
	var de *daemonError
	switch {
	case errors.As(err, &de) && de.hint != "":
		return de.hint
	case errors.Is(err, store.ErrInternal):
		// A bug: no command of the operator's can fix it.
		return ""
	case errors.As(err, &u):
		if u.hint != "" {
			return u.hint
		}
		return "kmaterialize help (or kmaterialize COMMAND --help)"
	case errors.As(err, new(*serve.ConfigError)):
		return "fix the value in the config file (kmaterialize serve --help shows the format)"
	case errors.Is(err, config.ErrInvalid):
		return "fix the config file at the line named"
	case errors.Is(err, replay.ErrBadProperty):
		return "check the -X property's name and value against librdkafka's CONFIGURATION.md"
	case errors.Is(err, copier.ErrUnauthorized):
		return copyRefusalHint(err)
	case errors.Is(err, copier.ErrFenced):
		return "another copier with the same --transactional-id took over; run only one per id"
	case errors.Is(err, store.ErrLocked):
		var le *store.LockedError
		if errors.As(err, &le) && le.Holder != nil && le.Holder.Socket != "" {
			// A daemon does not finish: waiting cannot help.
			return fmt.Sprintf("a kmaterialize daemon holds the database: get, scan, tables, export and rebuild go through it (--socket %s); stop the daemon to run this command on the file", le.Holder.Socket)
		}
		return "wait for the holder to finish and run the command again, or give it longer with --lock-timeout"
	case errors.As(err, new(*checkFailed)):
		return fmt.Sprintf("to start over and keep the damaged file: kmaterialize rebuild --db %s --replace-corrupt ...", corruptPath(err))
	case errors.Is(err, store.ErrCorrupt):
		p := corruptPath(err)
		return fmt.Sprintf("kmaterialize check --db %s lists every problem; to start over and keep the damaged file: kmaterialize rebuild --db %s --replace-corrupt ...", p, p)
	case errors.Is(err, replay.ErrTopicDeleted):
		return "find out who deleted the topic; the previous table is kept until a rebuild of a recreated topic succeeds"
	case errors.Is(err, replay.ErrTopicNotFound):
		return "kmaterialize describe --brokers HOST:PORT --topic TOPIC, and check the topic name"
	case errors.Is(err, decode.ErrUnavailable):
		return "check that the Schema Registry is up and reachable (--schema-registry, " + decode.EnvURL + " or schema_registry.url) and its credentials (the config file's schema_registry section, or " + decode.EnvUser + "/" + decode.EnvPassword + " or " + decode.EnvToken + "), then rerun"
	case errors.Is(err, decode.ErrBadSetting):
		return "--value-format avro --schema-registry http://localhost:8081 (credentials from " + decode.EnvUser + " and " + decode.EnvPassword + ")"
	case replay.NotAuthorized(err):
		return "grant the principal the ACL named above (docs/security.md lists each command's), or check its credentials (-F, --config's kafka.properties, -X)"
	case errors.As(err, new(*replay.UnreachableError)):
		return "check the broker addresses (--brokers, KMATERIALIZE_BROKERS, -X bootstrap.servers or the config's kafka.brokers) and that the brokers run there, then rerun"
	case errors.Is(err, replay.ErrUnavailable):
		return "check that the brokers are up and reachable (--brokers or KMATERIALIZE_BROKERS) and the security settings passed with -X, then rerun"
	case errors.Is(err, replay.ErrOpenTransaction):
		return "wait for the producer's transaction to finish, or rebuild with --end stable"
	case errors.Is(err, replay.ErrStalled):
		return "raise --stall-timeout, or check the brokers' health"
	case errors.Is(err, replay.ErrRecordsRemoved):
		return "rerun the rebuild; if retention keeps deleting under it, start later with --from-timestamp"
	case errors.Is(err, materialize.ErrStaleCheckpoint):
		return "kmaterialize update --rebuild-if-needed runs a full rebuild instead (or kmaterialize rebuild)"
	case errors.Is(err, materialize.ErrCheckpointMoved):
		return "run the update again"
	case errors.Is(err, materialize.ErrNoSpec):
		return "kmaterialize rebuild --table NAME with the table's topic and fold options (or --config), once"
	case errors.Is(err, store.ErrTableNotFound):
		return "kmaterialize tables --db PATH"
	case errors.Is(err, store.ErrNoDatabase):
		return "check the --db path, or build a table there first: kmaterialize rebuild --db PATH --topic TOPIC"
	case errors.Is(err, replay.ErrGroupNotFound):
		return "check the group's name (kafka-consumer-groups.sh --list shows the groups), or drop --topic to see every topic it committed on"
	case errors.Is(err, materialize.ErrTooManyChanges):
		return "check what changed (the counts above); to publish it anyway, rebuild without --max-change or with a higher one"
	case errors.Is(err, store.ErrGenerationNotFound):
		return "kmaterialize tables --db PATH lists the kept generations; rebuild with --keep N to keep earlier ones"
	case errors.Is(err, replay.ErrBadEnd):
		return "kmaterialize describe --brokers HOST:PORT --topic TOPIC shows each partition's offsets"
	case errors.Is(err, materialize.ErrWouldEmpty):
		return "check --from-timestamp or --from-offsets; to publish the empty table anyway, add --allow-empty"
	case errors.As(err, new(*fold.DataError)):
		return "fix or remove the record, or rebuild with --on-bad-record skip to leave such records out and count them (kmaterialize tables shows them)"
	}
	return ""
}

// withInternalStack logs the stack of an internal error (a panic a read
// recovered in code that is not bbolt's: store.PanicError) at debug level.
// The error's message, printed like any other, says what panicked and
// exits 1 with no hint: the stack is for a bug report, not for the
// operator, and nothing about the file needs repairing.
func withInternalStack(cmd *cli.Command) {
	action := cmd.Action
	if action == nil {
		return
	}
	cmd.Action = func(c *cli.Context) error {
		err := action(c)
		var pe *store.PanicError
		if errors.As(err, &pe) {
			if log, lerr := newLogger(c); lerr == nil {
				log.Debug().Str("function", pe.Function).Str("stack", string(pe.Stack)).Msg("internal error: the panic's stack")
			}
		}
		return err
	}
}

// corruptPath is the file a corrupt error names, or FILE.
func corruptPath(err error) string {
	var ce *store.CorruptError
	if errors.As(err, &ce) {
		return ce.Path
	}
	return "FILE"
}

// copyRefusalHint names the ACL a copy was refused for, from the broker's
// error code (docs/security.md's table, the copy's row).
func copyRefusalHint(err error) string {
	var ke kafka.Error
	errors.As(err, &ke)
	switch ke.Code() {
	case kafka.ErrTransactionalIDAuthorizationFailed:
		return "grant the principal Write on the TransactionalId named above (--transactional-id), or check its credentials"
	case kafka.ErrGroupAuthorizationFailed:
		return "grant the principal Read on the group named above (--group), or check its credentials"
	case kafka.ErrTopicAuthorizationFailed:
		return "grant the principal Read on the --from topic and Write on the --to topic, or check its credentials"
	case kafka.ErrClusterAuthorizationFailed:
		return "grant the principal IdempotentWrite on the cluster (brokers before 2.8 need it), or check its credentials"
	}
	return "grant the principal Write on the TransactionalId, Read on the group, Read on --from and Write on --to (docs/security.md), or check its credentials"
}
