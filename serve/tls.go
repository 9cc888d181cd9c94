package serve

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync/atomic"
	"time"
)

// certHolder holds the TCP listener's certificate (Config.TLSCert and
// TLSKey). Each handshake reads the current one (tls.Config.GetCertificate),
// and a reload swaps it whole, so a connection gets the old certificate or
// the new one, never a mix, and connections already open keep theirs. A
// holder is safe for concurrent use.
type certHolder struct {
	certFile, keyFile string
	cur               atomic.Pointer[tls.Certificate]
}

// newCertHolder loads the pair; an error leaves nothing to serve with.
func newCertHolder(certFile, keyFile string) (*certHolder, error) {
	h := &certHolder{certFile: certFile, keyFile: keyFile}
	cert, err := h.load()
	if err != nil {
		return nil, err
	}
	h.cur.Store(cert)
	return h, nil
}

// load reads and checks the pair without installing it: the key must be
// the certificate's, and the leaf must parse.
func (h *certHolder) load() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(h.certFile, h.keyFile)
	if err != nil {
		return nil, &ConfigError{Field: "tls_cert", Value: h.certFile, Reason: fmt.Sprintf("with tls_key %s: %v", h.keyFile, err)}
	}
	if cert.Leaf == nil {
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			return nil, &ConfigError{Field: "tls_cert", Value: h.certFile, Reason: err.Error()}
		}
		cert.Leaf = leaf
	}
	return &cert, nil
}

// reload reads the files again and installs what they hold now; when they
// do not load, the certificate served stays the one before, and the error
// says why.
func (h *certHolder) reload() (*x509.Certificate, error) {
	cert, err := h.load()
	if err != nil {
		return nil, err
	}
	h.cur.Store(cert)
	return cert.Leaf, nil
}

// leaf is the certificate served now.
func (h *certHolder) leaf() *x509.Certificate { return h.cur.Load().Leaf }

// config is the listener's TLS configuration: TLS 1.2 at least (1.0 and
// 1.1 are refused in the handshake), HTTP/1.1 only (the streaming routes
// manage their connection's write deadline per chunk, as on plain TCP).
func (h *certHolder) config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return h.cur.Load(), nil
		},
	}
}

// logCert says which certificate the listener serves (nothing secret: the
// serial, subject and validity are in every handshake), and warns when it
// is not valid now.
func (s *Server) logCert(msg string, leaf *x509.Certificate) {
	now := s.now()
	ev := s.cfg.Log.Info()
	if now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		ev = s.cfg.Log.Warn().Bool("valid_now", false)
	}
	ev.Str("tls_cert", s.cfg.TLSCert).Str("serial", leaf.SerialNumber.Text(16)).Str("subject", leaf.Subject.String()).
		Str("not_after", leaf.NotAfter.UTC().Format(time.RFC3339)).Msg(msg)
}

// reloadCert is the certificate's part of a reload (SetTables): the files
// read again, or, when they do not load, an error and the certificate
// kept. Without TLS it does nothing.
func (s *Server) reloadCert() error {
	if s.certs == nil {
		return nil
	}
	leaf, err := s.certs.reload()
	if err != nil {
		s.cfg.Log.Error().Err(err).Str("serial", s.certs.leaf().SerialNumber.Text(16)).
			Msg("TLS certificate reload failed: the listener keeps serving the certificate it had")
		return err
	}
	s.logCert("TLS certificate loaded", leaf)
	return nil
}
