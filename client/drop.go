package client

import (
	"context"
	"fmt"
	"net/http"

	"github.com/kmaterialize/kmaterialize/api"
)

// Dropped is what the daemon dropped: the table's name, and its
// generation and rows as they were.
type Dropped = api.Dropped

// Drop removes table from the daemon's database (DELETE /v1/tables/{table}):
// its entry, its generation and its checkpoint, in one transaction. An
// absent table is an *Error of CodeTableNotFound; a table in the daemon's
// config CodeTableConfigured (remove it from the config first). On TCP it
// needs the admin token.
func (c *Client) Drop(ctx context.Context, table string) (Dropped, error) {
	path := tablePath(table, "")
	resp, err := c.do(ctx, http.MethodDelete, path, nil)
	if err != nil {
		return Dropped{}, err
	}
	defer resp.Body.Close()
	var d Dropped
	if err := decode(resp, http.MethodDelete, path, &d); err != nil {
		return Dropped{}, err
	}
	if d.Table != table {
		return d, fmt.Errorf("DELETE %s: the daemon answered for table %q", path, d.Table)
	}
	return d, nil
}
