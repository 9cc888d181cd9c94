package exportdoc

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"unicode/utf8"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/internal/tableview"
	"github.com/kmaterialize/kmaterialize/partition"
	"github.com/kmaterialize/kmaterialize/store"
)

// FormatVersion is the export document's format version.
const FormatVersion = 1

// ErrNotUTF8 is returned when a key or value is not valid UTF-8 and
// Options.Base64 is off.
var ErrNotUTF8 = errors.New("not valid UTF-8")

// Options tune an export. The zero value is the default.
type Options struct {
	// Base64 encodes every key and value in standard base64 (and says so
	// in the document's "encoding" field). Without it, a key or value that
	// is not valid UTF-8 fails the export.
	Base64 bool
}

// header is everything but the rows, in the order it is written.
type header struct {
	Format  int               `json:"format"`
	Table   string            `json:"table"`
	Topic   string            `json:"topic"`
	Fold    string            `json:"fold"`
	Params  map[string]string `json:"params"`
	EndMark string            `json:"end_mark"`
	// Until is the end bound of an as-of rebuild (absent without one).
	Until      *store.Bound           `json:"until,omitempty"`
	Encoding   string                 `json:"encoding"`
	Partitions []checkpoint.Partition `json:"partitions"`
	// PartitionSet and PartitionsOfTopic are there for a table over a
	// subset of its topic's partitions (a shard, docs/shards.md): the
	// subset ("0-5") and the topic's count when its checkpoint was
	// captured (0, absent: unknown). Partitioner is the producers'
	// partitioner the table is defined with, when it has one.
	PartitionSet      string `json:"partition_set,omitempty"`
	PartitionsOfTopic int32  `json:"partitions_of_topic,omitempty"`
	Partitioner       string `json:"partitioner,omitempty"`
	// UpdatesSinceRebuild is how many incremental updates followed the
	// table's last full rebuild (provenance, with Partitions).
	UpdatesSinceRebuild int64            `json:"updates_since_rebuild"`
	Totals              map[string]int64 `json:"totals"`
}

// Write writes table as one JSON document to w, from one consistent read of
// db. A key or value that is not valid UTF-8 without Options.Base64 fails
// it before anything is written to w.
func Write(db *store.DB, table string, w io.Writer, opts Options) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	err := db.ReadTable(table, func(s *store.Snapshot) error { return write(s, bw, opts) })
	if err != nil {
		return fmt.Errorf("export table %q: %w", table, err)
	}
	return bw.Flush()
}

// WriteSnapshot writes the table of s as one JSON document to w, as Write
// does, for a caller that holds the read transaction itself (the daemon,
// which names the generation that answered). Everything is written and
// flushed before it returns; an error before the first byte (a key or value
// that is not valid UTF-8 without Options.Base64) leaves w untouched.
func WriteSnapshot(s *store.Snapshot, w io.Writer, opts Options) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	if err := write(s, bw, opts); err != nil {
		return fmt.Errorf("export table %q: %w", s.Meta.Name, err)
	}
	return bw.Flush()
}

func write(s *store.Snapshot, bw *bufio.Writer, opts Options) error {
	table := s.Meta.Name
	cp, _, err := checkpoint.Load(s.Tx, table)
	if err != nil {
		return fmt.Errorf("checkpoint of table %q: %w", table, err)
	}
	return writeDoc(s.Meta, cp, func(fn func(k, v []byte) error) error { return s.Rows(nil, 0, fn) }, bw, opts)
}

// PagedChunkBytes is how many bytes of rows WritePaged reads in each of its
// read transactions.
const PagedChunkBytes = 1 << 20

