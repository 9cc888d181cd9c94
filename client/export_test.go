package client

import "net/http"

// WrapTransport replaces c's transport by wrap of it, for tests that check
// the client's requests and the daemon's answers (apitest.Transport). It
// exists only in the package's tests: production clients are unchanged.
func WrapTransport(c *Client, wrap func(http.RoundTripper) http.RoundTripper) {
	c.hc.Transport = wrap(c.hc.Transport)
}
