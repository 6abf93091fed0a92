// Package metacache is the edge's metadata tier: file records, xorb layouts and (file, scope)
// visibility, cached in front of the origin's internal API.
//
//	request ─► Cache.File / .Visible ─► filecache (records, visibility) ─┐
//	           Cache.Layout ──────────► ristretto (hit) ─────────────────┴─► answer
//	                    │ miss
//	                    ▼
//	           singleflight per key (re-checks the cache inside the flight)
//	                    ▼
//	           Origin, under context.WithoutCancel + FillTimeout
//
// Records and visibility are kept by shared/readpath/filecache, the one record/visibility
// cache of both tiers (the origin's index.FileCache is the same type), its records in this
// package's ristretto beside the layouts, under one byte budget. Records and layouts are
// immutable and content-addressed, so they stay cached until evicted (ristretto, cost in
// bytes). Visibility is the one mutable fact: a (file, scope) answer is trusted for
// VisibilityTTL, and Revoke (fed by the origin's event stream) forgets it at once. A miss costs
// one origin round trip per file; a record already cached whose visibility expired is
// re-checked with a body-less request. With RefreshAhead, an answer a lookup used is re-checked
// in the background RefreshAhead before it expires (filecache, "Refresh-ahead"), so files asked
// at least once per VisibilityTTL never wait for that round trip.
package metacache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/xetcdn/xetcdn/edge/internal/originapi"
	"github.com/xetcdn/xetcdn/shared/readpath/filecache"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// Origin is where misses are filled from (*originapi.Client). Its errors are returned wrapped.
type Origin interface {
	// File and Visible fill the records and visibility (the file cache's Backend).
	filecache.Backend
	// Layouts returns the verified layouts of the xorbs it has; missing ones are left out.
	Layouts(ctx context.Context, hs []hash.Hash) (map[hash.Hash]*xorb.Layout, error)
}

// ErrMissingLayout: the origin has no layout for a xorb a file record references.
var ErrMissingLayout = errors.New("metacache: xorb layout missing at the origin")

// Options configure a Cache. Origin is required.
type Options struct {
	Origin Origin
	// MaxBytes is the ristretto budget for records and layouts (their approximate sizes).
	MaxBytes int64
	// ExpectedEntries sizes ristretto's admission counters (10x this many).
	ExpectedEntries int64
	// VisibilityTTL is how long a positive (file, scope) answer is trusted; 30 s when zero.
	VisibilityTTL time.Duration
	// MaxVisibility bounds the remembered (file, scope) answers; 1,000,000 when zero.
	MaxVisibility int
	// RefreshAhead, when positive, re-checks a positive answer that a lookup used in the
	// background this long before it expires (at most MaxRefreshes at once, 16 when zero); a
	// re-check that finds the file not visible (NotVisible; nil: errors wrapping
	// originapi.ErrNotFound) forgets the answer at once. Zero or negative: off.
	RefreshAhead time.Duration
	MaxRefreshes int
	NotVisible   func(error) bool
	// FillTimeout bounds one fill, which may serve several callers; 30 s when zero.
	FillTimeout time.Duration
	Registerer  prometheus.Registerer
	Now         func() time.Time
}

// Cache is safe for concurrent use. Close it when done.
type Cache struct {
	origin Origin
	rc     *ristretto.Cache[string, any]
	flight singleflight.Group // layout fills
	files  *filecache.Cache   // records (in rc) and visibility
	fillTO time.Duration
	m      *metrics
	sets   atomic.Int64 // successful Set calls, for Usable
	resets atomic.Int64 // visibility table resets

	// Layout batches (WarmLayouts): the running ones by xorb, so that a Layout call for one of
	// their xorbs waits for the batch instead of asking the origin itself.
	wmu     sync.Mutex
	warming map[hash.Hash]*warmCall
	bg      sync.WaitGroup  // running batches: Close ends them and waits before closing ristretto
	closing context.Context // the batches' context, cancelled by Close (stop)
	stop    context.CancelFunc
}

// warmCall is one WarmLayouts batch: done is closed when got (the layouts the origin had) and
// err are set.
type warmCall struct {
	done chan struct{}
	got  map[hash.Hash]*xorb.Layout
	err  error
}

