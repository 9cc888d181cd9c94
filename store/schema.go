package store

import (
	"encoding/binary"
	"fmt"
	"path/filepath"

	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
)

// FormatVersion is the on-disk layout version written under
// [KeyFormatVersion]. Every change to a bucket, key or value below bumps it
// and adds a step to migrations (migrate.go): a read-write Open migrates an
// older file in one transaction, and every Open refuses a newer file rather
// than guess at its layout.
//
// History:
//
//	1  the layout below without a generation's state and keys
//	2  each generation records its state and, once published, its row count
//	3  kept generations (state "kept", with their table metadata and
//	   checkpoint); an older build would take them for leftovers and
//	   remove them, so it must refuse the file
const FormatVersion uint64 = 3

// Every name this package puts on disk lives here, and where package
// checkpoint's two (checkpoint.Bucket, checkpoint.KeptBucket) sit.
//
// Layout of a file:
//
//	meta/                         BucketMeta
//	    format_version            -> uint64 big-endian (FormatVersion)
//	    generation_seq            -> uint64 big-endian, last generation number handed out
//	tables/                       BucketTables
//	    <table name>              -> TableMeta as JSON; names the published generation
//	generations/                  BucketGenerations
//	    <uint64 big-endian>/      one bucket per generation, published or not
//	        table                 -> the table name it was begun for (diagnostics)
//	        state                 -> "building" from Begin, "published" from Publish (v2),
//	                                 "kept" once a later publish kept it (v3, Generation.Keep)
//	        keys                  -> uint64 big-endian, rows at Publish (v2; absent while building)
//	        meta                  -> kept only (v3): the table's TableMeta (JSON) as it was published
//	        checkpoint/           kept only (v3): the table's checkpoint as it was (checkpoint.KeptBucket,
//	                                 written by checkpoint.Keep, package checkpoint's layout)
//	        rows/                 the table's rows: key -> value, as the fold wrote them
//	        index/                fold-private namespaces, dropped with the generation
//	            <index name>/     key -> value
//	checkpoints/                  BucketCheckpoints (checkpoint.Bucket), owned by package checkpoint:
//	    <table name>/             one table's checkpoint (layout in package checkpoint's doc)
//
// A generation bucket that no entry in tables/ names is unpublished: it is a
// rebuild in progress, or the leftover of one that crashed, and a read-write
// Open removes it. The exception is a kept generation (state "kept") of a
// table that exists: an earlier version of that table, which rollback can
// make the published one again (history.go). A kept generation whose table
// is gone (dropped) is removed like an unpublished one.
var (
	// BucketMeta holds file-wide keys: the format version and the
	// generation counter.
	BucketMeta = []byte("meta")
	// BucketTables maps a table name to its TableMeta (JSON).
	BucketTables = []byte("tables")
	// BucketGenerations holds one nested bucket per generation, keyed by the
	// generation number encoded with GenerationKey.
	BucketGenerations = []byte("generations")
	// BucketCheckpoints is package checkpoint's root bucket
	// (checkpoint.Bucket, named there: its layout is checkpoint's); it is
	// written in the same transaction as a publish.
	BucketCheckpoints = checkpoint.Bucket

	// KeyFormatVersion (in BucketMeta) is FormatVersion, big-endian uint64.
	KeyFormatVersion = []byte("format_version")
	// KeyGenerationSeq (in BucketMeta) is the last generation number handed
	// out, big-endian uint64. Numbers are never reused within a file.
	KeyGenerationSeq = []byte("generation_seq")

	// KeyGenerationTable (in a generation bucket) is the table name the
	// generation was begun for.
	KeyGenerationTable = []byte("table")
	// KeyGenerationState (in a generation bucket, since v2) is
	// StateBuilding or StatePublished.
	KeyGenerationState = []byte("state")
	// KeyGenerationKeys (in a generation bucket, since v2) is the number of
	// rows at Publish, big-endian uint64. `check` compares it with the rows
	// bucket and the table's metadata.
	KeyGenerationKeys = []byte("keys")
	// KeyGenerationMeta (in a kept generation's bucket, since v3) is the
	// table's TableMeta, JSON, as it was while the generation was
	// published.
	KeyGenerationMeta = []byte("meta")
	// BucketRows (in a generation bucket) holds the table's rows.
	BucketRows = []byte("rows")
	// BucketIndex (in a generation bucket) holds one nested bucket per
	// fold-private index.
	BucketIndex = []byte("index")
)

