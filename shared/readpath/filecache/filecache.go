// Package filecache is the one record/visibility cache of both tiers: decoded file records
// and recent positive (file, scope) visibility answers in front of a Backend. The origin's
// index.FileCache puts it in front of its index, the edge's metacache in front of the origin's
// internal API (docs/architecture.md, "The read path").
//
//	File(h, scope) ─► record cached and (h, scope) fresh? ─ yes ─► record
//	                      │ no
//	                      ▼
//	          singleflight per (h, scope, generation); inside: check again, then
//	          record cached ─► Backend.Visible (probe only) │ not cached ─► Backend.File
//	Visible(h, scope) ─► fresh? ─ no ─► singleflight ─► Backend.Visible
//
// Records are immutable and content-addressed (the first registration of a file wins), so a
// cached record is never stale and serves every scope. Visibility is the one mutable fact: a
// positive answer is trusted for VisibilityTTL, and Revoke forgets answers at once. Every
// Revoke starts a new generation: a lookup that started before it neither stores its answer nor
// is joined by a caller that arrives after it. Negative answers are never cached, so a new
// registration is visible at once.
//
// Refresh-ahead (Options.RefreshAhead): the first lookup answered from a fresh answer during its
// life schedules one background re-check of (h, scope) for RefreshAhead before the answer
// expires (at once when less is left). A positive re-check renews the answer, trusted
// VisibilityTTL from when the re-check was sent, and the renewed answer is re-checked again only
// if a lookup uses it; a not-visible one (Options.NotVisible) forgets it at once; any other
// failure, or a Revoke since it was scheduled, leaves the answer to expire (or be forgotten) as
// without refresh-ahead. So a file asked at least once per VisibilityTTL never waits for a
// re-check on its request path, a file nobody asks again costs no re-check, and no answer is
// ever trusted longer than VisibilityTTL after the check that produced it.
package filecache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"golang.org/x/sync/singleflight"

	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Backend is what misses are filled from. Errors are returned unchanged.
type Backend interface {
	// File returns the record of h if it is visible in scope.
	File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error)
	// Visible returns nil if h is visible in scope, without reading the record.
	Visible(ctx context.Context, h hash.Hash, scope string) error
}

// Records is where decoded records are kept (a tier may share one budget with other entries:
// the edge keeps layouts in the same store). Get must return only a record of h.
type Records interface {
	Get(h hash.Hash) (*recon.FileRecord, bool)
	Set(rec *recon.FileRecord)
}

// Counters are the cache's events, for a tier's metrics; nil fields are not counted. kind is
// "file" (record and visibility) or "visible" (visibility alone).
type Counters struct {
	Hit, Miss func(kind string)
	Fill      func() // a fill started (once per flight)
	Collapsed func() // a lookup shared another's fill
	Reset     func() // the visibility table was full and forgotten
	// Refresh counts refresh-ahead re-checks by result: "started", "skipped" (MaxRefreshes
	// already in flight or maxScheduled waiting), "renewed", "hidden" (not visible any more:
	// forgotten), "failed" (left to expire), "stale" (a Revoke came while it ran: not stored).
	Refresh func(result string)
}

// Options configure a Cache. Backend, and Records or MaxBytes, are required.
type Options struct {
	Backend Backend
	// Records keeps the records; nil means a store of its own of MaxBytes (approximate bytes
	// of decoded records), closed by Close.
	Records  Records
	MaxBytes int64
	// VisibilityTTL is how long a positive answer is trusted (required, > 0).
	VisibilityTTL time.Duration
	// MaxVisibility bounds the remembered (file, scope) answers (required, > 0); when full,
	// the table is forgotten rather than scanned (Counters.Reset).
	MaxVisibility int
	// FillTimeout bounds one fill, which may serve several callers; 0 means no bound of its
	// own (the Backend bounds its calls). A fill runs under context.WithoutCancel either way:
	// one caller leaving does not fail the others, and it still fills the cache.
	FillTimeout time.Duration
	// RefreshAhead, when positive (and below VisibilityTTL), re-checks an answer a lookup used
	// in the background this long before it expires (package comment). At most MaxRefreshes
	// (16 when 0) re-checks run at once, one per (file, scope); one due beyond that is not
	// started and the answer expires as without refresh-ahead. NotVisible
	// reports whether a Backend error means "not visible" (the answer is then forgotten at
	// once); nil: no error does.
	RefreshAhead time.Duration
	MaxRefreshes int
	NotVisible   func(error) bool
	Counters     Counters
	Now          func() time.Time // nil: time.Now
}

