package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Get returns the value of key in table and the generation that answered
// (GET /v1/tables/{table}/keys/{key}). An absent key is an *Error with
// CodeKeyNotFound, an unknown table CodeTableNotFound, a configured table
// never published CodeTableNotReady (status 503, with RetryAfter).
func (c *Client) Get(ctx context.Context, table string, key []byte) (value []byte, gen uint64, err error) {
	v, err := c.GetWith(ctx, table, key, GetOptions{})
	if err != nil {
		return nil, 0, err
	}
	return v.Value, v.Generation, nil
}

// Page sizes of Rows: the daemon's default, and the most it answers in
// one page.
const (
	DefaultPageSize = 1000
	MaxPageSize     = 10000
)

// RowsOptions select the rows of a scan. The zero value is every row, in
// pages of the daemon's default size, from the generation published when
// the first page is read.
type RowsOptions struct {
	// Prefix keeps only keys that start with it.
	Prefix []byte
	// From keeps only keys at or above it (inclusive); To only keys
	// below it (exclusive). Both combine with Prefix.
	From, To []byte
	// KeysOnly asks for keys without values: Row.Value is nil.
	KeysOnly bool
	// Limit is the most rows to return in all; 0 is no limit.
	Limit int
	// PageSize is the rows per request: 0 is DefaultPageSize, more than
	// MaxPageSize is MaxPageSize.
	PageSize int
	// Generation pins every page to that generation; 0 pins them to the
	// first page's.
	Generation uint64
	// Base64 asks for keys and values base64-encoded (encoding=base64), so
	// that rows that are not UTF-8 can be read; Row.Key and Row.Value are
	// the raw bytes either way, Row.Line is the line as sent.
	Base64 bool
	// MinPositions and Wait, as GetOptions', hold the first page until
	// the table has applied MinPositions (later pages are of its
	// generation, at positions that only grow in follow mode).
	MinPositions map[int32]int64
	Wait         time.Duration
	// OnPage, if not nil, is called with what each page was read at,
	// before its rows: in follow mode each page's positions, never below
	// the page's before.
	OnPage func(ReadInfo)
}

// Row is one row of a scan.
type Row struct {
	Key, Value []byte
	// Line is the row's JSON line as the daemon sent it, newline included:
	// what `kmaterialize scan --format jsonl` prints for it (with --base64
	// when RowsOptions.Base64).
	Line []byte
}

// Rows calls fn with each row of table in key order
// (GET /v1/tables/{table}/rows, page after page, each next page after the
// last key of the one before), reading each page's lines as they arrive.
// Every page is read from one generation, which Rows returns: when a
// publish replaces it mid-scan, the next page fails with an *Error of
// CodeGenerationGone (409) and the caller starts over. An error fn returns
// ends the scan and is returned as is.
func (c *Client) Rows(ctx context.Context, table string, o RowsOptions, fn func(Row) error) (gen uint64, err error) {
	path := tablePath(table, "/rows")
	gen = o.Generation
	var after []byte
	n := 0
	for {
		q := url.Values{}
		if len(o.Prefix) > 0 {
			q.Set("prefix", string(o.Prefix))
		}
		if len(o.From) > 0 {
			q.Set("from", string(o.From))
		}
		if len(o.To) > 0 {
			q.Set("to", string(o.To))
		}
		if o.KeysOnly {
			q.Set("keys_only", "1")
		}
		if after != nil {
			q.Set("after", string(after))
		}
		if gen != 0 {
			q.Set("generation", strconv.FormatUint(gen, 10))
		}
		if o.Base64 {
			q.Set("encoding", "base64")
		}
		limit := min(o.PageSize, MaxPageSize)
		if limit <= 0 {
			limit = DefaultPageSize
		}
		if o.Limit > 0 && o.Limit-n < limit {
			limit = o.Limit - n
		}
		q.Set("limit", strconv.Itoa(limit))
		method, body := http.MethodGet, []byte(nil)
		if after == nil {
			var err error
			if method, body, err = (GetOptions{MinPositions: o.MinPositions, Wait: o.Wait}).request(q); err != nil {
				return gen, err
			}
		}
		more, last, rows, pageGen, err := c.rowsPage(ctx, method, path, q, body, o, fn)
		if err != nil {
			return gen, positionsError(err, o.MinPositions)
		}
		if gen == 0 {
			gen = pageGen
		}
		n += rows
		if !more || rows == 0 || (o.Limit > 0 && n >= o.Limit) {
			return gen, nil
		}
		after = last
	}
}

