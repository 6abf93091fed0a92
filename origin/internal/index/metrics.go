package index

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/origin/internal/promreg"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// Metrics is an Index decorator that observes every call in the histogram
// xet_origin_index_call_seconds{method,result}: method is the Index method, result one of
// Results (the class of the error; "ok" for none). Close is not observed.
type Metrics struct {
	next  Index
	calls *prometheus.HistogramVec
}

// Results are the values of the result label, from ResultOf.
var Results = []string{"ok", "not_found", "invalid", "unavailable", "canceled", "error"}

// ResultOf classifies err for the result label: nil is "ok", the sentinels of this package
// their names, a context's end "canceled" (the caller left or timed out), anything else
// "error" (a corrupt row, a bug).
func ResultOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrInvalid):
		return "invalid"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "error"
}

// NewMetrics wraps ix with call metrics registered on reg (nil registers nowhere). Decorators
// made with the same reg share one histogram.
func NewMetrics(ix Index, reg prometheus.Registerer) (*Metrics, error) {
	calls := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "xet_origin_index_call_seconds",
		Help: "Index calls made by the origin (through the caches: hits are counted), by method and result.",
		// 50 µs (a cache hit) to about 13 s (beyond limits.dependency_timeout's default).
		Buckets: prometheus.ExponentialBuckets(0.00005, 2, 19),
	}, []string{"method", "result"})
	if reg != nil {
		var err error
		if calls, err = promreg.Register(reg, calls); err != nil {
			return nil, err
		}
	}
	return &Metrics{next: ix, calls: calls}, nil
}

// Unwrap returns the wrapped index.
func (m *Metrics) Unwrap() Index { return m.next }

// observe records one call of method that started at start and ended with err.
func (m *Metrics) observe(method string, start time.Time, err error) {
	m.calls.WithLabelValues(method, ResultOf(err)).Observe(time.Since(start).Seconds())
}

func (m *Metrics) PutXorb(ctx context.Context, l *xorb.Layout, storedSize uint64) (bool, error) {
	start := time.Now()
	ins, err := m.next.PutXorb(ctx, l, storedSize)
	m.observe("PutXorb", start, err)
	return ins, err
}

func (m *Metrics) Layouts(ctx context.Context, hs []hash.Hash) (map[hash.Hash]*xorb.Layout, error) {
	start := time.Now()
	out, err := m.next.Layouts(ctx, hs)
	m.observe("Layouts", start, err)
	return out, err
}

func (m *Metrics) XorbSize(ctx context.Context, x hash.Hash) (uint64, error) {
	start := time.Now()
	n, err := m.next.XorbSize(ctx, x)
	m.observe("XorbSize", start, err)
	return n, err
}

func (m *Metrics) RegisterShard(ctx context.Context, r *Registration) (bool, error) {
	start := time.Now()
	ins, err := m.next.RegisterShard(ctx, r)
	m.observe("RegisterShard", start, err)
	return ins, err
}

func (m *Metrics) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	start := time.Now()
	rec, err := m.next.File(ctx, h, scope)
	m.observe("File", start, err)
	return rec, err
}

func (m *Metrics) Visible(ctx context.Context, h hash.Hash, scope string) error {
	start := time.Now()
	err := m.next.Visible(ctx, h, scope)
	m.observe("Visible", start, err)
	return err
}

func (m *Metrics) DedupXorbs(ctx context.Context, chunk hash.Hash) ([]hash.Hash, error) {
	start := time.Now()
	xs, err := m.next.DedupXorbs(ctx, chunk)
	m.observe("DedupXorbs", start, err)
	return xs, err
}

func (m *Metrics) DedupXorbsOf(ctx context.Context, chunks []hash.Hash) ([]hash.Hash, error) {
	start := time.Now()
	xs, err := m.next.DedupXorbsOf(ctx, chunks)
	m.observe("DedupXorbsOf", start, err)
	return xs, err
}

func (m *Metrics) RecordPossession(ctx context.Context, scope string, x hash.Hash) error {
	start := time.Now()
	err := m.next.RecordPossession(ctx, scope, x)
	m.observe("RecordPossession", start, err)
	return err
}

func (m *Metrics) Possessed(ctx context.Context, scope string, hs []hash.Hash) (map[hash.Hash]bool, error) {
	start := time.Now()
	got, err := m.next.Possessed(ctx, scope, hs)
	m.observe("Possessed", start, err)
	return got, err
}

func (m *Metrics) Hide(ctx context.Context, scope string, files []hash.Hash) error {
	start := time.Now()
	err := m.next.Hide(ctx, scope, files)
	m.observe("Hide", start, err)
	return err
}

