package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/kmaterialize/kmaterialize/api"
)

// Response headers of the API.
const (
	// HeaderGeneration names the generation that answered a read.
	HeaderGeneration = api.HeaderGeneration
	// HeaderMore is "true" on a rows page when rows follow its last one.
	HeaderMore = api.HeaderMore
	// HeaderPositions and HeaderCursor name the positions a read was
	// read at (ReadInfo).
	HeaderPositions = api.HeaderPositions
	HeaderCursor    = api.HeaderCursor
)

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// Client talks to one daemon. It is safe for concurrent use; Close releases
// its idle connections.
type Client struct {
	base  string // "http://kmaterialize" for a socket, the URL for TCP
	addr  string // what messages name: the socket path or the URL
	token string
	hc    *http.Client
}

// Dial returns a client of the daemon listening on the unix socket at
// path. It connects on the first request.
func Dial(path string) *Client {
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
	return newClient("http://kmaterialize", path, "", dial)
}

// DialURL returns a client of the daemon's TCP listener at base (e.g.
// "http://127.0.0.1:9466", or https:// for a listener with tls_cert,
// verified against the system's roots). token is sent as a bearer token
// with every request: the admin token that POST routes need there, or, on
// a listener with allow_remote, the read token for reads ("" for reads on
// a loopback listener without allow_remote).
func DialURL(base, token string) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("daemon URL %q: want http://HOST:PORT", base)
	}
	var d net.Dialer
	return newClient(strings.TrimRight(base, "/"), base, token, d.DialContext), nil
}

func newClient(base, addr, token string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			c, err := dial(ctx, network, a)
			if err != nil && ctx.Err() == nil {
				return nil, &unreachableError{addr: addr, err: err}
			}
			return c, err
		},
		MaxIdleConnsPerHost: 4,
	}
	// No Timeout: the caller's context bounds each request, and a rebuild
	// with wait takes as long as the rebuild.
	return &Client{base: base, addr: addr, token: token, hc: &http.Client{Transport: tr}}
}

// Addr is the socket path or URL the client talks to.
func (c *Client) Addr() string { return c.addr }

// Close closes the client's idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// send makes one request and returns the response whatever its status.
func (c *Client) send(ctx context.Context, method, path string, q url.Values) (*http.Response, error) {
	return c.sendBody(ctx, method, path, q, nil)
}

// sendBody is send with a JSON body (nil: none).
func (c *Client) sendBody(ctx context.Context, method, path string, q url.Values, body []byte) (*http.Response, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp, nil
}

// do is send, with an error response turned into an *Error. The caller
// closes the body of the response it gets.
func (c *Client) do(ctx context.Context, method, path string, q url.Values) (*http.Response, error) {
	return c.doBody(ctx, method, path, q, nil)
}

// doBody is do with a JSON body (nil: none).
func (c *Client) doBody(ctx context.Context, method, path string, q url.Values, body []byte) (*http.Response, error) {
	resp, err := c.sendBody(ctx, method, path, q, body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, responseError(method, path, resp)
	}
	return resp, nil
}

// responseError reads an error response.
func responseError(method, path string, resp *http.Response) *Error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	return bodyError(method, path, resp, body)
}

// bodyError is the *Error of an error response whose body was read.
func bodyError(method, path string, resp *http.Response, body []byte) *Error {
	e := &Error{Method: method, Path: path, Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header), Read: readInfo(resp)}
	var ae api.ErrorBody
	if json.Unmarshal(body, &ae) == nil && ae.Code != "" {
		e.Code, e.Message, e.Run = ae.Code, ae.Error, ae.Run
		if ae.Positions != nil {
			e.Read.Positions = ae.Positions
		}
		if ae.Cursor != "" {
			e.Read.Cursor = ae.Cursor // a 410 cursor_gone's: the table's now
		}
		if ae.Partition != nil {
			e.Partition = *ae.Partition
		}
		e.PartitionSet = ae.PartitionSet
		e.Partial = ae.Code == api.CodeKeyNotFound && resp.Header.Get(api.HeaderPartial) == "true"
	} else {
		e.Message = strings.TrimSpace(string(body))
	}
	return e
}

// getJSON decodes the body of a GET into v.
func (c *Client) getJSON(ctx context.Context, path string, v any) error {
	resp, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decode(resp, http.MethodGet, path, v)
}

func decode(resp *http.Response, method, path string, v any) error {
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("%s %s: decode the response: %w", method, path, err)
	}
	return nil
}

// tablePath is /v1/tables/{table} plus rest.
func tablePath(table, rest string) string {
	return "/v1/tables/" + escapeSegment(table) + rest
}

// escapeSegment percent-encodes every byte of s but ASCII letters, digits,
// '-', '_' and '~', so that any key (one with '/', '.', '%', or bytes that
// are not UTF-8) is one path segment the daemon decodes back to s, never a
// "." or ".." that path cleaning would redirect.
func escapeSegment(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// generation reads the Kmaterialize-Generation header (0 when absent).
func generation(resp *http.Response) (uint64, error) {
	s := resp.Header.Get(HeaderGeneration)
	if s == "" {
		return 0, nil
	}
	var g uint64
	if _, err := fmt.Sscan(s, &g); err != nil {
		return 0, fmt.Errorf("%s header %q: %w", HeaderGeneration, s, err)
	}
	return g, nil
}

var errNoGeneration = errors.New("the response names no generation")
