package server

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/xetcdn/xetcdn/shared/httpapi"
)

// readyTimeout bounds the dependency pings of /readyz.
const readyTimeout = 2 * time.Second

// healthz: 200 while the process serves.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	httpapi.WriteRawJSON(w, http.StatusOK, []byte(`{"status":"ok"}`+"\n"))
	return nil
}

// readyz: 200 when the index and the object store answer, else 503.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if err := s.idx.Ping(ctx); err != nil {
		return fmt.Errorf("%w: index: %v", httpapi.ErrUnavailable, err)
	}
	if err := s.objs.Ping(ctx); err != nil {
		return fmt.Errorf("%w: object store: %v", httpapi.ErrUnavailable, err)
	}
	httpapi.WriteRawJSON(w, http.StatusOK, []byte(`{"status":"ready"}`+"\n"))
	return nil
}

// MetricsHandler serves the metrics of g (GET /metrics on the admin listener).
func MetricsHandler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}