// Cache is safe for concurrent use.
type Cache struct {
	o      Options
	recs   Records
	own    *ristretto.Cache[string, *recon.FileRecord] // Records of its own (nil: given)
	vis    *visibility
	flight singleflight.Group
	closed atomic.Bool // no refresh-ahead re-check starts after Close
}

// New builds a Cache.
func New(o Options) (*Cache, error) {
	if o.Backend == nil {
		return nil, errors.New("filecache: Backend is required")
	}
	if o.VisibilityTTL <= 0 || o.MaxVisibility <= 0 {
		return nil, fmt.Errorf("filecache: visibility TTL %v and %d entries must be positive", o.VisibilityTTL, o.MaxVisibility)
	}
	if o.RefreshAhead >= o.VisibilityTTL {
		return nil, fmt.Errorf("filecache: refresh-ahead %v must be below the visibility TTL %v", o.RefreshAhead, o.VisibilityTTL)
	}
	if o.MaxRefreshes <= 0 {
		o.MaxRefreshes = 16
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	c := &Cache{o: o, recs: o.Records, vis: newVisibility(o.MaxVisibility, o.Counters.Reset)}
	if c.recs == nil {
		if o.MaxBytes <= 0 {
			return nil, fmt.Errorf("filecache: a record store of %d bytes", o.MaxBytes)
		}
		rc, err := ristretto.NewCache(&ristretto.Config[string, *recon.FileRecord]{
			NumCounters: max(1024, 10*o.MaxBytes/typicalRecordBytes),
			MaxCost:     o.MaxBytes,
			BufferItems: 64,
			// Keys are 32 bytes of a cryptographic hash: already uniformly distributed.
			KeyToHash: func(k string) (uint64, uint64) {
				return binary.LittleEndian.Uint64([]byte(k[:8])), binary.LittleEndian.Uint64([]byte(k[8:16]))
			},
			IgnoreInternalCost: true,
		})
		if err != nil {
			return nil, fmt.Errorf("filecache: %w", err)
		}
		c.own = rc
		c.recs = ownRecords{rc}
	}
	return c, nil
}

// typicalRecordBytes sizes the admission counters of a store of its own: about ten per
// record of this size.
const typicalRecordBytes = 4 << 10

// RecordCost approximates the memory of a decoded record (a Records store's cost).
func RecordCost(r *recon.FileRecord) int64 { return 128 + 56*int64(len(r.Terms)) }

type ownRecords struct {
	rc *ristretto.Cache[string, *recon.FileRecord]
}

func (s ownRecords) Get(h hash.Hash) (*recon.FileRecord, bool) {
	rec, ok := s.rc.Get(string(h[:]))
	if !ok || rec == nil || rec.Hash != h {
		return nil, false
	}
	return rec, true
}

func (s ownRecords) Set(rec *recon.FileRecord) { s.rc.Set(string(rec.Hash[:]), rec, RecordCost(rec)) }

func (c *Cache) count(f func(string), kind string) {
	if f != nil {
		f(kind)
	}
}

// File returns the record of h if it is visible in scope: from memory when the record is
// cached and the answer for (h, scope) is fresh; else one fill shared by concurrent callers,
// which probes visibility alone when the record is cached and fetches it otherwise.
func (c *Cache) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	now := c.o.Now()
	if rec, ok := c.recs.Get(h); ok && c.freshOrRefresh(h, scope, now) {
		c.count(c.o.Counters.Hit, "file")
		return rec, nil
	}
	c.count(c.o.Counters.Miss, "file")
	gen := c.vis.generation()
	v, err := c.fill(ctx, "f", h, scope, gen, func(ctx context.Context) (any, error) {
		rec, cached := c.recs.Get(h)
		if cached && c.vis.fresh(h, scope, c.o.Now()) {
			return rec, nil
		}
		asked := c.o.Now()
		if cached {
			if err := c.o.Backend.Visible(ctx, h, scope); err != nil {
				return nil, err
			}
		} else {
			var err error
			if rec, err = c.o.Backend.File(ctx, h, scope); err != nil {
				return nil, err
			}
			c.recs.Set(rec)
		}
		c.vis.put(h, scope, asked.Add(c.o.VisibilityTTL), gen)
		return rec, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*recon.FileRecord), nil
}

// Visible returns nil if h is visible in scope: from the fresh answer, else from the
// Backend's probe (one shared by concurrent callers), whose positive answer is remembered. No
// record is read.
func (c *Cache) Visible(ctx context.Context, h hash.Hash, scope string) error {
	if c.freshOrRefresh(h, scope, c.o.Now()) {
		c.count(c.o.Counters.Hit, "visible")
		return nil
	}
	c.count(c.o.Counters.Miss, "visible")
	gen := c.vis.generation()
	_, err := c.fill(ctx, "v", h, scope, gen, func(ctx context.Context) (any, error) {
		if c.vis.fresh(h, scope, c.o.Now()) {
			return nil, nil
		}
		asked := c.o.Now()
		if err := c.o.Backend.Visible(ctx, h, scope); err != nil {
			return nil, err
		}
		c.vis.put(h, scope, asked.Add(c.o.VisibilityTTL), gen)
		return nil, nil
	})
	return err
}

// freshOrRefresh reports whether a positive answer for (h, scope) is fresh at now and, with
// refresh-ahead on, schedules its re-check when this is the first lookup to use it.
func (c *Cache) freshOrRefresh(h hash.Hash, scope string, now time.Time) bool {
	fresh, exp, schedule := c.vis.use(h, scope, now, c.o.RefreshAhead > 0)
	if schedule {
		if d := exp.Add(-c.o.RefreshAhead).Sub(now); d > 0 {
			time.AfterFunc(d, func() { c.startRefresh(h, scope, exp) })
		} else {
			c.startRefresh(h, scope, exp)
		}
	}
	return fresh
}

// startRefresh starts the background re-check of (h, scope) scheduled for the answer expiring
// at exp, unless that answer is gone (expired, revoked, renewed: a later lookup schedules the
// next one), MaxRefreshes are in flight, or the cache is closed.
func (c *Cache) startRefresh(h hash.Hash, scope string, exp time.Time) {
	if c.closed.Load() {
		return
	}
	gen, ok, skipped := c.vis.startRefresh(h, scope, exp, c.o.Now(), c.o.MaxRefreshes)
	if skipped {
		c.countRefresh("skipped")
	}
	if !ok {
		return
	}
	c.countRefresh("started")
	go c.refresh(h, scope, gen)
}

// refresh re-checks (h, scope) with the Backend, detached from any request, under FillTimeout
// (the Backend's own bound when 0). gen was read when the key was marked in flight, with the
// answer still there: a Revoke after that makes the re-check's answer stale, and it is not
// stored.
func (c *Cache) refresh(h hash.Hash, scope string, gen uint64) {
	defer c.vis.refreshed(h, scope)
	ctx := context.Background()
	if c.o.FillTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.o.FillTimeout)
		defer cancel()
	}
	asked := c.o.Now()
	err := c.o.Backend.Visible(ctx, h, scope)
	switch {
	case err == nil:
		if c.vis.put(h, scope, asked.Add(c.o.VisibilityTTL), gen) {
			c.countRefresh("renewed")
		} else {
			c.countRefresh("stale")
		}
	case c.o.NotVisible != nil && c.o.NotVisible(err):
		c.vis.forget(h, scope)
		c.countRefresh("hidden")
	default:
		c.countRefresh("failed")
	}
}