// WritePaged writes the document of the generation p reads, as Write does,
// from p's pages (store.Pager: a short read transaction per
// PagedChunkBytes of rows), so that no read transaction lasts while w is
// slow. cp is the table's checkpoint as read when p was made (in
// NewPager's first function). A key or value that is not valid UTF-8
// without Options.Base64 fails it before anything is written to w; so does
// a *store.PagerStaleError met while checking; one met later is returned
// after part of the document was written.
func WritePaged(p *store.Pager, cp checkpoint.Checkpoint, w io.Writer, opts Options) error {
	rows := func(fn func(k, v []byte) error) error {
		// A page is copied out of its transaction before fn sees it: fn
		// writes to w, which may block for as long as the client likes.
		var after, buf []byte
		var ends []int // ends[2i], ends[2i+1]: where row i's key and value end in buf
		for {
			buf, ends = buf[:0], ends[:0]
			last, more, err := p.Page(store.Range{}, after, 0, PagedChunkBytes, func(k, v []byte) error {
				buf = append(buf, k...)
				ends = append(ends, len(buf))
				buf = append(buf, v...)
				ends = append(ends, len(buf))
				return nil
			})
			if err != nil {
				return err
			}
			start := 0
			for i := 0; i < len(ends); i += 2 {
				if err := fn(buf[start:ends[i]], buf[ends[i]:ends[i+1]]); err != nil {
					return err
				}
				start = ends[i+1]
			}
			if !more {
				return nil
			}
			after = last
		}
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	if err := writeDoc(p.Meta, cp, rows, bw, opts); err != nil {
		return fmt.Errorf("export table %q: %w", p.Meta.Name, err)
	}
	return bw.Flush()
}

// writeDoc writes the document of a table with metadata m and checkpoint
// cp whose rows rows passes to its function, in key order, every time it
// is called (once to check them, once to write them).
func writeDoc(m store.TableMeta, cp checkpoint.Checkpoint, rows func(fn func(k, v []byte) error) error, bw *bufio.Writer, opts Options) error {
	h := header{
		Format: FormatVersion, Table: m.Name, Topic: m.Topic, Fold: m.Fold,
		Params: m.Params, EndMark: cp.EndMark, Until: m.Until, Encoding: "utf-8",
		Partitions:          cp.Partitions,
		UpdatesSinceRebuild: cp.Updates,
		Totals: map[string]int64{
			"records_read":    m.Records,
			"records_skipped": m.Skipped,
			"keys":            m.Keys,
		},
	}
	if h.Params == nil {
		h.Params = map[string]string{}
	}
	if h.Partitions == nil {
		h.Partitions = []checkpoint.Partition{}
	}
	if err := shard(&h, m, cp); err != nil {
		return err
	}
	for k, v := range m.Extra {
		h.Totals[k] = v
	}
	if opts.Base64 {
		h.Encoding = "base64"
	}
	// A key or value that cannot be shown fails the export before its
	// first byte: a half-written document on stdout would look
	// complete to the next program in a pipe. The check reads the same
	// state the rows are then written from.
	if !opts.Base64 {
		if err := rows(func(k, v []byte) error {
			if _, err := Text(k, k, "key", false); err != nil {
				return err
			}
			_, err := Text(k, v, "value", false)
			return err
		}); err != nil {
			return err
		}
	}
	hb, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return err
	}
	// Splice the rows in as the last member of the object.
	bw.Write(hb[:len(hb)-2])
	io.WriteString(bw, ",\n  \"rows\": {")
	n := 0
	err = rows(func(k, v []byte) error {
		ks, err := Text(k, k, "key", opts.Base64)
		if err != nil {
			return err
		}
		vs, err := Text(k, v, "value", opts.Base64)
		if err != nil {
			return err
		}
		kj, _ := json.Marshal(ks)
		vj, _ := json.Marshal(vs)
		if n > 0 {
			bw.WriteByte(',')
		}
		io.WriteString(bw, "\n    ")
		bw.Write(kj)
		io.WriteString(bw, ": ")
		bw.Write(vj)
		n++
		return nil
	})
	if err != nil {
		return err
	}
	if n > 0 {
		io.WriteString(bw, "\n  ")
	}
	io.WriteString(bw, "}\n}\n")
	return nil
}

// JSONLine is one row as `scan --format jsonl` prints it and the daemon's
// rows route sends it: {"key":K,"value":V} and a newline, where K and V are
// the row's Text.
func JSONLine(key, value string) []byte {
	line, _ := json.Marshal(struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}{key, value})
	return append(line, '\n')
}

// Text is how kmaterialize shows a key or value (what says which, key names
// the row) as text, in exports and in scan: base64 (standard encoding) when
// b64 is set, otherwise the bytes as a UTF-8 string, never mangled: bytes
// that are not valid UTF-8 are an error wrapping ErrNotUTF8.
func Text(key, b []byte, what string, b64 bool) (string, error) {
	if b64 {
		return base64.StdEncoding.EncodeToString(b), nil
	}
	if !utf8.Valid(b) {
		return "", fmt.Errorf("the %s of key %q is %w", what, key, ErrNotUTF8)
	}
	return string(b), nil
}

// WriteFile exports table to path atomically: it writes a temporary file in
// the same directory, fsyncs it, renames it over path and fsyncs the
// directory. On any error the previous file at path is untouched and the
// temporary file is removed.
func WriteFile(db *store.DB, table, path string, opts Options) error {
	return WriteFileWith(path, func(w io.Writer) error { return Write(db, table, w, opts) })
}

// WriteFileWith writes path atomically, as WriteFile does, with what write
// writes (the daemon's export, for the CLI's routed path).
func WriteFileWith(path string, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("export to %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("export to %s: fsync: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("export to %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("export to %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("export to %s: rename: %w", path, err)
	}
	// The rename is durable only once the directory entry is.
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("export to %s: open directory: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("export to %s: fsync directory: %w", path, err)
	}
	return nil
}

// shard sets h's partition_set and partitions_of_topic for a table over
// a subset of its topic's partitions, and its partitioner
// (tableview.ShardOf).
func shard(h *header, m store.TableMeta, cp checkpoint.Checkpoint) error {
	sh, err := tableview.ShardOf(m, cp)
	if err != nil {
		return err
	}
	h.Partitioner = sh.Partitioner
	if sh.Subset {
		h.PartitionSet, h.PartitionsOfTopic = partition.FormatSet(sh.PartitionSet), sh.PartitionsOfTopic
	}
	return nil
}
