package exportdoc

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/partition"
)

// ErrImport is returned (as an *ImportError) when a document cannot be
// imported: not an export document, another format version, rows out of
// place, or a table definition that does not match.
var ErrImport = errors.New("snapshot cannot be imported")

// ImportError says why a document cannot be imported. It matches ErrImport.
type ImportError struct {
	Source string // the document's file, or "" for a stream
	Reason string
	Err    error // the underlying error, if any
}

func (e *ImportError) Error() string {
	s := "import"
	if e.Source != "" {
		s += " " + e.Source
	}
	s += ": " + e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying error.
func (e *ImportError) Unwrap() error { return e.Err }

// Is reports whether target is ErrImport.
func (e *ImportError) Is(target error) bool { return target == ErrImport }

// Header is an export document without its rows, as Reader reads it.
type Header struct {
	Format              int                    `json:"format"`
	Table               string                 `json:"table"`
	Topic               string                 `json:"topic"`
	Fold                string                 `json:"fold"`
	Params              map[string]string      `json:"params"`
	EndMark             string                 `json:"end_mark"`
	Encoding            string                 `json:"encoding"`
	Partitions          []checkpoint.Partition `json:"partitions"`
	UpdatesSinceRebuild int64                  `json:"updates_since_rebuild"`
	Totals              map[string]int64       `json:"totals"`
	// PartitionSet (read, sorted), PartitionsOfTopic and Partitioner are
	// a shard's (docs/shards.md); nil, 0 and "" for a table over all
	// partitions, or a document written before they existed.
	PartitionSet      Set    `json:"partition_set,omitempty"`
	PartitionsOfTopic int32  `json:"partitions_of_topic,omitempty"`
	Partitioner       string `json:"partitioner,omitempty"`
}

// Set is a partition set, written as the document writes it: "0-2,5"
// (partition.FormatSet).
type Set []int32

// MarshalJSON writes s as a string in partition.ParseSet's syntax.
func (s Set) MarshalJSON() ([]byte, error) { return json.Marshal(partition.FormatSet(s)) }

// Reader reads an export document: its header first (NewReader), then its
// rows one at a time (Next), without holding the rows in memory. The rows
// must be the document's last member, as Write writes them.
type Reader struct {
	Header Header
	source string
	dec    *json.Decoder
	b64    bool
	rows   int64
	done   bool
	key    []byte
	val    []byte
}

// NewReader reads the header of the document in r (source names it in
// errors) up to its rows. A malformed document, a format version other
// than FormatVersion, or members after the rows are *ImportError.
func NewReader(r io.Reader, source string) (*Reader, error) {
	rd := &Reader{source: source, dec: json.NewDecoder(bufio.NewReaderSize(r, 256<<10))}
	bad := func(reason string, err error) error { return &ImportError{Source: source, Reason: reason, Err: err} }
	tok, err := rd.dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, bad("not an export document (want a JSON object)", err)
	}
	seen := map[string]bool{}
	var set string // partition_set, read once the header is
	for {
		if !rd.dec.More() {
			return nil, bad("the document has no rows member", nil)
		}
		tok, err := rd.dec.Token()
		if err != nil {
			return nil, bad("not an export document", err)
		}
		name, _ := tok.(string)
		if seen[name] {
			return nil, bad(fmt.Sprintf("member %q appears twice", name), nil)
		}
		seen[name] = true
		if name == "rows" {
			break
		}
		var dst any
		switch name {
		case "format":
			dst = &rd.Header.Format
		case "table":
			dst = &rd.Header.Table
		case "topic":
			dst = &rd.Header.Topic
		case "fold":
			dst = &rd.Header.Fold
		case "params":
			dst = &rd.Header.Params
		case "end_mark":
			dst = &rd.Header.EndMark
		case "encoding":
			dst = &rd.Header.Encoding
		case "partitions":
			dst = &rd.Header.Partitions
		case "updates_since_rebuild":
			dst = &rd.Header.UpdatesSinceRebuild
		case "totals":
			dst = &rd.Header.Totals
		case "partition_set":
			dst = &set
		case "partitions_of_topic":
			dst = &rd.Header.PartitionsOfTopic
		case "partitioner":
			dst = &rd.Header.Partitioner
		default:
			var skip json.RawMessage
			dst = &skip
		}
		if err := rd.dec.Decode(dst); err != nil {
			return nil, bad(fmt.Sprintf("member %q", name), err)
		}
		if name == "format" && rd.Header.Format != FormatVersion {
			return nil, bad(fmt.Sprintf("format version %d; this build reads format %d (export it again with this build)", rd.Header.Format, FormatVersion), nil)
		}
	}
	for _, m := range []string{"format", "table", "topic", "fold", "end_mark", "encoding", "partitions", "totals"} {
		if !seen[m] {
			return nil, bad(fmt.Sprintf("member %q is missing before the rows", m), nil)
		}
	}
	if seen["partition_set"] {
		ps, err := partition.ParseSet(set)
		if err != nil {
			return nil, bad(`member "partition_set"`, err)
		}
		rd.Header.PartitionSet = ps
	}
	if rd.Header.PartitionsOfTopic < 0 {
		return nil, bad(fmt.Sprintf(`member "partitions_of_topic" is %d`, rd.Header.PartitionsOfTopic), nil)
	}
	switch rd.Header.Encoding {
	case "utf-8":
	case "base64":
		rd.b64 = true
	default:
		return nil, bad(fmt.Sprintf("encoding %q: want utf-8 or base64", rd.Header.Encoding), nil)
	}
	if tok, err := rd.dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, bad("rows is not an object", err)
	}
	return rd, nil
}

