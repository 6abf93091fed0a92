package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/origin/internal/index"
)

// CollectorIndex is what the background collector needs: garbage collection and usage.
type CollectorIndex interface {
	GCIndex
	Index
}

// CollectorOptions configure RunCollector.
type CollectorOptions struct {
	// Interval between runs; <= 0: no garbage collection, usage gauges only (every UsageEvery).
	Interval time.Duration
	Grace    time.Duration // checked by the configuration (CheckGrace)
	// Roots are passed to every run (GCOptions.Roots): the hub's repositories.
	Roots []Roots
	// Blobs are passed to every run (GCOptions.Blobs): the hub's inline files.
	Blobs []ObjectCollector
	// UsageEvery is how often the usage gauges are refreshed when Interval is 0 (default 15m);
	// with garbage collection on, they are refreshed after every run.
	UsageEvery time.Duration
	Log        *slog.Logger
	Failpoint  func(step string)
}

// Metrics are the collector's and usage accounting's Prometheus series (docs/origin.md,
// "Metrics"). Build with NewMetrics; they exist (at zero) from the start, so dashboards and
// alerts always find them.
type Metrics struct {
	runs        *prometheus.CounterVec
	failures    prometheus.Gauge
	lastSuccess prometheus.Gauge
	lastSeconds prometheus.Gauge
	reclaimed   prometheus.Counter
	deleted     prometheus.Counter
	swept       prometheus.Counter
	orphans     prometheus.Counter
	// The orphan pass's other outcomes (orphans.go).
	orphansRestored prometheus.Counter
	orphansLeft     prometheus.Counter
	trashDeleted    prometheus.Counter
	condemned       prometheus.Gauge
	usage           map[string]prometheus.Gauge
	// Dead shards and hub blobs.
	sweptShards prometheus.Counter
	blobs       prometheus.Counter
}

// NewMetrics registers the collector's metrics on reg (nil: registered nowhere).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xet_origin_gc_runs_total",
			Help: "Garbage collection runs by result: ok, failed, busy (another run held the lock)."}, []string{"result"}),
		failures: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xet_origin_gc_consecutive_failures",
			Help: "Garbage collection runs that failed in a row (0 after a success)."}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xet_origin_gc_last_success_timestamp_seconds",
			Help: "When the last garbage collection run of this process succeeded (unix time; 0 = never)."}),
		lastSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xet_origin_gc_last_run_seconds",
			Help: "How long the last garbage collection run took."}),
		reclaimed: prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_origin_gc_reclaimed_bytes_total",
			Help: "Bytes of objects garbage collection deleted (swept xorbs and orphans)."}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_origin_gc_deleted_objects_total",
			Help: "Objects garbage collection deleted (swept xorbs and orphans)."}),
		orphans: prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_origin_gc_orphan_objects_total",
			Help: "Objects without an index row (left by failed uploads) garbage collection deleted; also in xet_origin_gc_deleted_objects_total."}),
		orphansRestored: prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_origin_gc_orphans_restored_total",
			Help: "Orphan objects put back because an upload indexed them while garbage collection was taking them away."}),
		orphansLeft: prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_origin_gc_orphans_left_total",
			Help: "Orphan objects garbage collection left in place: written again since they were listed, or too large to copy safely."}),
		trashDeleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_origin_gc_trash_deleted_objects_total",
			Help: "Trash entries (orphans a run that died had moved aside) older than the grace period with no index row, deleted; also in xet_origin_gc_deleted_objects_total."}),
		swept: prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_origin_gc_swept_xorbs_total",
			Help: "Xorbs garbage collection removed from the index."}),
		condemned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xet_origin_gc_condemned_xorbs",
			Help: "Xorbs the last run found unreferenced and newly condemned."}),
		usage: map[string]prometheus.Gauge{},
		sweptShards: prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_origin_gc_swept_shards_total",
			Help: "Dead shards garbage collection removed from the index (their rows, dedup entries and objects)."}),
		blobs: prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_origin_gc_hub_blobs_total",
			Help: "Hub inline-file objects no commit references that garbage collection deleted; also in xet_origin_gc_deleted_objects_total."}),
	}
	for _, u := range []struct{ name, help string }{
		{"xet_origin_usage_logical_bytes", "Sum of the sizes of the visible files over all scopes."},
		{"xet_origin_usage_stored_bytes", "Stored size of the xorbs visible files reference (each once)."},
		{"xet_origin_usage_shared_bytes", "Part of the stored bytes referenced by more than one scope."},
		{"xet_origin_usage_scopes", "Scopes with at least one visible file."},
		{"xet_origin_usage_files", "Visible (scope, file) pairs."},
	} {
		m.usage[u.name] = prometheus.NewGauge(prometheus.GaugeOpts{Name: u.name, Help: u.help + " Refreshed by the background collector."})
	}
	if reg != nil {
		reg.MustRegister(m.runs, m.failures, m.lastSuccess, m.lastSeconds, m.reclaimed, m.deleted, m.swept, m.orphans, m.condemned,
			m.sweptShards, m.blobs, m.orphansRestored, m.orphansLeft, m.trashDeleted)
		for _, g := range m.usage {
			reg.MustRegister(g)
		}
	}
	for _, r := range []string{"ok", "failed", "busy"} {
		m.runs.WithLabelValues(r)
	}
	return m
}