// New builds a Cache.
func New(o Options) (*Cache, error) {
	if o.Origin == nil {
		return nil, errors.New("metacache: Origin is required")
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 256 << 20
	}
	if o.ExpectedEntries <= 0 {
		o.ExpectedEntries = 100_000
	}
	if o.VisibilityTTL <= 0 {
		o.VisibilityTTL = 30 * time.Second
	}
	if o.MaxVisibility <= 0 {
		o.MaxVisibility = 1_000_000
	}
	if o.FillTimeout <= 0 {
		o.FillTimeout = 30 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.NotVisible == nil {
		o.NotVisible = func(err error) bool { return errors.Is(err, originapi.ErrNotFound) }
	}
	rc, err := ristretto.NewCache(&ristretto.Config[string, any]{
		NumCounters:        10 * o.ExpectedEntries,
		MaxCost:            o.MaxBytes,
		BufferItems:        64,
		Metrics:            true,
		IgnoreInternalCost: true, // costs are our byte estimates; ristretto must not add its own
		// Keys are a kind byte and 32 bytes of a cryptographic hash: its words are already
		// uniformly distributed, no need to hash them again.
		KeyToHash: func(k string) (uint64, uint64) {
			if len(k) < 17 {
				return 0, 0
			}
			return binary.LittleEndian.Uint64([]byte(k[1:9])), binary.LittleEndian.Uint64([]byte(k[9:17]))
		},
	})
	if err != nil {
		return nil, fmt.Errorf("metacache: %w", err)
	}
	c := &Cache{origin: o.Origin, rc: rc, fillTO: o.FillTimeout, warming: map[hash.Hash]*warmCall{}}
	c.closing, c.stop = context.WithCancel(context.Background())
	c.m = newMetrics(o.Registerer, rc, &c.resets)
	c.files, err = filecache.New(filecache.Options{Backend: o.Origin, Records: records{c},
		VisibilityTTL: o.VisibilityTTL, MaxVisibility: o.MaxVisibility, FillTimeout: o.FillTimeout, Now: o.Now,
		RefreshAhead: max(o.RefreshAhead, 0), MaxRefreshes: o.MaxRefreshes, NotVisible: o.NotVisible,
		Counters: filecache.Counters{
			Hit:       func(kind string) { c.m.hits.WithLabelValues(kind).Inc() },
			Miss:      func(kind string) { c.m.misses.WithLabelValues(kind).Inc() },
			Fill:      c.m.fills.Inc,
			Collapsed: c.m.collapsed.Inc,
			Reset:     func() { c.resets.Add(1) },
			Refresh:   func(result string) { c.m.refreshes.WithLabelValues(result).Inc() },
		}})
	if err != nil {
		c.stop()
		rc.Close()
		return nil, fmt.Errorf("metacache: %w", err)
	}
	return c, nil
}

// records keeps the file cache's records in the Cache's ristretto, beside the layouts.
type records struct{ c *Cache }

func (r records) Get(h hash.Hash) (*recon.FileRecord, bool) { return r.c.cachedFile(h) }
func (r records) Set(rec *recon.FileRecord) {
	r.c.set(fileKey(rec.Hash), rec, filecache.RecordCost(rec))
}

// Close releases ristretto's goroutines and stops visibility re-checks from starting. No call
// may be running or follow.
func (c *Cache) Close() {
	c.files.Close()
	c.stop()
	c.bg.Wait()
	c.rc.Close()
}

// Wait blocks until every Set so far is applied (for tests that need determinism).
func (c *Cache) Wait() { c.rc.Wait() }

// Usable reports whether the cache holds anything it could serve without the origin.
func (c *Cache) Usable() bool { return c.sets.Load() > 0 }

func fileKey(h hash.Hash) string   { return "f" + string(h[:]) }
func layoutKey(h hash.Hash) string { return "l" + string(h[:]) }

// File returns the record of file h if it is visible in scope (filecache.Cache.File). Errors
// wrap the origin's (originapi.ErrNotFound when it is not visible).
func (c *Cache) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	rec, err := c.files.File(ctx, h, scope)
	if err != nil {
		return nil, fmt.Errorf("file %s: %w", h, err)
	}
	return rec, nil
}

