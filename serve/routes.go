package serve

import "net/http"

// access is who may call a route over TCP (auth.go). The unix socket asks
// nobody: its file mode and group are its boundary.
type access int

const (
	accessPublic  access = iota // anyone, with or without a token: /healthz, /readyz
	accessRead                  // the reads: open on a loopback listener, the read or admin token with AllowRemote
	accessMetrics               // GET /metrics: as a read, and the metrics token too
	accessAdmin                 // what changes state: the admin token
)

// route is one route of the API: the mux is built from routes, and
// authorize asks the route that matched who may call it.
type route struct {
	method string // "GET", "POST", "DELETE"; a GET route answers HEAD too
	path   string // the mux's path pattern, e.g. "/v1/tables/{table}/keys/{key...}"
	access access // who may call it over TCP
	handle func(*Server, http.ResponseWriter, *http.Request)
}

// pattern is the route's mux pattern, also the "route" label of the
// request metrics.
func (rt route) pattern() string { return rt.method + " " + rt.path }

// routes is the API; doc.go lists it with the answers.
var routes = []route{
	{"GET", "/v1/tables", accessRead, (*Server).listTables},
	{"GET", "/v1/tables/{table}", accessRead, (*Server).getTable},
	{"GET", "/v1/tables/{table}/keys/{key...}", accessRead, (*Server).getKey},
	{"GET", "/v1/tables/{table}/rows", accessRead, (*Server).getRows},
	{"GET", "/v1/tables/{table}/export", accessRead, (*Server).export},
	{"GET", "/v1/tables/{table}/count", accessRead, (*Server).count},
	{"GET", "/v1/tables/{table}/partition", accessRead, (*Server).keyPartition},
	// A read whose min_positions are too many for its query sends them
	// in a POST body (positions.go): still a read.
	{"POST", "/v1/tables/{table}/keys/{key...}", accessRead, (*Server).getKey},
	{"POST", "/v1/tables/{table}/rows", accessRead, (*Server).getRows},
	{"POST", "/v1/tables/{table}/count", accessRead, (*Server).count},
	{"POST", "/v1/tables/{table}/rebuild", accessAdmin, (*Server).rebuild},
	{"POST", "/v1/tables/{table}/cancel", accessAdmin, (*Server).cancel},
	{"DELETE", "/v1/tables/{table}", accessAdmin, (*Server).drop},
	{"POST", "/v1/tables/{table}/update", accessAdmin, (*Server).update},
	{"POST", "/v1/tables/{table}/rollback", accessAdmin, (*Server).rollback},
	{"GET", "/v1/tables/{table}/diff", accessRead, (*Server).diff},
	{"GET", "/v1/tables/{table}/changes", accessRead, (*Server).changes},
	{"GET", "/healthz", accessPublic, (*Server).healthz},
	{"GET", "/readyz", accessPublic, (*Server).readyz},
	{"GET", "/v1/status", accessRead, (*Server).status},
	{"GET", "/v1/backup", accessAdmin, (*Server).backup},
	{"POST", "/v1/compact", accessAdmin, (*Server).compact},
	{"GET", "/v1/openapi.json", accessRead, (*Server).openapi},
	{"GET", "/metrics", accessMetrics, (*Server).serveMetrics},
}

// routeHandler is a route bound to its server: what the mux returns for a
// request that matched it, so that handler can tell the route's own
// answer from the mux's (404, 405, a redirect to the clean path).
type routeHandler struct {
	s  *Server
	rt route
}

func (h *routeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.rt.handle(h.s, w, r) }

// newMux builds the mux from routes.
func (s *Server) newMux() *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range routes {
		mux.Handle(rt.pattern(), &routeHandler{s: s, rt: rt})
	}
	return mux
}

// accessOf is who may send r over TCP: the matched route's access (h is
// what the mux would call), or, for the mux's own answers (404, 405, a
// redirect), the access the request's method and path would need of a
// route: /healthz and /readyz public, a GET or HEAD a read, anything else
// admin. So the mux says nothing of the routes to a caller that may not
// call them.
func accessOf(h http.Handler, r *http.Request) access {
	if rh, ok := h.(*routeHandler); ok {
		return rh.rt.access
	}
	switch {
	case r.URL.Path == "/healthz" || r.URL.Path == "/readyz":
		return accessPublic
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		return accessRead
	}
	return accessAdmin
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "serving"})
}

// serveMetrics is GET /metrics, in the Prometheus text format.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	s.metrics.scrape.ServeHTTP(w, r)
}
