package server

import (
	"fmt"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/origin/internal/edgereg"
	"github.com/xetcdn/xetcdn/origin/internal/regions"
	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/internalapi"
)

// The edge registry and the choice of a read token's casUrl (docs/architecture.md §7). The
// token route calls readURL once; everything else of the choice is in origin/internal/regions.

// edgeMetrics count the registry's inputs and the token route's choices.
type edgeMetrics struct {
	reports *prometheus.CounterVec // xet_origin_edge_reports_total{result}
	choices *prometheus.CounterVec // xet_origin_token_edge_choices_total{outcome}
}

// Results of an edge report (bad tokens never reach the handler: they are counted by
// xet_origin_http_requests_total{route="POST /internal/v1/edges",code="401"|"403"}).
const (
	reportOK            = "ok"
	reportMalformed     = "malformed"      // absurd or unparsable values: 400
	reportUnknownRegion = "unknown_region" // a region not in regions.order: 400
	reportUnavailable   = "unavailable"    // the registry's database failed: 503
)

func newEdgeMetrics(reg prometheus.Registerer) *edgeMetrics {
	m := &edgeMetrics{
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xet_origin_edge_reports_total",
			Help: "Edge heartbeats by result: ok, malformed, unknown_region, unavailable."}, []string{"result"}),
		choices: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xet_origin_token_edge_choices_total",
			Help: "casUrl choices of read tokens by outcome: local, spill, other_region, origin, static."}, []string{"outcome"}),
	}
	for _, r := range []string{reportOK, reportMalformed, reportUnknownRegion, reportUnavailable} {
		m.reports.WithLabelValues(r)
	}
	for _, o := range []string{regions.Local, regions.Spill, regions.OtherRegion, regions.Origin, regions.Static} {
		m.choices.WithLabelValues(o)
	}
	if reg != nil {
		reg.MustRegister(m.reports, m.choices)
	}
	return m
}

// edgeReport: POST /internal/v1/edges (edge token) {EdgeReport} → {"heartbeat_seconds": N}.
func (s *Server) edgeReport(w http.ResponseWriter, r *http.Request) error {
	if s.edges == nil {
		return fmt.Errorf("%w: this origin keeps no edge registry", httpapi.ErrNotFound)
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, internalapi.MaxEdgeReport+1))
	if err != nil {
		return err
	}
	rep, err := internalapi.DecodeEdgeReport(b)
	if err != nil {
		s.em.reports.WithLabelValues(reportMalformed).Inc()
		return fmt.Errorf("%w: %v", httpapi.ErrBadRequest, err)
	}
	if !s.regions.Known(rep.Region) {
		s.em.reports.WithLabelValues(reportUnknownRegion).Inc()
		return fmt.Errorf("%w: region %q is not in this origin's regions.order", httpapi.ErrBadRequest, rep.Region)
	}
	if err := s.edges.Report(r.Context(), rep); err != nil {
		s.em.reports.WithLabelValues(reportUnavailable).Inc()
		return fmt.Errorf("%w: %v", errRegistry, err)
	}
	s.em.reports.WithLabelValues(reportOK).Inc()
	httpapi.WriteJSON(w, http.StatusOK, internalapi.EdgeAck{HeartbeatSeconds: int(s.edges.Interval().Seconds())})
	return nil
}

// errRegistry maps a failed registry write to 503 (the edge retries).
var errRegistry = fmt.Errorf("%w: edge registry", httpapi.ErrUnavailable)

// readURL is the casUrl of a read token for scope asked for by r: a registered healthy edge
// near the caller, the origin when none can take it, or edge_url when no edge has registered.
func (s *Server) readURL(r *http.Request, scope string) string {
	if s.edges == nil {
		return s.cfg.EdgeURL
	}
	recs, err := s.edges.Snapshot(r.Context())
	if err != nil && recs == nil {
		s.log.Warn("edge registry unreadable; handing out edge_url", "err", err)
	}
	if len(recs) == 0 {
		s.em.choices.WithLabelValues(regions.Static).Inc()
		return s.cfg.EdgeURL
	}
	healthy := make([]edgereg.Record, 0, len(recs))
	for _, e := range recs {
		if s.edges.State(e) == edgereg.Healthy {
			healthy = append(healthy, e)
		}
	}
	u, outcome := s.regions.Choose(s.regions.Region(r), scope, healthy)
	s.em.choices.WithLabelValues(outcome).Inc()
	if u == "" {
		return s.cfg.PublicURL
	}
	return u
}