// Visible returns nil if file h is visible in scope: from the cached answer while it is fresh
// (VisibilityTTL, forgotten at once by Revoke), else from the origin's body-less check, whose
// positive answer is then cached. No record is fetched. Errors wrap the origin's
// (originapi.ErrNotFound when it is not visible).
func (c *Cache) Visible(ctx context.Context, h hash.Hash, scope string) error {
	if err := c.files.Visible(ctx, h, scope); err != nil {
		return fmt.Errorf("visibility of file %s: %w", h, err)
	}
	return nil
}

func (c *Cache) cachedFile(h hash.Hash) (*recon.FileRecord, bool) {
	v, ok := c.rc.Get(fileKey(h))
	if !ok {
		return nil, false
	}
	rec, ok := v.(*recon.FileRecord)
	return rec, ok && rec.Hash == h
}

// Layout returns the verified layout of xorb h.
func (c *Cache) Layout(ctx context.Context, h hash.Hash) (*xorb.Layout, error) {
	if l, ok := c.cachedLayout(h); ok {
		c.m.hits.WithLabelValues("layout").Inc()
		return l, nil
	}
	c.m.misses.WithLabelValues("layout").Inc()
	if l, err := c.joinWarm(ctx, h); l != nil || err != nil {
		return l, err
	}
	v, err := c.fill(ctx, layoutKey(h), func(ctx context.Context) (any, error) {
		if l, ok := c.cachedLayout(h); ok {
			return l, nil
		}
		m, err := c.origin.Layouts(ctx, []hash.Hash{h})
		if err != nil {
			return nil, err
		}
		l := m[h]
		if l == nil {
			return nil, ErrMissingLayout
		}
		c.set(layoutKey(h), l, layoutCost(l))
		return l, nil
	})
	if err != nil {
		return nil, fmt.Errorf("layout of xorb %s: %w", h, err)
	}
	return v.(*xorb.Layout), nil
}