func (c *Cache) countRefresh(result string) {
	if c.o.Counters.Refresh != nil {
		c.o.Counters.Refresh(result)
	}
}

// fill runs fn once for the concurrent callers of (kind, h, scope) in generation gen, under
// context.WithoutCancel (and FillTimeout); each caller waits only as long as its ctx allows.
func (c *Cache) fill(ctx context.Context, kind string, h hash.Hash, scope string, gen uint64, fn func(context.Context) (any, error)) (any, error) {
	// The generation is part of the key: a caller arriving after a Revoke must not join a
	// fill that started before it.
	key := kind + string(h[:]) + strconv.FormatUint(gen, 10) + "\x00" + scope
	ch := c.flight.DoChan(key, func() (any, error) {
		if c.o.Counters.Fill != nil {
			c.o.Counters.Fill()
		}
		fctx := context.WithoutCancel(ctx)
		if c.o.FillTimeout > 0 {
			var cancel context.CancelFunc
			fctx, cancel = context.WithTimeout(fctx, c.o.FillTimeout)
			defer cancel()
		}
		return fn(fctx)
	})
	select {
	case r := <-ch:
		if r.Shared && c.o.Counters.Collapsed != nil {
			c.o.Counters.Collapsed()
		}
		return r.Val, r.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Fresh reports whether a positive answer for (h, scope) is remembered and fresh.
func (c *Cache) Fresh(h hash.Hash, scope string) bool { return c.vis.fresh(h, scope, c.o.Now()) }

// Revoke forgets the visibility of files in scope (nil or empty: every file of the scope), at
// once; fills that started before it do not store their answer.
func (c *Cache) Revoke(scope string, files []hash.Hash) { c.vis.revoke(scope, files) }

// Wait blocks until the records set so far are visible to File, for a store of its own
// (writes are applied asynchronously). For tests and benchmarks.
func (c *Cache) Wait() {
	if c.own != nil {
		c.own.Wait()
	}
}

// Close releases a store of its own and stops refresh-ahead re-checks from starting. No call
// may be running or follow.
func (c *Cache) Close() {
	c.closed.Store(true)
	if c.own != nil {
		c.own.Close()
	}
}

// visibility remembers positive (file, scope) answers until their expiry.
type visibility struct {
	mu     sync.Mutex
	scopes map[string]map[hash.Hash]visEntry
	n, max int
	gen    atomic.Uint64 // written under mu
	reset  func()
	// refreshing are the keys whose refresh-ahead re-check is in flight; scheduled counts the
	// re-checks waiting for their time (at most maxScheduled).
	refreshing map[visKey]struct{}
	scheduled  int
}

// maxScheduled bounds the refresh-ahead re-checks waiting for their time (a timer each); a
// used answer beyond it is not re-checked ahead, it expires as without refresh-ahead.
const maxScheduled = 1 << 16

type visEntry struct {
	exp       time.Time
	scheduled bool // a lookup used this answer: its re-check is scheduled
}

type visKey struct {
	h     hash.Hash
	scope string
}

func newVisibility(max int, reset func()) *visibility {
	return &visibility{scopes: make(map[string]map[hash.Hash]visEntry), max: max, reset: reset,
		refreshing: make(map[visKey]struct{})}
}

// use reports whether the answer for (h, scope) is fresh at now and, when ahead is set and this
// is the first lookup to use the answer, that its re-check is to be scheduled (for the answer
// expiring at exp).
func (v *visibility) use(h hash.Hash, scope string, now time.Time, ahead bool) (fresh bool, exp time.Time, schedule bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	m := v.scopes[scope]
	e, ok := m[h]
	if !ok || !now.Before(e.exp) {
		return false, time.Time{}, false
	}
	if !ahead || e.scheduled || v.scheduled >= maxScheduled {
		return true, e.exp, false
	}
	e.scheduled = true
	m[h] = e
	v.scheduled++
	return true, e.exp, true
}

// startRefresh marks (h, scope) in flight and returns the generation to store its answer
// under, if the answer expiring at exp is still there and fresh at now and fewer than limit
// re-checks are in flight (skipped: there were not).
func (v *visibility) startRefresh(h hash.Hash, scope string, exp, now time.Time, limit int) (gen uint64, ok, skipped bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.scheduled--
	e, found := v.scopes[scope][h]
	if !found || !e.exp.Equal(exp) || !now.Before(exp) {
		return 0, false, false
	}
	k := visKey{h, scope}
	if _, busy := v.refreshing[k]; busy {
		return 0, false, false
	}
	if len(v.refreshing) >= limit {
		return 0, false, true
	}
	v.refreshing[k] = struct{}{}
	return v.gen.Load(), true, false
}

func (v *visibility) refreshed(h hash.Hash, scope string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.refreshing, visKey{h, scope})
}

// forget drops the answer for (h, scope).
func (v *visibility) forget(h hash.Hash, scope string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	m := v.scopes[scope]
	if _, ok := m[h]; ok {
		delete(m, h)
		v.n--
	}
}

func (v *visibility) fresh(h hash.Hash, scope string, now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.scopes[scope][h]
	return ok && now.Before(e.exp)
}

func (v *visibility) generation() uint64 { return v.gen.Load() }

// put stores an answer obtained after generation gen was read, unless a revocation came since
// (then it reports false). An answer never shortens a later one already stored; a renewed
// answer is re-checked ahead again only once a lookup uses it.
func (v *visibility) put(h hash.Hash, scope string, exp time.Time, gen uint64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if gen != v.gen.Load() {
		return false
	}
	if v.n >= v.max {
		// Full: forget everything rather than scan; answers are cheap to re-check. Counted.
		v.scopes = make(map[string]map[hash.Hash]visEntry)
		v.n = 0
		if v.reset != nil {
			v.reset()
		}
	}
	m := v.scopes[scope]
	if m == nil {
		m = make(map[hash.Hash]visEntry)
		v.scopes[scope] = m
	}
	old, ok := m[h]
	if !ok {
		v.n++
	}
	if !ok || exp.After(old.exp) {
		m[h] = visEntry{exp: exp}
	}
	return true
}

func (v *visibility) revoke(scope string, files []hash.Hash) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.gen.Add(1)
	m := v.scopes[scope]
	if len(files) == 0 {
		v.n -= len(m)
		delete(v.scopes, scope)
		return
	}
	for _, h := range files {
		if _, ok := m[h]; ok {
			delete(m, h)
			v.n--
		}
	}
}
