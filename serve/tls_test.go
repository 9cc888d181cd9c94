package serve

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/internal/apitest"
)

// testCA is a certificate authority made in the test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kmaterialize test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue writes a server certificate for 127.0.0.1 with serial, signed by
// the CA, and its key, as PEM files at certFile and keyFile.
func (ca *testCA) issue(t *testing.T, serial int64, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "kmaterialize test server"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRemoteListenerTLS: with tls_cert and tls_key the TCP listener speaks
// TLS 1.2 or later with the configured certificate (verified against the
// test's CA) and refuses TLS 1.1 and plain HTTP; the read token works over
// it. A reload (SetTables, what SIGHUP calls) after the files changed
// serves the new certificate to new connections (its serial); a reload
// with a pair that does not load is an error naming tls_cert and keeps the
// certificate served.
func TestRemoteListenerTLS(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	ca.issue(t, 1001, certFile, keyFile)
	const read = "read-tok-0123456789"
	cfg := baseConfig(t)
	cfg.Listen, cfg.AllowRemote, cfg.ReadToken, cfg.TLSCert, cfg.TLSKey = "127.0.0.1:0", true, read, certFile, keyFile
	d := start(t, cfg)
	addr := d.s.TCPAddr().String()

	// get makes one request on a new connection and returns the status and
	// the serial of the certificate the server showed.
	get := func(t *testing.T, tc *tls.Config, auth string) (int, int64) {
		t.Helper()
		hc := &http.Client{Transport: apitest.Transport(t, &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}), Timeout: 30 * time.Second}
		req, _ := http.NewRequest("GET", "https://"+addr+"/v1/tables", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET over TLS: %v", err)
		}
		resp.Body.Close()
		if resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
			t.Fatalf("connection state %+v, want TLS 1.2 or later", resp.TLS)
		}
		return resp.StatusCode, resp.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	trust := &tls.Config{RootCAs: ca.pool}
	if st, serial := get(t, trust, "Bearer "+read); st != 200 || serial != 1001 {
		t.Fatalf("GET with the read token: %d, certificate serial %d; want 200 and 1001", st, serial)
	}
	if st, _ := get(t, trust, ""); st != http.StatusUnauthorized {
		t.Fatalf("GET without a token over TLS: %d, want 401", st)
	}
	if st, _ := get(t, &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12}, "Bearer "+read); st != 200 {
		t.Fatalf("TLS 1.2: %d", st)
	}
	// TLS 1.1 (and 1.0): refused in the handshake.
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11})
	if err == nil {
		v := c.ConnectionState().Version
		c.Close()
		t.Fatalf("a TLS 1.1 handshake succeeded (version %#x)", v)
	}
	if !strings.Contains(err.Error(), "protocol version") {
		t.Fatalf("TLS 1.1 handshake: %v, want a protocol version alert", err)
	}
	// Plain HTTP on the TLS port gets no answer from the API.
	if r, err := (&http.Client{Transport: apitest.Transport(t, nil), Timeout: 30 * time.Second}).Get("http://" + addr + "/healthz"); err == nil {
		r.Body.Close()
		if r.StatusCode == 200 {
			t.Fatal("plain HTTP on the TLS listener was served")
		}
	}
	// An untrusted server certificate is what a client without the CA sees.
	if _, err := (&http.Client{Transport: apitest.Transport(t, nil), Timeout: 30 * time.Second}).Get("https://" + addr + "/healthz"); err == nil {
		t.Fatal("a client without the test CA trusted the certificate")
	}

	// Reload with a new certificate.
	ca.issue(t, 1002, certFile, keyFile)
	if err := d.s.SetTables(nil); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if st, serial := get(t, trust, "Bearer "+read); st != 200 || serial != 1002 {
		t.Fatalf("after the reload: %d, certificate serial %d; want 200 and 1002", st, serial)
	}
	// Reload with a pair that does not load: the key of another
	// certificate, then a file that is not PEM.
	other := filepath.Join(dir, "other")
	ca.issue(t, 1003, other+".pem", other+".key")
	otherKey, err := os.ReadFile(other + ".key")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		file string
		data []byte
	}{{"mismatched key", keyFile, otherKey}, {"not PEM", certFile, []byte("not a certificate")}} {
		name := c.name
		if err := os.WriteFile(c.file, c.data, 0o600); err != nil {
			t.Fatal(err)
		}
		err := d.s.SetTables(nil)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "tls_cert" {
			t.Fatalf("%s: reload = %v, want a *ConfigError for tls_cert", name, err)
		}
		if st, serial := get(t, trust, "Bearer "+read); st != 200 || serial != 1002 {
			t.Fatalf("%s: after the failed reload: %d, serial %d; want the certificate kept (1002)", name, st, serial)
		}
	}
	// New refuses a pair that does not load.
	cfg2 := cfg
	cfg2.Socket = filepath.Join(shortDir(t), "b.sock")
	if _, err := New(cfg2); err == nil || !strings.Contains(err.Error(), "tls_cert") {
		t.Fatalf("New with a bad certificate file: %v, want a tls_cert error", err)
	}
}
