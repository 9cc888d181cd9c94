package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/kmaterialize/kmaterialize/api"
)

// RebuildResult is the answer to a rebuild request: Done (and the fields
// after it) only when the request waited for the run.
type RebuildResult = api.RebuildResult

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

// UpdateResult is the answer to an update request: how the run ended.
type UpdateResult = api.UpdateResult

// Update asks the daemon to update table incrementally from its checkpoint
// (POST /v1/tables/{table}/update), with the table's stored definition and
// the daemon's brokers, and waits for the run to end. With
// rebuildIfNeeded, a checkpoint that cannot be continued runs a full
// rebuild instead of failing with exit code 4. A run of the table already
// going is an *Error of CodeRunInProgress (409). On the TCP listener it
// needs the admin token (DialURL), else CodeForbidden (403).
func (c *Client) Update(ctx context.Context, table string, rebuildIfNeeded bool) (UpdateResult, error) {
	path := tablePath(table, "/update")
	var q url.Values
	if rebuildIfNeeded {
		q = url.Values{"rebuild_if_needed": {"1"}}
	}
	resp, err := c.do(ctx, http.MethodPost, path, q)
	if err != nil {
		return UpdateResult{}, err
	}
	defer resp.Body.Close()
	var r UpdateResult
	if err := decode(resp, http.MethodPost, path, &r); err != nil {
		return UpdateResult{}, err
	}
	return r, nil
}
