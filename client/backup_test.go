package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/kmaterialize/kmaterialize/api"
)

// TestBackupChecksDigest: Backup refuses, as ErrBackupDigest, an answer
// whose bytes are not what its headers say (another SHA-256, or fewer
// bytes: a damaged or cut copy; a daemon cannot be made to send one, so a
// handler stands in for it), and takes one that is.
func TestBackupChecksDigest(t *testing.T) {
	body := bytes.Repeat([]byte("page"), 4096)
	sum := sha256.Sum256(body)
	good := hex.EncodeToString(sum[:])
	for _, c := range []struct {
		name   string
		digest string
		send   []byte
		ok     bool
	}{
		{"whole", good, body, true},
		{"another digest", hex.EncodeToString(make([]byte, 32)), body, false},
		{"a byte changed", good, append(append([]byte{}, body[:100]...), append([]byte{'X'}, body[101:]...)...), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set(api.HeaderBackupSHA256, c.digest)
				w.Header().Set(api.HeaderBackupTxID, "7")
				w.Header().Set("Content-Length", strconv.Itoa(len(c.send)))
				_, _ = w.Write(c.send)
			}))
			defer srv.Close()
			cl, err := DialURL(srv.URL, "")
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			var out bytes.Buffer
			info, err := cl.Backup(context.Background(), &out)
			if c.ok != (err == nil) || (!c.ok && !errors.Is(err, ErrBackupDigest)) {
				t.Fatalf("Backup: %v, want ok %v or ErrBackupDigest", err, c.ok)
			}
			if c.ok && (!bytes.Equal(out.Bytes(), body) || info.TxID != 7 || info.Bytes != int64(len(body))) {
				t.Fatalf("Backup: %d bytes, info %+v", out.Len(), info)
			}
		})
	}
}
