package datacache

import "github.com/prometheus/client_golang/prometheus"

// metrics are the cache's counters. Read amplification is fill_bytes_total ÷ served_bytes_total.
type metrics struct {
	hits, misses       prometheus.Counter
	fills, fillBytes   prometheus.Counter
	served             prometheus.Counter
	evictions          prometheus.Counter
	verifyFailures     prometheus.Counter
	diskVerifyFailures prometheus.Counter
	storeErrors        prometheus.Counter
	fillRetries        *prometheus.CounterVec
	fillFailures       *prometheus.CounterVec
	inFlight           prometheus.Gauge
	fillSeconds        prometheus.Histogram
	missFirstByte      prometheus.Histogram
	prefetch           *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, x *index, p *pool) *metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_edge_datacache_" + name, Help: help})
	}
	m := &metrics{
		hits:      c("hits_total", "Segment reads answered from the disk cache."),
		misses:    c("misses_total", "Segment reads that waited for a fill from the origin (their own or a concurrent one)."),
		fills:     c("fills_total", "Segments fetched from the origin and verified (then cached unless store_errors_total says otherwise)."),
		fillBytes: c("fill_bytes_total", "Bytes received from the origin for fills, verified or not."),
		served:    c("served_bytes_total", "Verified bytes returned by ReadBytes and ReadRange."),
		evictions: c("evictions_total", "Segment files evicted to stay within MaxBytes."),
		verifyFailures: c("verify_failures_total",
			"Origin transfers that failed verification against the layout (the bad bytes were neither cached nor served)."),
		diskVerifyFailures: c("disk_verify_failures_total",
			"Cached segment files that failed their first verification after a restart (removed and refilled)."),
		storeErrors: c("store_errors_total", "Verified fills that could not be committed to the cache (served, not cached)."),
		fillRetries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xet_edge_datacache_fill_retries_total",
			Help: "Origin transfers of a fill that failed and were retried from the first unverified chunk, by reason (corrupt, short, timeout, error)."},
			[]string{"reason"}),
		fillFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xet_edge_datacache_fill_failures_total",
			Help: "Fills that failed after their last attempt (their waiting readers got the error), by reason (corrupt, short, timeout, error, disk)."},
			[]string{"reason"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xet_edge_datacache_fills_in_flight",
			Help: "Segment fills running now."}),
		fillSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "xet_edge_datacache_fill_duration_seconds",
			Help:    "Duration of fills from the origin, from start to the segment committed.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9)}),
		prefetch: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xet_edge_datacache_prefetch_total",
			Help: "Segments asked for by read-ahead (Prefetch), by result: started (a fill started or joined), cached, skipped (read-ahead at its bound)."},
			[]string{"result"}),
		missFirstByte: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "xet_edge_datacache_miss_first_byte_seconds",
			Help:    "Time from a ReadRange that missed to its first verified byte.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 9)}),
	}
	// Every label value exists from the start, so rates and the ops checks see zeros, not nothing.
	for _, r := range []string{"corrupt", "short", "timeout", "error"} {
		m.fillRetries.WithLabelValues(r)
		m.fillFailures.WithLabelValues(r)
	}
	m.fillFailures.WithLabelValues("disk")
	for _, r := range []string{"started", "cached", "skipped"} {
		m.prefetch.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.hits, m.misses, m.fills, m.fillBytes, m.served, m.evictions,
			m.verifyFailures, m.diskVerifyFailures, m.storeErrors, m.fillRetries, m.fillFailures,
			m.inFlight, m.fillSeconds, m.missFirstByte, m.prefetch,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "xet_edge_datacache_bytes",
				Help: "Bytes of segment files in the cache."},
				func() float64 { return float64(x.bytes()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "xet_edge_datacache_buffer_bytes",
				Help: "Bytes of fill receive buffers in use."},
				func() float64 { return float64(p.inUse.Load()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "xet_edge_datacache_buffer_limit_bytes",
				Help: "Ceiling of the fill receive buffers (Options.BufferMemory)."},
				func() float64 { return float64(p.ceiling) }))
	}
	return m
}
