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
}

func newMetrics(reg prometheus.Registerer, x *index) *metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_edge_datacache_" + name, Help: help})
	}
	m := &metrics{
		hits:      c("hits_total", "Segment reads answered from the disk cache."),
		misses:    c("misses_total", "Segment reads that waited for a fill (their own or a concurrent one)."),
		fills:     c("fills_total", "Segments fetched from the origin and verified (then cached unless store_errors_total says otherwise)."),
		fillBytes: c("fill_bytes_total", "Bytes received from the origin for fills, verified or not."),
		served:    c("served_bytes_total", "Verified bytes returned by ReadBytes."),
		evictions: c("evictions_total", "Segment files evicted to stay within MaxBytes."),
		verifyFailures: c("verify_failures_total",
			"Origin transfers that failed verification against the layout (nothing was cached or served)."),
		diskVerifyFailures: c("disk_verify_failures_total",
			"Cached segment files that failed their first verification after a restart (removed and refilled)."),
		storeErrors: c("store_errors_total", "Verified fills that could not be written to disk (served, not cached)."),
	}
	if reg != nil {
		reg.MustRegister(m.hits, m.misses, m.fills, m.fillBytes, m.served, m.evictions,
			m.verifyFailures, m.diskVerifyFailures, m.storeErrors,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "xet_edge_datacache_bytes",
				Help: "Bytes of segment files in the cache."},
				func() float64 { return float64(x.bytes()) }))
	}
	return m
}