// rowsPage reads one page, calling fn for each row.
func (c *Client) rowsPage(ctx context.Context, method, path string, q url.Values, body []byte, o RowsOptions, fn func(Row) error) (more bool, last []byte, n int, gen uint64, err error) {
	b64, keysOnly := o.Base64, o.KeysOnly
	resp, err := c.doBody(ctx, method, path, q, body)
	if err != nil {
		return false, nil, 0, 0, err
	}
	defer resp.Body.Close()
	if gen, err = generation(resp); err != nil || gen == 0 {
		return false, nil, 0, 0, fmt.Errorf("GET %s: %w", path, errors.Join(err, errNoGeneration))
	}
	if o.OnPage != nil {
		o.OnPage(readInfo(resp))
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, rerr := br.ReadBytes('\n')
		if len(line) > 0 {
			if line[len(line)-1] != '\n' {
				return false, nil, n, gen, fmt.Errorf("GET %s: the page ends inside a line: %w", path, io.ErrUnexpectedEOF)
			}
			row, err := parseRow(line, b64, keysOnly)
			if err != nil {
				return false, nil, n, gen, fmt.Errorf("GET %s: line %d: %w", path, n+1, err)
			}
			if err := fn(row); err != nil {
				return false, nil, n, gen, err
			}
			n++
			last = row.Key
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return false, nil, n, gen, fmt.Errorf("GET %s: %w", path, rerr)
		}
	}
	return resp.Header.Get(HeaderMore) == "true", last, n, gen, nil
}

// parseRow decodes one {"key": ..., "value": ...} line, or a {"key": ...}
// line when keysOnly.
func parseRow(line []byte, b64, keysOnly bool) (Row, error) {
	var r struct {
		Key   *string `json:"key"`
		Value *string `json:"value"`
	}
	if err := json.Unmarshal(line, &r); err != nil || r.Key == nil || (r.Value == nil) != keysOnly {
		if keysOnly {
			return Row{}, fmt.Errorf("not a {key} line: %q", bytes.TrimSpace(line))
		}
		return Row{}, fmt.Errorf("not a {key, value} line: %q", bytes.TrimSpace(line))
	}
	row := Row{Key: []byte(*r.Key), Line: line}
	if !keysOnly {
		row.Value = []byte(*r.Value)
	}
	if b64 {
		var err error
		if row.Key, err = base64.StdEncoding.DecodeString(*r.Key); err != nil {
			return Row{}, fmt.Errorf("key %q: %w", *r.Key, err)
		}
		if keysOnly {
			return row, nil
		}
		if row.Value, err = base64.StdEncoding.DecodeString(*r.Value); err != nil {
			return Row{}, fmt.Errorf("value of key %q: %w", *r.Key, err)
		}
	}
	return row, nil
}

// ExportOptions tune an export. The zero value is the default.
type ExportOptions struct {
	// Base64 encodes keys and values in base64, as `export --base64`.
	Base64 bool
}

// Export writes to w the document `kmaterialize export` writes for table
// (GET /v1/tables/{table}/export) and returns the generation it is of. A
// key or value that is not UTF-8 without Base64 is an *Error of
// CodeNotUTF8 before anything is written; a response cut short (the daemon
// failed mid-document) is an error after part of it was written, so a
// caller that must not leave a partial document writes w somewhere
// temporary first.
func (c *Client) Export(ctx context.Context, table string, o ExportOptions, w io.Writer) (gen uint64, err error) {
	path := tablePath(table, "/export")
	q := url.Values{}
	if o.Base64 {
		q.Set("encoding", "base64")
	}
	resp, err := c.do(ctx, http.MethodGet, path, q)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if gen, err = generation(resp); err != nil {
		return 0, fmt.Errorf("GET %s: %w", path, err)
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return gen, fmt.Errorf("GET %s: %w", path, err)
	}
	return gen, nil
}

