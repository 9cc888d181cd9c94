package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/kmaterialize/kmaterialize/api"
)

// BackupInfo is what a backup the daemon sent is: its size, the SHA-256 of
// its bytes and the id of the read transaction it copied.
type BackupInfo struct {
	Bytes  int64
	SHA256 string
	TxID   int
}

// ErrBackupDigest: the bytes received are not the backup the daemon sent
// (fewer, or another SHA-256).
var ErrBackupDigest = errors.New("backup digest mismatch")

// Backup writes to w a consistent copy of the daemon's whole database file
// (GET /v1/backup) and checks it: the bytes received must be as many as
// the daemon's Content-Length and hash to its SHA-256, or the error is
// ErrBackupDigest. A backup being taken already is an *Error of
// CodeBackupRunning; one the file system cannot hold, CodeNoSpace. Write
// w somewhere temporary and rename it once Backup returns nil: a copy cut
// short is an error after part of it was written.
func (c *Client) Backup(ctx context.Context, w io.Writer) (BackupInfo, error) {
	const path = "/v1/backup"
	var info BackupInfo
	resp, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return info, err
	}
	defer resp.Body.Close()
	info.Bytes, info.SHA256 = resp.ContentLength, resp.Header.Get(api.HeaderBackupSHA256)
	if info.TxID, err = strconv.Atoi(resp.Header.Get(api.HeaderBackupTxID)); err != nil || info.Bytes < 0 || len(info.SHA256) != 64 {
		return info, fmt.Errorf("GET %s: the answer has no size, digest or transaction id (Content-Length %d, %s %q, %s %q)",
			path, info.Bytes, api.HeaderBackupSHA256, info.SHA256, api.HeaderBackupTxID, resp.Header.Get(api.HeaderBackupTxID))
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), resp.Body)
	if err != nil {
		return info, fmt.Errorf("GET %s: after %d of %d bytes: %w", path, n, info.Bytes, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != info.Bytes || got != info.SHA256 {
		return info, fmt.Errorf("GET %s: %w: received %d bytes with SHA-256 %s, sent %d bytes with %s", path, ErrBackupDigest, n, got, info.Bytes, info.SHA256)
	}
	return info, nil
}

// CompactResult is what a compaction under the daemon did.
type CompactResult = api.CompactResult

// Compact has the daemon rewrite its database file without its free pages
// while it serves (POST /v1/compact) and returns once the compacted file
// is in place. A backup or another compaction running is an *Error of
// CodeBackupRunning or CodeCompactRunning.
func (c *Client) Compact(ctx context.Context) (CompactResult, error) {
	var res CompactResult
	resp, err := c.do(ctx, http.MethodPost, "/v1/compact", nil)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return res, fmt.Errorf("POST /v1/compact: %w", err)
	}
	return res, nil
}
