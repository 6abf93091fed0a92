package edge

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/xetcdn/xetcdn/edge/internal/config"
	"github.com/xetcdn/xetcdn/edge/internal/originapi"
	"github.com/xetcdn/xetcdn/shared/buildinfo"
	"github.com/xetcdn/xetcdn/shared/internalapi"
)

// Registration with the origin's edge registry (docs/edge.md, "Registration";
// docs/architecture.md §7): a report at start, one every interval the origin asks for, and a
// last one saying "not ready" when the edge drains, so the token route stops naming it at once.

// reportRetry is the wait after a failed report; the origin's answer sets the interval after a
// successful one.
const reportRetry = time.Second

// noRegistryRetry is the wait after an origin answered 404 (it has no registry).
const noRegistryRetry = time.Minute

// reporter builds the edge's reports from its configuration, its readiness check and its own
// metrics (so the report says what /metrics says: permits in use, cache bytes, hits, misses).
type reporter struct {
	cfg    *config.Config
	ready  func(context.Context) error
	g      prometheus.Gatherer // nil: permits all free, cache empty
	hits   float64             // datacache hits and misses at the previous report
	misses float64
}

// report builds a report; probe false skips the readiness check (the report says not ready).
func (p *reporter) report(ctx context.Context, probe bool) internalapi.EdgeReport {
	r := internalapi.EdgeReport{URL: p.cfg.PublicURL, Region: p.cfg.Region,
		Version: buildinfo.Read().Version, Permits: p.cfg.Permits, FreePermits: p.cfg.Permits}
	if len(r.Version) > internalapi.MaxEdgeVersion {
		r.Version = r.Version[:internalapi.MaxEdgeVersion]
	}
	if probe {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		r.Ready = p.ready(rctx) == nil
		cancel()
	}
	if p.g == nil {
		return r
	}
	mfs, err := p.g.Gather()
	if err != nil {
		return r
	}
	val := func(name string) float64 {
		for _, mf := range mfs {
			if mf.GetName() != name || len(mf.GetMetric()) == 0 {
				continue
			}
			m := mf.GetMetric()[0]
			switch mf.GetType() {
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue()
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue()
			}
		}
		return 0
	}
	r.FreePermits = min(max(0, r.Permits-int(val("xet_edge_recon_permits_in_use"))), r.Permits)
	if p.cfg.Cache.DataBytes > 0 {
		r.CacheFill = min(max(0, val("xet_edge_datacache_bytes")/float64(p.cfg.Cache.DataBytes)), 1)
	}
	hits, misses := val("xet_edge_datacache_hits_total"), val("xet_edge_datacache_misses_total")
	if dh, dm := hits-p.hits, misses-p.misses; dh >= 0 && dm >= 0 && dh+dm > 0 {
		r.HitRatio = dh / (dh + dm)
	}
	p.hits, p.misses = hits, misses
	return r
}

// register reports until ctx ends, then sends a last report with Ready false (bounded by 2 s;
// the edge waits for it before it exits).
func register(ctx context.Context, client *originapi.Client, p *reporter, log *slog.Logger) {
	wait := reportRetry
	failing := false
	for {
		ack, err := client.ReportEdge(ctx, p.report(ctx, true))
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, originapi.ErrNoRegistry):
			// An origin from before the registry: ask again now and then, quietly.
			if !failing {
				log.Warn("edge registry: the origin keeps none; read tokens will not name this edge", "retry_in", noRegistryRetry.String())
			}
			failing, wait = true, noRegistryRetry
		case err != nil:
			// Log the first failure of a run and every rejection (a config mistake to fix).
			if !failing || errors.Is(err, originapi.ErrRejected) {
				log.Warn("edge registry: report failed; retrying", "err", err, "retry_in", reportRetry.String())
			}
			failing, wait = true, reportRetry
		default:
			if failing {
				log.Info("edge registry: reporting again", "region", p.cfg.Region, "url", p.cfg.PublicURL)
			}
			failing, wait = false, ack.HeartbeatInterval()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			last := p.report(context.WithoutCancel(ctx), false)
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			if _, err := client.ReportEdge(lctx, last); err != nil {
				log.Warn("edge registry: last report (not ready) failed", "err", err)
			}
			cancel()
			return
		case <-t.C:
		}
	}
}