func (m *Metrics) setUsage(u *Usage) {
	m.usage["xet_origin_usage_logical_bytes"].Set(float64(u.Totals.LogicalBytes))
	m.usage["xet_origin_usage_stored_bytes"].Set(float64(u.Totals.StoredBytes))
	m.usage["xet_origin_usage_shared_bytes"].Set(float64(u.Totals.SharedBytes))
	m.usage["xet_origin_usage_scopes"].Set(float64(u.Totals.Scopes))
	m.usage["xet_origin_usage_files"].Set(float64(u.Totals.Files))
}

// RunCollector runs garbage collection every o.Interval (the first after one interval) and
// refreshes the usage gauges, until ctx ends. A run that finds another one holding the lock
// (another replica, or `xet-origin gc`) is skipped; a failed run is logged and counted, and
// the next one, resuming its work, comes an interval later.
func RunCollector(ctx context.Context, ix CollectorIndex, objs GCObjects, m *Metrics, o CollectorOptions) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	every := o.Interval
	if every <= 0 {
		every = o.UsageEvery
		if every <= 0 {
			every = 15 * time.Minute
		}
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if o.Interval > 0 {
			collectOnce(ctx, ix, objs, m, o)
		}
		if u, err := Compute(ctx, ix); err == nil {
			m.setUsage(u)
		} else if ctx.Err() == nil {
			o.Log.WarnContext(ctx, "usage accounting failed", "err", err)
		}
	}
}

func collectOnce(ctx context.Context, ix GCIndex, objs GCObjects, m *Metrics, o CollectorOptions) {
	rep, err := GC(ctx, ix, objs, GCOptions{Grace: o.Grace, Roots: o.Roots, Blobs: o.Blobs, Log: o.Log, Failpoint: o.Failpoint})
	m.lastSeconds.Set(rep.Seconds)
	m.reclaimed.Add(float64(rep.BytesReclaimed))
	m.deleted.Add(float64(rep.ObjectsDeleted))
	m.swept.Add(float64(rep.Swept))
	m.orphans.Add(float64(rep.Orphans))
	m.orphansRestored.Add(float64(rep.OrphansRestored))
	m.orphansLeft.Add(float64(rep.OrphansLeft))
	m.trashDeleted.Add(float64(rep.TrashDeleted))
	m.sweptShards.Add(float64(rep.ShardsSwept))
	m.blobs.Add(float64(rep.Blobs))
	switch {
	case errors.Is(err, index.ErrCollectorBusy):
		m.runs.WithLabelValues("busy").Inc()
	case err != nil:
		if ctx.Err() != nil {
			return
		}
		m.runs.WithLabelValues("failed").Inc()
		m.failures.Inc()
		o.Log.ErrorContext(ctx, "garbage collection failed", "err", err, "swept", rep.Swept,
			"objects_deleted", rep.ObjectsDeleted)
	default:
		m.runs.WithLabelValues("ok").Inc()
		m.failures.Set(0)
		m.condemned.Set(float64(rep.Condemned))
		m.lastSuccess.Set(float64(time.Now().Unix()))
	}
}