// Files beside the database (not inside it). They hold nothing a reader
// needs, and a read-write Open (which holds the exclusive lock, so no
// rebuild or compaction of this process or another is running) removes any
// it finds:
//
//	FILE.runs/                    RunsDir: sorted runs of a rebuild's latest fold
//	    <gen 16 hex>-<n 6>.run    RunPath: run n of generation gen (format in runfile.go)
//	FILE.compact-<random>         CompactTempPrefix: a compaction's new file before its rename
//	FILE.spool/                   SpoolDir: the daemon's spooled answers (package serve)
//	    <random>.spool            SpoolSuffix: one answer, removed once sent
//	FILE.feed/                    FeedDir: the change feeds' spooled commits (spool.go)
//	    <random>.changes          FeedSuffix: one publish's or rollback's changes
//
// RunsDir is created at a rebuild's first spill and removed when a rebuild
// leaves it empty. A FILE.runs that is not a directory is not ours: a
// rebuild that must spill fails naming it, and Open leaves it alone.

// RunsDir is the directory that holds the run files of the database at
// path.
func RunsDir(path string) string { return path + ".runs" }

// RunPath is the file of run n of generation gen of the database at path.
func RunPath(path string, gen uint64, n int) string {
	return filepath.Join(RunsDir(path), fmt.Sprintf("%016x-%06d%s", gen, n, runSuffix))
}

// runSuffix ends every run file's name; Open removes the regular files in
// RunsDir with it.
const runSuffix = ".run"

// SpoolDir is the directory where the daemon spools an answer it must read
// in one transaction and send at the client's pace (package serve creates
// it on demand). A read-write Open removes the regular files in it whose
// name ends with SpoolSuffix (a killed daemon's leftovers), and the
// directory once empty.
func SpoolDir(path string) string { return path + ".spool" }

// SpoolSuffix ends every spool file's name.
const SpoolSuffix = ".spool"

// FeedDir is the directory where a Publish or Rollback spools its changes
// for the observer (CaptureBound.Spool), created at the first. Each file is
// the observer's to remove (the daemon's change feed removes it once no
// watcher reads it); a read-write Open removes the regular files in it
// whose name ends with FeedSuffix (the previous process's, whose feeds
// ended with it), and the directory once empty.
func FeedDir(path string) string { return path + ".feed" }

// FeedSuffix ends every feed spool file's name.
const FeedSuffix = ".changes"

// CompactTempPrefix, after the database's file name, starts the name of
// Compact's temporary file in the same directory.
const CompactTempPrefix = ".compact-"

// GenerationKey encodes a generation number as its bucket key: 8 bytes,
// big-endian, so generations sort in the order they were begun.
func GenerationKey(gen uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), gen)
}

// decodeUint64 decodes an 8-byte big-endian value; ok is false for any other
// length.
func decodeUint64(b []byte) (v uint64, ok bool) {
	if len(b) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(b), true
}

// Values of KeyGenerationState.
const (
	// StateBuilding: begun, not published; removed by the next read-write
	// Open unless a table points at it.
	StateBuilding = "building"
	// StatePublished: a table points at it.
	StatePublished = "published"
	// StateKept: a table's earlier published generation, kept with its
	// metadata and checkpoint by a later publish (Generation.Keep) or a
	// rollback; no table points at it.
	StateKept = "kept"
	// StateRetired: a generation a publish replaced while a Pager read it
	// (pager.go); no table points at it, the last Pager deletes it, and
	// the next read-write Open removes it if a crash came first.
	StateRetired = "retired"
)

// setGenerationState records a generation's state, and its row count when
// published, in its bucket gb.
func setGenerationState(gb *bolt.Bucket, state string, keys uint64) error {
	if err := gb.Put(KeyGenerationState, []byte(state)); err != nil {
		return fmt.Errorf("record generation state %s: %w", state, err)
	}
	if state != StatePublished && state != StateKept {
		return nil
	}
	if err := gb.Put(KeyGenerationKeys, GenerationKey(keys)); err != nil {
		return fmt.Errorf("record generation row count: %w", err)
	}
	return nil
}
