package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/kmaterialize/kmaterialize/api"
)

// RollbackResult is the answer to a rollback request.
type RollbackResult = api.RollbackResult

// Rollback makes a kept generation of table the published one, with its
// checkpoint (POST /v1/tables/{table}/rollback); gen 0 means the newest
// kept one. The generation published until then is kept in its place. A
// generation that is not kept is an *Error of CodeGenerationNotFound (404).
// On the TCP listener it needs the admin token (DialURL).
func (c *Client) Rollback(ctx context.Context, table string, gen uint64) (RollbackResult, error) {
	path := tablePath(table, "/rollback")
	var q url.Values
	if gen != 0 {
		q = url.Values{"generation": {strconv.FormatUint(gen, 10)}}
	}
	resp, err := c.do(ctx, http.MethodPost, path, q)
	if err != nil {
		return RollbackResult{}, err
	}
	defer resp.Body.Close()
	var r RollbackResult
	err = decode(resp, http.MethodPost, path, &r)
	return r, err
}

// DiffOptions tune Diff. The zero value compares the published generation
// with the one it replaced, every key, UTF-8.
type DiffOptions struct {
	From, To uint64 // 0: the default (see Diff)
	Limit    int    // 0: every changed key
	Base64   bool   // keys and values in base64
}

// Diff copies to w the keys two generations of table differ in, as JSON
// lines {"key","op","old","new"} in key order (GET
// /v1/tables/{table}/diff), and returns the generations compared (from,
// to). o.To 0 is the published generation, o.From 0 the one it replaced.
// Keys and values are UTF-8 text, or base64 with o.Base64; a key or value
// that is not UTF-8 without it is an *Error of CodeNotUTF8.
func (c *Client) Diff(ctx context.Context, table string, o DiffOptions, w io.Writer) (from, to uint64, err error) {
	path := tablePath(table, "/diff")
	q := url.Values{}
	if o.From != 0 {
		q.Set("from", strconv.FormatUint(o.From, 10))
	}
	if o.To != 0 {
		q.Set("to", strconv.FormatUint(o.To, 10))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Base64 {
		q.Set("encoding", "base64")
	}
	resp, err := c.do(ctx, http.MethodGet, path, q)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if _, err := fmt.Sscanf(resp.Header.Get(api.HeaderDiff), "%d..%d", &from, &to); err != nil {
		return 0, 0, fmt.Errorf("GET %s: the answer does not say which generations it compared: %w", path, err)
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return from, to, fmt.Errorf("GET %s: %w", path, err)
	}
	return from, to, nil
}
