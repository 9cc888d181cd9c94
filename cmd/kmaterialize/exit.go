package main

import (
	"context"
	"errors"

	"github.com/kmaterialize/kmaterialize/copier"
	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// Exit codes, as documented in the README and DESIGN.md.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitConflict    = 3
	exitIncomplete  = 4
	exitUnavailable = 5
	exitNotFound    = 6
)

// exitCode maps an error kind to its exit code: the one place that does.
func exitCode(err error) int {
	switch {
	case err == nil:
		return exitOK
	case isUsage(err), errors.Is(err, replay.ErrBadStart):
		return exitUsage
	case errors.Is(err, fold.ErrInvalidData):
		return exitConflict
	case errors.As(err, new(*errLedgerMismatch)):
		return exitConflict
	case errors.Is(err, copier.ErrStalled), errors.Is(err, copier.ErrInterrupted):
		return exitIncomplete
	case errors.Is(err, replay.ErrUnavailable), errors.Is(err, replay.ErrTopicNotFound),
		errors.Is(err, replay.ErrTopicDeleted):
		return exitUnavailable
	case errors.Is(err, replay.ErrStalled), errors.Is(err, replay.ErrRecordsRemoved),
		errors.Is(err, context.Canceled):
		return exitIncomplete
	case errors.Is(err, store.ErrKeyNotFound), errors.Is(err, store.ErrTableNotFound):
		return exitNotFound
	}
	return exitError
}

// hint says what to try next, for the errors where there is something.
func hint(err error) string {
	var u *usageError
	switch {
	case errors.As(err, &u):
		if u.hint != "" {
			return u.hint
		}
		return "kmaterialize help (or kmaterialize COMMAND --help)"
	case errors.Is(err, copier.ErrFenced):
		return "another copier with the same --transactional-id took over; run only one per id"
	case errors.Is(err, store.ErrLocked):
		return "stop the other kmaterialize process holding the database, or wait for its rebuild to finish"
	case errors.Is(err, replay.ErrTopicDeleted):
		return "find out who deleted the topic; the previous table is kept until a rebuild of a recreated topic succeeds"
	case errors.Is(err, replay.ErrTopicNotFound):
		return "kmaterialize describe --brokers HOST:PORT --topic TOPIC, and check the topic name"
	case errors.Is(err, replay.ErrUnavailable):
		return "check that the brokers are up and reachable (--brokers or KMATERIALIZE_BROKERS) and the security settings passed with -X, then rerun"
	case errors.Is(err, replay.ErrOpenTransaction):
		return "wait for the producer's transaction to finish, or rebuild with --end stable"
	case errors.Is(err, replay.ErrStalled):
		return "raise --stall-timeout, or check the brokers' health"
	case errors.Is(err, replay.ErrRecordsRemoved):
		return "rerun the rebuild; if retention keeps deleting under it, start later with --from-timestamp"
	case errors.Is(err, store.ErrTableNotFound):
		return "kmaterialize tables --db PATH"
	}
	return ""
}
