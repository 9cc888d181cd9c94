package serve

import (
	"fmt"
	"log"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/store"
)

// The HTTP side of the daemon: its servers, the handler every request
// passes (metrics, authorization, the mux's own errors as JSON) and the
// helpers every route uses.

func (s *Server) httpServer(tcp bool) *http.Server {
	return &http.Server{
		Handler:           s.handler(tcp),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          log.New(warnWriter{s.cfg.Log}, "http: ", 0),
	}
}

// handler is the API: the mux built from routes (routes.go), each
// request timed for the request metrics and, on TCP (tcp true),
// authorized (auth.go) before its route's handler runs.
func (s *Server) handler(tcp bool) http.Handler {
	mux := s.newMux()
	auth := s.authorizer(tcp)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		route := "unmatched"
		// Deferred: an export aborted mid-response (ErrAbortHandler) counts.
		defer func() {
			s.metrics.requests.WithLabelValues(route, strconv.Itoa(sw.code)).Observe(time.Since(start).Seconds())
		}()
		h, pattern := mux.Handler(r)
		if pattern != "" {
			route = pattern
		}
		if auth != nil && !auth.allow(sw, r, accessOf(h, r)) {
			return
		}
		if pattern != "" {
			mux.ServeHTTP(sw, r)
		} else {
			mux.ServeHTTP(&muxErrorWriter{ResponseWriter: sw}, r)
		}
	})
}

// warnWriter logs what net/http's error log gets at warn level.
type warnWriter struct{ log zerolog.Logger }

func (w warnWriter) Write(b []byte) (int, error) {
	w.log.Warn().Msg(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

// statusWriter remembers the status code for the request metrics.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// database returns the open database, or answers 503 and returns nil.
func (s *Server) database(w http.ResponseWriter) *store.DB {
	s.mu.Lock()
	db := s.db
	s.mu.Unlock()
	if db == nil {
		writeError(w, http.StatusServiceUnavailable, api.CodeShuttingDown, "the daemon is shutting down")
	}
	return db
}

// tableParam returns the {table} of the route, or answers 400.
func tableParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := r.PathValue("table")
	if err := checkTableName(name); err != nil {
		writeError(w, http.StatusBadRequest, api.CodeBadTableName, err.Error())
		return "", false
	}
	return name, true
}

// checkParams answers 400 for a query parameter not in allowed: the API
// never ignores what a client asked for.
func checkParams(w http.ResponseWriter, r *http.Request, allowed ...string) bool {
	for k := range r.URL.Query() {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok {
			writeError(w, http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("unknown query parameter %q (this route takes %s)", k, strings.Join(allowed, ", ")))
			return false
		}
	}
	return true
}
