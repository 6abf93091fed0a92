package httpserver

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httpapi"
)

// Admin is an admin listener's handler: GET /metrics from g for anyone who reaches the
// listener (scrapers), /debug/pprof/ (httpapi.Pprof) for a bearer token of access admin only
// (401 without one, 403 for any other token), the routes routes adds (may be nil) and 404 for
// every other path. wrap wraps the pprof and 404 routes (a Wrapper's Wrap, with or without
// metrics). The listener should still be private: see docs/security.md.
func Admin(g prometheus.Gatherer, wrap func(route string, need auth.Access, fn Handler) http.Handler, routes func(m *http.ServeMux)) http.Handler {
	m := http.NewServeMux()
	m.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	if routes != nil {
		routes(m)
	}
	p := httpapi.Pprof()
	m.Handle("/debug/pprof/", wrap("/debug/pprof/", auth.Admin, func(w http.ResponseWriter, r *http.Request) error {
		p.ServeHTTP(w, r)
		return nil
	}))
	m.Handle("/", wrap("/", auth.Access(""), func(http.ResponseWriter, *http.Request) error {
		return httpapi.ErrNotFound
	}))
	return httpapi.WithRequestID(m)
}