func (m *Metrics) Events(ctx context.Context, after int64, limit int) ([]Event, error) {
	start := time.Now()
	evs, err := m.next.Events(ctx, after, limit)
	m.observe("Events", start, err)
	return evs, err
}

func (m *Metrics) Ping(ctx context.Context) error {
	start := time.Now()
	err := m.next.Ping(ctx)
	m.observe("Ping", start, err)
	return err
}

// Close is not observed.
func (m *Metrics) Close() error { return m.next.Close() }

func (m *Metrics) FileBytes(ctx context.Context, h hash.Hash, scope string) ([]byte, error) {
	start := time.Now()
	b, err := m.next.FileBytes(ctx, h, scope)
	m.observe("FileBytes", start, err)
	return b, err
}

func (m *Metrics) LayoutBytes(ctx context.Context, hs []hash.Hash) (map[hash.Hash][]byte, error) {
	start := time.Now()
	out, err := m.next.LayoutBytes(ctx, hs)
	m.observe("LayoutBytes", start, err)
	return out, err
}

func (m *Metrics) ShardBody(ctx context.Context, h hash.Hash) ([]byte, error) {
	start := time.Now()
	b, err := m.next.ShardBody(ctx, h)
	m.observe("ShardBody", start, err)
	return b, err
}

// Lifecycle (index.Lifecycle).

func (m *Metrics) Delete(ctx context.Context, scope string, files []hash.Hash) (int, error) {
	start := time.Now()
	n, err := m.next.Delete(ctx, scope, files)
	m.observe("Delete", start, err)
	return n, err
}

func (m *Metrics) VisibleFiles(ctx context.Context, after VisibleKey, limit int) ([]VisibleFile, error) {
	start := time.Now()
	out, err := m.next.VisibleFiles(ctx, after, limit)
	m.observe("VisibleFiles", start, err)
	return out, err
}

func (m *Metrics) Files(ctx context.Context, after hash.Hash, limit int) ([]FileEntry, error) {
	start := time.Now()
	out, err := m.next.Files(ctx, after, limit)
	m.observe("Files", start, err)
	return out, err
}

func (m *Metrics) Xorbs(ctx context.Context, after hash.Hash, limit int) ([]XorbEntry, error) {
	start := time.Now()
	out, err := m.next.Xorbs(ctx, after, limit)
	m.observe("Xorbs", start, err)
	return out, err
}

func (m *Metrics) Condemn(ctx context.Context, xs []hash.Hash, at time.Time) error {
	start := time.Now()
	err := m.next.Condemn(ctx, xs, at)
	m.observe("Condemn", start, err)
	return err
}

func (m *Metrics) Revive(ctx context.Context, xs []hash.Hash) error {
	start := time.Now()
	err := m.next.Revive(ctx, xs)
	m.observe("Revive", start, err)
	return err
}

func (m *Metrics) Sweep(ctx context.Context, cands []SweepCandidate, condemnedBefore time.Time) ([]hash.Hash, error) {
	start := time.Now()
	out, err := m.next.Sweep(ctx, cands, condemnedBefore)
	m.observe("Sweep", start, err)
	return out, err
}

func (m *Metrics) Swept(ctx context.Context, limit int) ([]hash.Hash, error) {
	start := time.Now()
	out, err := m.next.Swept(ctx, limit)
	m.observe("Swept", start, err)
	return out, err
}

func (m *Metrics) ObjectsDeleted(ctx context.Context, xs []hash.Hash) error {
	start := time.Now()
	err := m.next.ObjectsDeleted(ctx, xs)
	m.observe("ObjectsDeleted", start, err)
	return err
}

func (m *Metrics) LockCollector(ctx context.Context) (func(), error) {
	start := time.Now()
	release, err := m.next.LockCollector(ctx)
	m.observe("LockCollector", start, err)
	return release, err
}

// Dead shards (ShardLifecycle).

func (m *Metrics) Shards(ctx context.Context, after hash.Hash, limit int) ([]ShardEntry, error) {
	start := time.Now()
	out, err := m.next.Shards(ctx, after, limit)
	m.observe("Shards", start, err)
	return out, err
}

func (m *Metrics) CondemnShards(ctx context.Context, condemn, revive []hash.Hash, at time.Time) error {
	start := time.Now()
	err := m.next.CondemnShards(ctx, condemn, revive, at)
	m.observe("CondemnShards", start, err)
	return err
}

func (m *Metrics) SweepShards(ctx context.Context, cands []ShardCandidate, condemnedBefore time.Time) ([]hash.Hash, error) {
	start := time.Now()
	out, err := m.next.SweepShards(ctx, cands, condemnedBefore)
	m.observe("SweepShards", start, err)
	return out, err
}
