package client

import (
	"context"
	"net/http"
	"net/url"
)

// RebuildResult is the answer to a rebuild request.
type RebuildResult struct {
	// Run is the run's id.
	Run uint64 `json:"run"`
	// Done is true when the request waited for the run to end; the fields
	// below are set only then.
	Done bool `json:"-"`
	// ExitCode is the exit code `kmaterialize rebuild` would have given:
	// 0 when the run published.
	ExitCode int `json:"exit_code"`
	// Error is the run's error, "" when it published.
	Error string `json:"error"`
	// Generation is the generation published by the run, or (when it
	// failed) the one still served; 0 when there is none.
	Generation uint64 `json:"generation"`
}

// Rebuild asks the daemon to rebuild table as its config defines it (POST
// /v1/tables/{table}/rebuild): the request carries nothing but the name.
// With wait it returns when the run ends (Done true, ExitCode set);
// without, once the run started. A run already going is an *Error of
// CodeRunInProgress (409, with its Run); a table not in the daemon's config
// CodeTableNotConfigured (404). On the TCP listener it needs the admin
// token (DialURL), else CodeForbidden (403).
func (c *Client) Rebuild(ctx context.Context, table string, wait bool) (RebuildResult, error) {
	path := tablePath(table, "/rebuild")
	var q url.Values
	if wait {
		q = url.Values{"wait": {"1"}}
	}
	resp, err := c.do(ctx, http.MethodPost, path, q)
	if err != nil {
		return RebuildResult{}, err
	}
	defer resp.Body.Close()
	var r RebuildResult
	if err := decode(resp, http.MethodPost, path, &r); err != nil {
		return RebuildResult{}, err
	}
	r.Done = resp.StatusCode == http.StatusOK
	return r, nil
}