// Next returns the next row; ok is false after the last, once the document
// is known to end there. key and value are valid until the next call. It
// has store.Sorted's shape.
func (rd *Reader) Next() (key, value []byte, ok bool, err error) {
	if rd.done {
		return nil, nil, false, nil
	}
	bad := func(reason string, err error) error {
		return &ImportError{Source: rd.source, Reason: fmt.Sprintf("row %d: %s", rd.rows+1, reason), Err: err}
	}
	if !rd.dec.More() {
		rd.done = true
		// The rows' closing brace, then the document's; nothing after.
		if _, err := rd.dec.Token(); err != nil {
			return nil, nil, false, bad("rows do not end", err)
		}
		tok, err := rd.dec.Token()
		if err != nil || tok != json.Delim('}') {
			return nil, nil, false, &ImportError{Source: rd.source, Reason: "members after the rows (an export document ends with its rows)", Err: err}
		}
		if _, err := rd.dec.Token(); err != io.EOF {
			return nil, nil, false, &ImportError{Source: rd.source, Reason: "data after the document", Err: err}
		}
		return nil, nil, false, nil
	}
	kt, err := rd.dec.Token()
	if err != nil {
		return nil, nil, false, bad("key", err)
	}
	var vs string
	if err := rd.dec.Decode(&vs); err != nil {
		return nil, nil, false, bad(fmt.Sprintf("value of key %q", kt), err)
	}
	ks, _ := kt.(string)
	if rd.key, err = rd.decode(rd.key, ks); err != nil {
		return nil, nil, false, bad("key", err)
	}
	if rd.val, err = rd.decode(rd.val, vs); err != nil {
		return nil, nil, false, bad(fmt.Sprintf("value of key %q", ks), err)
	}
	rd.rows++
	return rd.key, rd.val, true, nil
}

// Rows returns how many rows Next has returned.
func (rd *Reader) Rows() int64 { return rd.rows }

func (rd *Reader) decode(_ []byte, s string) ([]byte, error) {
	// A fresh, non-nil slice: an empty value is present, not a tombstone.
	if !rd.b64 {
		return append(make([]byte, 0, len(s)), s...), nil
	}
	return base64.StdEncoding.AppendDecode(make([]byte, 0, len(s)), []byte(s))
}