// WarmLayouts fetches the layouts of the xorbs hs that are neither cached nor being fetched, in
// one origin request (the first originapi.MaxLayoutsPerCall of them), and caches them. A Layout
// call for one of them meanwhile waits for this request instead of sending its own. The
// request runs on under FillTimeout when ctx ends (WarmLayouts then returns ctx's error), so
// the callers waiting for it are not cut short by the one that started it. Used before a cold
// answer goes out (server.readAhead): its client's transfer requests, several at once, then
// find their layouts here instead of each asking the origin.
func (c *Cache) WarmLayouts(ctx context.Context, hs []hash.Hash) error {
	call := &warmCall{done: make(chan struct{})}
	var todo []hash.Hash
	c.wmu.Lock()
	for _, h := range hs {
		if len(todo) == originapi.MaxLayoutsPerCall {
			break
		}
		if _, busy := c.warming[h]; busy {
			continue
		}
		if _, ok := c.cachedLayout(h); ok {
			continue
		}
		c.warming[h] = call
		todo = append(todo, h)
	}
	if len(todo) > 0 {
		c.bg.Add(1)
	}
	c.wmu.Unlock()
	if len(todo) == 0 {
		return nil
	}
	c.m.warmed.Add(float64(len(todo)))
	go func() {
		defer c.bg.Done()
		fctx, cancel := context.WithTimeout(c.closing, c.fillTO)
		m, err := c.origin.Layouts(fctx, todo)
		cancel()
		got := make(map[hash.Hash]*xorb.Layout, len(todo))
		for _, h := range todo {
			if l := m[h]; l != nil && l.Hash == h {
				got[h] = l
				c.set(layoutKey(h), l, layoutCost(l))
			}
		}
		call.got, call.err = got, err
		close(call.done)
		// ristretto applies a Set in the background: until it has, a lookup would miss and ask
		// the origin again, so the batch stays joinable until then.
		c.rc.Wait()
		c.wmu.Lock()
		for _, h := range todo {
			if c.warming[h] == call {
				delete(c.warming, h)
			}
		}
		c.wmu.Unlock()
	}()
	select {
	case <-call.done:
		if call.err != nil {
			return fmt.Errorf("layouts of %d xorbs: %w", len(todo), call.err)
		}
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// joinWarm waits for the running WarmLayouts batch that fetches xorb h, if any, and returns the
// layout it got. (nil, nil): no batch, or the batch failed or did not get h (the caller then
// asks the origin itself, which says why); an error only when ctx ended first.
func (c *Cache) joinWarm(ctx context.Context, h hash.Hash) (*xorb.Layout, error) {
	c.wmu.Lock()
	call := c.warming[h]
	c.wmu.Unlock()
	if call == nil {
		return nil, nil
	}
	select {
	case <-call.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("layout of xorb %s: %w", h, context.Cause(ctx))
	}
	if l := call.got[h]; l != nil {
		c.m.collapsed.Inc()
		return l, nil
	}
	return nil, nil
}

func (c *Cache) cachedLayout(h hash.Hash) (*xorb.Layout, bool) {
	v, ok := c.rc.Get(layoutKey(h))
	if !ok {
		return nil, false
	}
	l, ok := v.(*xorb.Layout)
	return l, ok
}

// fill runs fn once for all concurrent callers of key, under its own timeout and detached from
// any one caller's cancellation; each caller waits only as long as its own ctx allows.
func (c *Cache) fill(ctx context.Context, key string, fn func(context.Context) (any, error)) (any, error) {
	ch := c.flight.DoChan(key, func() (any, error) {
		c.m.fills.Inc()
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.fillTO)
		defer cancel()
		return fn(fctx)
	})
	select {
	case r := <-ch:
		if r.Shared {
			c.m.collapsed.Inc()
		}
		return r.Val, r.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *Cache) set(key string, v any, cost int64) {
	if c.rc.Set(key, v, cost) {
		c.sets.Add(1)
	}
}

// Revoke forgets the visibility of files in scope (nil files: the whole scope), so the next
// request checks the origin again. Fills that started before Revoke do not store their answer.
func (c *Cache) Revoke(scope string, files []hash.Hash) {
	c.files.Revoke(scope, files)
	c.m.revocations.Inc()
}

// layoutCost approximates the bytes a layout holds.
func layoutCost(l *xorb.Layout) int64 { return 128 + int64(l.NumChunks())*(hash.Size+8) }

type metrics struct {
	hits, misses *prometheus.CounterVec
	fills        prometheus.Counter
	collapsed    prometheus.Counter
	revocations  prometheus.Counter
	refreshes    *prometheus.CounterVec
	warmed       prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, rc *ristretto.Cache[string, any], resets *atomic.Int64) *metrics {
	m := &metrics{
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xet_edge_metacache_hits_total",
			Help: "Metadata lookups answered from the cache, by kind (file: record and visibility; visible: visibility alone, for transfer URLs; layout)."}, []string{"kind"}),
		misses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xet_edge_metacache_misses_total",
			Help: "Metadata lookups that needed the origin, by kind."}, []string{"kind"}),
		fills: prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_edge_metacache_fills_total",
			Help: "Origin fills started (concurrent misses of one key share a fill)."}),
		collapsed: prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_edge_metacache_collapsed_total",
			Help: "Lookups that shared another lookup's fill."}),
		revocations: prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_edge_metacache_revocations_total",
			Help: "Visibility revocations applied from the origin's event stream."}),
		refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xet_edge_metacache_visibility_refreshes_total",
			Help: "Refresh-ahead visibility re-checks, by result (started, skipped, renewed, hidden, failed, stale)."}, []string{"result"}),
		warmed: prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_edge_metacache_layouts_warmed_total",
			Help: "Xorb layouts asked of the origin in batches ahead of the transfer requests that need them (a cold answer's xorbs)."}),
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.hits, m.misses, m.fills, m.collapsed, m.revocations, m.refreshes, m.warmed,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "xet_edge_metacache_dropped_sets_total",
			Help: "Cache sets ristretto dropped (full set buffer) and did not apply."},
			func() float64 { return float64(rc.Metrics.SetsDropped()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "xet_edge_metacache_rejected_sets_total",
			Help: "Cache sets ristretto's admission policy rejected."},
			func() float64 { return float64(rc.Metrics.SetsRejected()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "xet_edge_metacache_evictions_total",
			Help: "Entries evicted to stay within the byte budget."},
			func() float64 { return float64(rc.Metrics.KeysEvicted()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "xet_edge_metacache_used_bytes",
			Help: "Approximate bytes of cached records and layouts."},
			func() float64 { return float64(rc.Metrics.CostAdded() - rc.Metrics.CostEvicted()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "xet_edge_metacache_visibility_resets_total",
			Help: "Times the visibility table was full and forgotten."},
			func() float64 { return float64(resets.Load()) }),
	)
	return m
}
