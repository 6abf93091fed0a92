package objstore

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/origin/internal/promreg"
)

// Metrics is an ObjectStore decorator that observes every call in the histogram
// xet_origin_objstore_call_seconds{method,result} (method is the ObjectStore method, result one
// of Results) and counts bytes in xet_origin_objstore_bytes_total{method}: the size of each
// successful Put and Create, the object size of each successful Get and the length of each
// successful GetRange (the bytes a read was opened for; bodies are handed out unwrapped, so a
// local file keeps its sendfile path). The latency of Get and GetRange is the time to open the
// body, not to read it.
type Metrics struct {
	next  ObjectStore
	calls *prometheus.HistogramVec
	bytes *prometheus.CounterVec
}

// Results are the values of the result label, from ResultOf.
var Results = []string{"ok", "not_found", "exists", "range", "size", "key", "unavailable", "canceled", "error"}

// ResultOf classifies err for the result label: nil is "ok", the sentinels of this package
// their names, a context's end "canceled", anything else "error".
func ResultOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrExists):
		return "exists"
	case errors.Is(err, ErrRange):
		return "range"
	case errors.Is(err, ErrSize):
		return "size"
	case errors.Is(err, ErrKey):
		return "key"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "error"
}

// NewMetrics wraps s with call metrics registered on reg (nil registers nowhere). Decorators
// made with the same reg share the collectors.
func NewMetrics(s ObjectStore, reg prometheus.Registerer) (*Metrics, error) {
	calls := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "xet_origin_objstore_call_seconds",
		Help: "Object store calls made by the origin, by method and result (Get, GetRange: until the body is open).",
		// 100 µs to about 26 s (beyond limits.dependency_timeout's default: a long upload).
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 19),
	}, []string{"method", "result"})
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "xet_origin_objstore_bytes_total",
		Help: "Bytes stored (Put, Create) and opened for reading (Get, GetRange) by successful object store calls.",
	}, []string{"method"})
	if reg != nil {
		var err error
		if calls, err = promreg.Register(reg, calls); err != nil {
			return nil, err
		}
		if bytes, err = promreg.Register(reg, bytes); err != nil {
			return nil, err
		}
	}
	return &Metrics{next: s, calls: calls, bytes: bytes}, nil
}

// Unwrap returns the wrapped store.
func (m *Metrics) Unwrap() ObjectStore { return m.next }

// observe records one call of method that started at start and ended with err, and n bytes
// when it succeeded.
func (m *Metrics) observe(method string, start time.Time, err error, n int64) {
	m.calls.WithLabelValues(method, ResultOf(err)).Observe(time.Since(start).Seconds())
	if err == nil && n > 0 {
		m.bytes.WithLabelValues(method).Add(float64(n))
	}
}

func (m *Metrics) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	start := time.Now()
	err := m.next.Put(ctx, key, r, size)
	m.observe("Put", start, err, size)
	return err
}

func (m *Metrics) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	start := time.Now()
	err := m.next.Create(ctx, key, r, size)
	m.observe("Create", start, err, size)
	return err
}

func (m *Metrics) Get(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	start := time.Now()
	rc, size, err := m.next.Get(ctx, key)
	m.observe("Get", start, err, size)
	return rc, size, err
}

func (m *Metrics) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	start := time.Now()
	rc, err := m.next.GetRange(ctx, key, off, n)
	m.observe("GetRange", start, err, n)
	return rc, err
}

func (m *Metrics) Stat(ctx context.Context, key string) (int64, error) {
	start := time.Now()
	size, err := m.next.Stat(ctx, key)
	m.observe("Stat", start, err, 0)
	return size, err
}

func (m *Metrics) Delete(ctx context.Context, key string) error {
	start := time.Now()
	err := m.next.Delete(ctx, key)
	m.observe("Delete", start, err, 0)
	return err
}

func (m *Metrics) Ping(ctx context.Context) error {
	start := time.Now()
	err := m.next.Ping(ctx)
	m.observe("Ping", start, err, 0)
	return err
}

func (m *Metrics) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	start := time.Now()
	err := m.next.List(ctx, prefix, fn)
	m.observe("List", start, err, 0)
	return err
}
