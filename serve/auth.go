package serve

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// Who may do what on the TCP listener (Config.Listen). The unix socket is
// never asked for a token: its file mode and group are its boundary.
//
// A loopback listener without AllowRemote is open to every local user for
// reads (GET, HEAD); anything else needs the admin token (403 forbidden
// without it), as before tokens for reads existed.
//
// With AllowRemote the listener is closed: every route but /healthz and
// /readyz needs "Authorization: Bearer TOKEN". The read token opens the
// reads, the metrics token opens GET /metrics only, the admin token opens
// everything. No token, or one that is none of them, is 401 unauthorized
// with WWW-Authenticate: Bearer; a known token on a route it does not open
// is 403 forbidden. The check runs before routing, so a caller without a
// token learns nothing of the routes.

// realm is the WWW-Authenticate realm of a 401.
const realm = `Bearer realm="kmaterialize"`

// grant is what a presented token opens.
type grant int

const (
	grantNone    grant = iota // no token, or an unknown one
	grantMetrics              // GET /metrics
	grantRead                 // every read
	grantAdmin                // everything
)

// tokens are the configured bearer tokens, as SHA-256 digests: comparing
// digests in constant time takes the same time whatever the presented
// token's length, and the plain tokens are kept nowhere but in Config.
type tokens struct {
	admin, read, metrics *[sha256.Size]byte // nil when not configured
}

func newTokens(cfg Config) tokens {
	digest := func(s string) *[sha256.Size]byte {
		if s == "" {
			return nil
		}
		d := sha256.Sum256([]byte(s))
		return &d
	}
	return tokens{admin: digest(cfg.AdminToken), read: digest(cfg.ReadToken), metrics: digest(cfg.MetricsToken)}
}

// grantOf returns what the request's bearer token opens, and whether the
// request carried one at all. Every configured token is compared, so the
// time taken does not say which one nearly matched.
func (t tokens) grantOf(r *http.Request) (grant, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return grantNone, false
	}
	tok = strings.TrimLeft(tok, " ")
	if tok == "" {
		return grantNone, false
	}
	got := sha256.Sum256([]byte(tok))
	match := func(want *[sha256.Size]byte) bool {
		return want != nil && subtle.ConstantTimeCompare(got[:], want[:]) == 1
	}
	admin, read, metrics := match(t.admin), match(t.read), match(t.metrics)
	switch {
	case admin:
		return grantAdmin, true
	case read:
		return grantRead, true
	case metrics:
		return grantMetrics, true
	}
	return grantNone, true
}

func isRead(r *http.Request) bool { return r.Method == http.MethodGet || r.Method == http.MethodHead }

// authorize wraps the API's mux: on the TCP listener (tcp true) it applies
// the rules above; on the unix socket it lets every request through.
func (s *Server) authorize(tcp bool, next http.Handler) http.Handler {
	if !tcp {
		return next
	}
	toks := newTokens(s.cfg.Config)
	if !s.cfg.AllowRemote {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if isRead(r) || r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
				next.ServeHTTP(w, r)
				return
			}
			if g, _ := toks.grantOf(r); g != grantAdmin {
				writeError(w, http.StatusForbidden, codeForbidden,
					"this route changes state: on the TCP listener it needs Authorization: Bearer <admin_token> (or use the unix socket)")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			next.ServeHTTP(w, r)
			return
		}
		g, presented := toks.grantOf(r)
		var ok bool
		switch g {
		case grantNone:
			challenge := realm
			msg := "this listener needs Authorization: Bearer <token> (read_token for reads, admin_token for everything)"
			if presented {
				challenge += `, error="invalid_token"`
				msg = "the bearer token is not one this daemon accepts"
			}
			w.Header().Set("WWW-Authenticate", challenge)
			writeError(w, http.StatusUnauthorized, codeUnauthorized, msg)
			return
		case grantAdmin:
			ok = true
		case grantRead:
			ok = isRead(r)
		case grantMetrics:
			ok = isRead(r) && r.URL.Path == "/metrics"
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", realm+`, error="insufficient_scope"`)
			msg := "this route changes state: it needs the admin_token"
			if isRead(r) {
				msg = "the metrics_token opens GET /metrics only: this route needs the read_token or the admin_token"
			}
			writeError(w, http.StatusForbidden, codeForbidden, msg)
			return
		}
		next.ServeHTTP(w, r)
	})
}
