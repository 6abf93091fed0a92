package server

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	requests       *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	served         *prometheus.CounterVec
	fallbacks      *prometheus.CounterVec
	permitsInUse   prometheus.Gauge
	parallel       prometheus.Counter
	recon          *prometheus.HistogramVec
	planCache      *prometheus.CounterVec
	answerCache    *prometheus.CounterVec
	answerBytes    prometheus.Gauge
	answerEncodes  prometheus.Counter
	termsEncodes   prometheus.Counter
	transferBytes  prometheus.Counter
	verifyFailures prometheus.Counter
	readAhead      *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xet_edge_http_requests_total",
			Help: "Requests by route and status."}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "xet_edge_http_request_duration_seconds",
			Help: "Request handling time by route.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}, []string{"route"}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xet_edge_http_served_bytes_total",
			Help: "Answer body bytes written, by protocol (h1, h2, h3)."}, []string{"proto"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xet_edge_fallbacks_total",
			Help: "Requests the edge could have answered but proxied to the origin, by reason."}, []string{"reason"}),
		permitsInUse: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xet_edge_recon_permits_in_use",
			Help: "Reconstruction permits held (requests plus extra writers)."}),
		parallel: prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_edge_recon_parallel_writes_total",
			Help: "Answers written with extra writer goroutines."}),
		recon: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "xet_edge_recon_duration_seconds",
			Help:    "Local reconstruction time (lookup, plan, write) by version.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"version"}),
		planCache: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xet_edge_recon_plan_cache_total",
			Help: "Whole-file reconstruction plans taken from the answer cache (hit) or computed (miss)."}, []string{"result"}),
		answerCache: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xet_edge_recon_answer_cache_total",
			Help: "Answer cache lookups: part=answer for whole-file answers (hit: written from cached bytes), part=terms for ranged answers (hit: terms copied from the file's cached terms), by result."},
			[]string{"part", "result"}),
		answerBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xet_edge_recon_answer_cache_bytes",
			Help: "Bytes held by the answer cache for encoded terms and signed whole-file answers (its plans excluded)."}),
		answerEncodes: prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_edge_recon_answer_encodes_total",
			Help: "Whole-file answers encoded for the answer cache (concurrent misses of one answer encode it once)."}),
		termsEncodes: prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_edge_recon_terms_encodes_total",
			Help: "Files whose whole-file terms were encoded for the answer cache (concurrent misses of one file's terms encode them once)."}),
		transferBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_edge_transfer_served_bytes_total",
			Help: "Xorb bytes served on the transfer route."}),
		verifyFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_edge_transfer_verify_failures_total",
			Help: "Transfer requests refused because the origin's bytes failed verification."}),
		readAhead: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xet_edge_readahead_total",
			Help: "Answers read ahead (result=started; the fills are in xet_edge_datacache_prefetch_total) or not: skipped_cached (the first fetch range is cached: a warm file), skipped_permits (few permits free), skipped_busy (read-ahead at its bound), error (a layout lookup or a prefetch failed); idle_started and idle_skipped_busy: the rest of an answer, read ahead while no client's fill runs."},
			[]string{"result"}),
	}
	m.fallbacks.WithLabelValues("no_permit")
	for _, r := range []string{"started", "skipped_cached", "skipped_permits", "skipped_busy", "error", "idle_started", "idle_skipped_busy"} {
		m.readAhead.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.served, m.fallbacks, m.permitsInUse, m.parallel, m.recon, m.planCache,
			m.answerCache, m.answerBytes, m.answerEncodes, m.termsEncodes, m.transferBytes, m.verifyFailures,
			m.readAhead)
	}
	return m
}
