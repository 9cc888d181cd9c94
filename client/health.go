package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/kmaterialize/kmaterialize/api"
)

// Healthz returns nil while the daemon serves (GET /healthz).
func (c *Client) Healthz(ctx context.Context) error {
	resp, err := c.do(ctx, http.MethodGet, "/healthz", nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Readiness is the answer of GET /readyz.
type Readiness struct {
	// Ready is true once every configured table has a published
	// generation.
	Ready bool
	// Tables are the configured tables (on 503, those not ready) with
	// their state and, when not ready, why.
	Tables []ReadyTable `json:"tables"`
}

// ReadyTable is one table in a Readiness.
type ReadyTable = api.ReadyTable

// Readyz asks whether every configured table is published (GET /readyz).
// Not ready is an answer, not an error: Ready false and the tables that
// are not, with a nil error.
func (c *Client) Readyz(ctx context.Context) (Readiness, error) {
	const path = "/readyz"
	resp, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return Readiness{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		r := Readiness{Ready: true}
		return r, decode(resp, http.MethodGet, path, &r)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var nr api.ErrorBody
	if resp.StatusCode == http.StatusServiceUnavailable && json.Unmarshal(body, &nr) == nil && nr.Code == CodeNotReady {
		return Readiness{Tables: nr.Tables}, nil
	}
	return Readiness{}, bodyError(http.MethodGet, path, resp, body)
}
