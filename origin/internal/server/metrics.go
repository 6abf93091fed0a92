package server

import "github.com/prometheus/client_golang/prometheus"

// metrics are the server's Prometheus collectors (ingest registers its own). Names follow
// xet_origin_<subsystem>_<name>_<unit>; label values are bounded (route patterns, status codes,
// fixed sets).
type metrics struct {
	requests      *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	recon         *prometheus.HistogramVec
	reconParallel prometheus.Counter
	telemetry     *prometheus.CounterVec
	transferBytes prometheus.Counter
	ingestWait    prometheus.Histogram
	// uploadRejected counts uploads refused by admission (ingestgate.go), by reason.
	uploadRejected *prometheus.CounterVec
	connRefused    prometheus.Counter // connections over the per-address cap
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xet_origin_http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "xet_origin_http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern, until the handler returns.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"route"}),
		recon: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "xet_origin_recon_duration_seconds",
			Help:    "Reconstruction answers (lookup, plan and write) by API version.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 16),
		}, []string{"version"}),
		reconParallel: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xet_origin_recon_parallel_writes_total",
			Help: "Reconstruction answers written by more than one goroutine.",
		}),
		telemetry: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xet_origin_telemetry_events_total",
			Help: "Client telemetry events accepted, by event (other = unknown names).",
		}, []string{"event"}),
		transferBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xet_origin_transfer_bytes_total",
			Help: "Xorb bytes served on the transfer route.",
		}),
		ingestWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "xet_origin_ingest_memory_wait_seconds",
			Help:    "Time one reservation of ingest memory waited (bodies reserve as they grow).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		uploadRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xet_origin_upload_rejections_total",
			Help: "Uploads refused: memory_wait (503), scope_cap (429), body_deadline and pace_floor (408).",
		}, []string{"reason"}),
	}
	m.connRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "xet_origin_connections_refused_total",
		Help: "Connections closed at accept because their address was at limits.max_connections_per_ip.",
	})
	for _, r := range []string{rejectMemory, rejectScope, rejectDeadline, rejectPace} {
		m.uploadRejected.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.recon, m.reconParallel, m.telemetry, m.transferBytes, m.ingestWait,
			m.uploadRejected, m.connRefused)
	}
	return m
}
