package copier

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/replay"
)

// Config describes one copy. Zero values mean the documented defaults.
type Config struct {
	Brokers         string
	Props           map[string]string // librdkafka properties for both clients (-X)
	From, To        string
	Group           string // consumer group whose committed offsets are the copy's progress
	TransactionalID string // used exactly as given
	// BatchRecords bounds one transaction's records. Default 1000.
	BatchRecords int
	// BatchInterval bounds one transaction's age. Default 1s.
	BatchInterval time.Duration
	// MaxRecords stops the copy after this many records (0: no limit).
	MaxRecords int64
	// Follow keeps copying until the context ends, instead of stopping at
	// the end offsets captured at start.
	Follow bool
	// Abort produces each batch, waits until the broker has it, and
	// aborts it: nothing becomes visible to read_committed readers and the
	// group does not advance.
	Abort bool
	// Repartition places records by key with the Java-compatible
	// murmur2_random partitioner instead of keeping partition numbers.
	Repartition bool
	// StallTimeout bounds how long the copy may make no progress (and how
	// long metadata and retried calls may take). Default 30s.
	StallTimeout time.Duration
	// CallTimeout bounds one attempt of a transactional call (send
	// offsets, commit, abort); a timed-out attempt is retried until
	// StallTimeout. Default 10s.
	CallTimeout time.Duration
	// ProgressInterval is how often progress is logged, or handed to
	// Progress when set. Default 5s.
	ProgressInterval time.Duration
	// Progress, if set, is called from the copy's loop every
	// ProgressInterval, and once when the copy ends, with the position of
	// each source partition this copier is assigned against its end (the
	// end offset captured at start; with Follow, the high watermark the
	// consumer last saw). It replaces the copy's own progress log line.
	Progress func(replay.Progress)
	Log      zerolog.Logger
}

func (c Config) withDefaults() Config {
	if c.BatchRecords <= 0 {
		c.BatchRecords = 1000
	}
	if c.BatchInterval <= 0 {
		c.BatchInterval = time.Second
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = 30 * time.Second
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 10 * time.Second
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = 5 * time.Second
	}
	return c
}

// InstanceID is the group.instance.id a copier with transactional id tid
// uses: stable across restarts, so the restarted copier replaces its dead
// self in the group at once.
func InstanceID(tid string) string { return "kmaterialize-copy-" + tid }

// Summary is the copy's result, printed as the last line on stdout.
type Summary struct {
	From         string `json:"from"`
	To           string `json:"to"`
	Group        string `json:"group"`
	Records      int64  `json:"records"`      // copied, or (with Abort) produced and aborted
	Transactions int64  `json:"transactions"` // committed, or (with Abort) aborted
	// Committed is true when the run committed at least one transaction:
	// false with Abort, and false for a run that committed nothing (it
	// failed before its first commit, or there was nothing to copy).
	Committed bool  `json:"committed"`
	Retries   int64 `json:"retries"` // transactional calls retried
	Aborts    int64 `json:"aborts"`  // transactions aborted after an abortable error and redone
	// SkippedByRetention counts source records deleted by retention
	// between the group's committed offset and the copy (each gap is
	// logged with its offsets).
	SkippedByRetention int64 `json:"skipped_by_retention,omitempty"`
	// EOFRereads counts records that the consumer had passed with a
	// partition EOF without delivering them, found by the re-read that
	// verifies every such EOF, and copied (each is logged).
	EOFRereads int64 `json:"eof_rereads,omitempty"`
	ElapsedMs  int64 `json:"elapsed_ms"`
}
