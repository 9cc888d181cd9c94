// Package verify owns the ledger check of a copy: every source record is in
// the destination, and none is there more often than in the source.
//
// Both topics are read with the replay's rules (read_committed, up to the end
// offsets captured at start, completion by position) and compared as
// multisets of records: a record the source holds twice must be in the
// destination twice. Records are identified by a SHA-256 over key, value and
// headers (or the value only); memory grows with the number of distinct
// records, about 100 bytes each.
package verify

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/replay"
)

// Config describes one check.
type Config struct {
	Brokers      string
	Props        map[string]string
	From, To     string
	ByValue      bool // compare values only (not keys and headers)
	StallTimeout time.Duration
	Examples     int // examples kept per kind; default 5
	Log          zerolog.Logger
	// Progress, if set, is called with each topic's read progress (the
	// source's, then the destination's; Progress.Topic says which), every
	// ProgressInterval (default 1s) and once when each read ends.
	Progress         func(replay.Progress)
	ProgressInterval time.Duration
}

// Position is one record's place in a topic.
type Position struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

// Example is one record that is missing or duplicated, with where it sits
// on each side. Key and Value are the record's bytes as text, encoded once
// (by the report's JSON): nil for a null key or value (a tombstone), cut to
// their first 64 bytes (Truncated says so), and base64 (standard encoding)
// when either is not valid UTF-8 (Encoding says so). With ByValue, Key is
// the key of the first such record seen.
type Example struct {
	Key         *string    `json:"key"`
	Value       *string    `json:"value"`
	Encoding    string     `json:"encoding,omitempty"`  // "base64" when Key and Value are base64
	Truncated   bool       `json:"truncated,omitempty"` // Key or Value is longer than shown`
	Source      []Position `json:"source"`
	Destination []Position `json:"destination"`
	SourceCount int64      `json:"source_count"`
	DestCount   int64      `json:"destination_count"`
}

// Report is the outcome. OK is true when Missing and Duplicated are zero.
type Report struct {
	From               string    `json:"from"`
	To                 string    `json:"to"`
	By                 string    `json:"by"`
	SourceRecords      int64     `json:"source_records"`
	DestinationRecords int64     `json:"destination_records"`
	Missing            int64     `json:"missing"`
	Duplicated         int64     `json:"duplicated"`
	MissingExamples    []Example `json:"missing_examples"`
	DuplicatedExamples []Example `json:"duplicated_examples"`
	OK                 bool      `json:"ok"`
}

type entry struct {
	src, dst       int64
	srcPos, dstPos []Position // first few
	key, value     []byte     // shortened copies, for examples; nil is a null
	truncated      bool
}

const keepPositions = 3

// Run reads both topics and compares them.
func Run(ctx context.Context, c Config) (Report, error) {
	if c.Examples <= 0 {
		c.Examples = 5
	}
	rep := Report{From: c.From, To: c.To, By: "key,value,headers", MissingExamples: []Example{}, DuplicatedExamples: []Example{}}
	if c.ByValue {
		rep.By = "value"
	}
	seen := map[[32]byte]*entry{}
	read := func(topic string, src bool) (int64, error) {
		cfg := replay.Config{Brokers: c.Brokers, Props: c.Props, Topic: topic, StallTimeout: c.StallTimeout,
			Headers: !c.ByValue, Log: c.Log, Progress: c.Progress, ProgressInterval: c.ProgressInterval}
		res, err := replay.Run(ctx, cfg, func(batch []fold.Record) error {
			for i := range batch {
				r := &batch[i]
				h := identity(r, c.ByValue)
				e := seen[h]
				if e == nil {
					k, kcut := short(r.Key)
					v, vcut := short(r.Value)
					e = &entry{key: k, value: v, truncated: kcut || vcut}
					seen[h] = e
				}
				pos := Position{r.Partition, r.Offset}
				if src {
					e.src++
					if len(e.srcPos) < keepPositions {
						e.srcPos = append(e.srcPos, pos)
					}
				} else {
					e.dst++
					if len(e.dstPos) < keepPositions {
						e.dstPos = append(e.dstPos, pos)
					}
				}
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", topic, err)
		}
		return res.Records, nil
	}
	var err error
	if rep.SourceRecords, err = read(c.From, true); err != nil {
		return rep, err
	}
	if rep.DestinationRecords, err = read(c.To, false); err != nil {
		return rep, err
	}
	var missing, dups []*entry
	for _, e := range seen {
		switch {
		case e.src > e.dst:
			rep.Missing += e.src - e.dst
			missing = append(missing, e)
		case e.dst > e.src:
			rep.Duplicated += e.dst - e.src
			dups = append(dups, e)
		}
	}
	rep.MissingExamples = examples(missing, c.Examples, true)
	rep.DuplicatedExamples = examples(dups, c.Examples, false)
	rep.OK = rep.Missing == 0 && rep.Duplicated == 0
	return rep, nil
}

// examples picks the first n entries by source (or destination) position,
// so the report is the same on every run.
func examples(es []*entry, n int, bySource bool) []Example {
	first := func(e *entry) Position {
		ps := e.dstPos
		if bySource {
			ps = e.srcPos
		}
		if len(ps) == 0 {
			ps = append(e.srcPos, e.dstPos...)
		}
		return ps[0]
	}
	sort.Slice(es, func(i, j int) bool {
		a, b := first(es[i]), first(es[j])
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.Offset < b.Offset
	})
	out := []Example{}
	for _, e := range es {
		if len(out) == n {
			break
		}
		ex := Example{Truncated: e.truncated, Source: orEmpty(e.srcPos), Destination: orEmpty(e.dstPos),
			SourceCount: e.src, DestCount: e.dst}
		text := func(b []byte) *string {
			if b == nil {
				return nil
			}
			s := string(b)
			return &s
		}
		if utf8.Valid(e.key) && utf8.Valid(e.value) {
			ex.Key, ex.Value = text(e.key), text(e.value)
		} else {
			b64 := func(b []byte) *string {
				if b == nil {
					return nil
				}
				s := base64.StdEncoding.EncodeToString(b)
				return &s
			}
			ex.Key, ex.Value, ex.Encoding = b64(e.key), b64(e.value), "base64"
		}
		out = append(out, ex)
	}
	return out
}

func orEmpty(p []Position) []Position {
	if p == nil {
		return []Position{}
	}
	return p
}

// identity hashes what makes two records the same: length-prefixed key,
// value and headers (order kept), with null distinguished from empty.
func identity(r *fold.Record, byValue bool) [32]byte {
	h := sha256.New()
	var n [9]byte
	field := func(b []byte, null bool) {
		if null {
			n[0] = 0
			h.Write(n[:1])
			return
		}
		n[0] = 1
		binary.BigEndian.PutUint64(n[1:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	if !byValue {
		field(r.Key, r.Key == nil)
	}
	field(r.Value, r.Value == nil)
	if !byValue {
		binary.BigEndian.PutUint64(n[1:], uint64(len(r.Headers)))
		h.Write(n[1:])
		for _, hd := range r.Headers {
			field([]byte(hd.Key), false)
			field(hd.Value, hd.Value == nil)
		}
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// short copies at most the first 64 bytes of b (keeping a null a null),
// cut at a character boundary when b is UTF-8; cut says whether it was cut.
func short(b []byte) (_ []byte, cut bool) {
	const max = 64
	if b == nil {
		return nil, false
	}
	if len(b) <= max {
		return append([]byte{}, b...), false
	}
	n := max
	if utf8.Valid(b) {
		for n > 0 && !utf8.RuneStart(b[n]) {
			n--
		}
	}
	return append([]byte{}, b[:n]...), true
}
