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
	Counters    Counters
	Now         func() time.Time // nil: time.Now
}

// Cache is safe for concurrent use.
type Cache struct {
	o      Options
	recs   Records
	own    *ristretto.Cache[string, *recon.FileRecord] // Records of its own (nil: given)
	vis    *visibility
	flight singleflight.Group
}

// New builds a Cache.
func New(o Options) (*Cache, error) {
	if o.Backend == nil {
		return nil, errors.New("filecache: Backend is required")
	}
	if o.VisibilityTTL <= 0 || o.MaxVisibility <= 0 {
		return nil, fmt.Errorf("filecache: visibility TTL %v and %d entries must be positive", o.VisibilityTTL, o.MaxVisibility)
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
	if rec, ok := c.recs.Get(h); ok && c.vis.fresh(h, scope, now) {
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
		c.vis.put(h, scope, c.o.Now().Add(c.o.VisibilityTTL), gen)
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
	if c.vis.fresh(h, scope, c.o.Now()) {
		c.count(c.o.Counters.Hit, "visible")
		return nil
	}
	c.count(c.o.Counters.Miss, "visible")
	gen := c.vis.generation()
	_, err := c.fill(ctx, "v", h, scope, gen, func(ctx context.Context) (any, error) {
		if c.vis.fresh(h, scope, c.o.Now()) {
			return nil, nil
		}
		if err := c.o.Backend.Visible(ctx, h, scope); err != nil {
			return nil, err
		}
		c.vis.put(h, scope, c.o.Now().Add(c.o.VisibilityTTL), gen)
		return nil, nil
	})
	return err
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

// Close releases a store of its own. No call may be running or follow.
func (c *Cache) Close() {
	if c.own != nil {
		c.own.Close()
	}
}

// visibility remembers positive (file, scope) answers until their expiry.
type visibility struct {
	mu     sync.Mutex
	scopes map[string]map[hash.Hash]time.Time
	n, max int
	gen    atomic.Uint64 // written under mu
	reset  func()
}

func newVisibility(max int, reset func()) *visibility {
	return &visibility{scopes: make(map[string]map[hash.Hash]time.Time), max: max, reset: reset}
}

func (v *visibility) fresh(h hash.Hash, scope string, now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	exp, ok := v.scopes[scope][h]
	return ok && now.Before(exp)
}

func (v *visibility) generation() uint64 { return v.gen.Load() }

// put stores an answer obtained after generation gen was read, unless a revocation came since.
func (v *visibility) put(h hash.Hash, scope string, exp time.Time, gen uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if gen != v.gen.Load() {
		return
	}
	if v.n >= v.max {
		// Full: forget everything rather than scan; answers are cheap to re-check. Counted.
		v.scopes = make(map[string]map[hash.Hash]time.Time)
		v.n = 0
		if v.reset != nil {
			v.reset()
		}
	}
	m := v.scopes[scope]
	if m == nil {
		m = make(map[hash.Hash]time.Time)
		v.scopes[scope] = m
	}
	if _, ok := m[h]; !ok {
		v.n++
	}
	m[h] = exp
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