// CountOptions select the rows Count counts: as RowsOptions' Prefix, From
// and To. The zero value counts every row.
type CountOptions struct {
	Prefix, From, To []byte
	// MinPositions and Wait, as GetOptions', hold the count until the
	// table has applied MinPositions.
	MinPositions map[int32]int64
	Wait         time.Duration
}

// Count returns the number of rows of table in the range o selects and the
// generation they were counted in (GET /v1/tables/{table}/count).
func (c *Client) Count(ctx context.Context, table string, o CountOptions) (n int64, gen uint64, err error) {
	n, ri, err := c.CountWith(ctx, table, o)
	return n, ri.Generation, err
}

// CountWith is Count, with what the count was read at (its generation and
// positions): with o.MinPositions, once the table has applied them.
func (c *Client) CountWith(ctx context.Context, table string, o CountOptions) (n int64, ri ReadInfo, err error) {
	path := tablePath(table, "/count")
	q := url.Values{}
	for name, v := range map[string][]byte{"prefix": o.Prefix, "from": o.From, "to": o.To} {
		if len(v) > 0 {
			q.Set(name, string(v))
		}
	}
	method, body, err := (GetOptions{MinPositions: o.MinPositions, Wait: o.Wait}).request(q)
	if err != nil {
		return 0, ri, err
	}
	resp, err := c.doBody(ctx, method, path, q, body)
	if err != nil {
		return 0, ri, positionsError(err, o.MinPositions)
	}
	defer resp.Body.Close()
	ri = readInfo(resp)
	var out struct {
		Count      *int64 `json:"count"`
		Generation uint64 `json:"generation"`
	}
	if err := decode(resp, method, path, &out); err != nil {
		return 0, ri, err
	}
	if out.Count == nil || out.Generation == 0 {
		return 0, ri, fmt.Errorf("%s %s: the answer has no count or no generation", method, path)
	}
	ri.Generation = out.Generation
	return *out.Count, ri, nil
}

// getManyAttempts is how many times GetMany starts over when a publish
// happens while it asks.
const getManyAttempts = 3

// GetMany returns the values of keys in table, all from one generation,
// which it returns: values[i] is nil when keys[i] is absent (or a key the
// daemon refuses, empty or over bbolt's limit, which no table holds). It
// asks key by key, and starts over when the published generation changed
// meanwhile (generations only grow, so the same one before and after means
// no publish between); after getManyAttempts it fails with an *Error of
// CodeGenerationGone.
func (c *Client) GetMany(ctx context.Context, table string, keys [][]byte) (values [][]byte, gen uint64, err error) {
	return c.GetManyWith(ctx, table, keys, GetOptions{})
}

// GetManyWith is GetMany whose every key is read with o: with
// o.MinPositions, once the table has applied them (the first read waits,
// the others find them applied).
func (c *Client) GetManyWith(ctx context.Context, table string, keys [][]byte, o GetOptions) (values [][]byte, gen uint64, err error) {
	if err := o.validate(); err != nil {
		return nil, 0, err
	}
	for attempt := 1; ; attempt++ {
		t, err := c.Table(ctx, table)
		if err != nil {
			return nil, 0, err
		}
		if t.Generation == 0 {
			// Not published: the read of a key says so, with its code.
			_, _, err := c.Get(ctx, table, []byte("k"))
			if err == nil {
				err = fmt.Errorf("table %q has no published generation", table)
			}
			return nil, 0, err
		}
		values = make([][]byte, len(keys))
		same := true
		for i, k := range keys {
			got, err := c.GetWith(ctx, table, k, o)
			v, g := got.Value, got.Generation
			switch {
			case IsCode(err, CodeKeyNotFound), IsCode(err, CodeBadKey):
				continue
			case err != nil:
				return nil, 0, err
			}
			if v == nil {
				v = []byte{}
			}
			values[i] = v
			same = same && g == t.Generation
		}
		after, err := c.Table(ctx, table)
		if err != nil {
			return nil, 0, err
		}
		if same && after.Generation == t.Generation {
			return values, t.Generation, nil
		}
		if attempt == getManyAttempts {
			return nil, 0, &Error{Method: http.MethodGet, Path: tablePath(table, "/keys/"), Status: http.StatusConflict, Code: CodeGenerationGone,
				Message: fmt.Sprintf("table %q was published %d times while its keys were read; ask again", table, attempt)}
		}
	}
}
