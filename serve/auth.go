package serve

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/kmaterialize/kmaterialize/api"
)

// Who may do what on the TCP listener (Config.Listen). The unix socket is
// never asked for a token: its file mode and group are its boundary.
//
// Each route says who may call it (route.access, routes.go). A loopback
// listener without AllowRemote is open to every local user for the reads
// (GET and HEAD routes); anything else needs the admin token (403
// forbidden without it), as before tokens for reads existed.
//
// With AllowRemote the listener is closed: every route but /healthz and
// /readyz needs "Authorization: Bearer TOKEN". The read token opens the
// reads, the metrics token opens GET /metrics only, the admin token opens
// everything. No token, or one that is none of them, is 401 unauthorized
// with WWW-Authenticate: Bearer; a known token on a route it does not open
// is 403 forbidden. The check runs before the route's handler, and a
// request no route matches needs what a route of its method would
// (accessOf), so a caller without a token learns nothing of the routes.

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

// authorizer applies the rules above on the TCP listener.
type authorizer struct {
	remote bool // AllowRemote: every route but the public ones needs a token
	toks   tokens
}

// authorizer returns the TCP listener's authorizer (tcp true), nil for the
// unix socket.
func (s *Server) authorizer(tcp bool) *authorizer {
	if !tcp {
		return nil
	}
	return &authorizer{remote: s.cfg.AllowRemote, toks: newTokens(s.cfg.Config)}
}

// allow returns whether r may call a route of access acc; when it may
// not, it has answered 401 or 403.
func (a *authorizer) allow(w http.ResponseWriter, r *http.Request, acc access) bool {
	if acc == accessPublic {
		return true
	}
	if !a.remote {
		if acc != accessAdmin {
			return true
		}
		if g, _ := a.toks.grantOf(r); g != grantAdmin {
			writeError(w, http.StatusForbidden, api.CodeForbidden,
				"this route changes state: on the TCP listener it needs Authorization: Bearer <admin_token> (or use the unix socket)")
			return false
		}
		return true
	}
	g, presented := a.toks.grantOf(r)
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
		writeError(w, http.StatusUnauthorized, api.CodeUnauthorized, msg)
		return false
	case grantAdmin:
		ok = true
	case grantRead:
		ok = acc == accessRead || acc == accessMetrics
	case grantMetrics:
		ok = acc == accessMetrics
	}
	if !ok {
		w.Header().Set("WWW-Authenticate", realm+`, error="insufficient_scope"`)
		msg := "this route changes state: it needs the admin_token"
		if acc != accessAdmin {
			msg = "the metrics_token opens GET /metrics only: this route needs the read_token or the admin_token"
		}
		writeError(w, http.StatusForbidden, api.CodeForbidden, msg)
		return false
	}
	return true
}
