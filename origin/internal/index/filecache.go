package index

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"golang.org/x/sync/singleflight"

	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// FileCacheOptions configure NewFileCache.
type FileCacheOptions struct {
	// MaxBytes bounds the memory of the cached decoded records (required, > 0).
	MaxBytes int64
	// VisibilityTTL is how long a positive (file, scope) answer is reused before the wrapped
	// index is asked again; it bounds how late a Hide made through ANOTHER replica takes effect
	// here. Zero means DefaultVisibilityTTL.
	VisibilityTTL time.Duration
	// VisibilityEntries bounds the (file, scope) pairs remembered. Zero means 65,536.
	VisibilityEntries int64
	// Now is the clock the TTL is measured with; nil means time.Now.
	Now func() time.Time
}

// DefaultVisibilityTTL is the VisibilityTTL used when none is configured.
const DefaultVisibilityTTL = 2 * time.Second

// FileCache is an Index decorator that keeps decoded file records and recent positive
// visibility answers in memory, so that repeated reconstructions of a large file skip the
// database round trip and the record decode (13 ms of CPU for 100,000 terms).
//
// Records are immutable (the first registration of a file wins), so a cached record is never
// stale and is shared by every scope. Visibility is not immutable: File answers from memory only
// when this cache saw the file visible in the scope less than VisibilityTTL ago and no Hide went
// through this FileCache since. Hide drops every remembered answer as soon as the wrapped index
// has committed it; a Hide made elsewhere (another replica on the same database) takes effect
// here within VisibilityTTL. Negative answers are never cached: a registration is visible at
// once.
//
// Concurrent misses of the same (file, scope) share one lookup (singleflight). Records are
// shared between callers: treat them as immutable, as recon.FileRecord asks. Every other method
// goes to the wrapped Index unchanged (FileBytes too: it checks visibility in its own query).
type FileCache struct {
	next Index
	ttl  time.Duration
	now  func() time.Time
	// epoch counts the Hide calls that went through this cache; a visibility entry is valid
	// only in the epoch it was looked up in.
	epoch atomic.Uint64
	group singleflight.Group

	mu     sync.RWMutex // held for reading around cache use, for writing by Close
	closed bool
	recs   *ristretto.Cache[string, *recon.FileRecord]
	vis    *ristretto.Cache[string, visibleUntil]
	err    error
}

// visibleUntil is a positive visibility answer: valid while the cache is in epoch and before
// until.
type visibleUntil struct {
	epoch uint64
	until time.Time
}

// termBytes approximates the memory of one decoded recon.Term (hash, five uint32, padding).
const termBytes = 56

// typicalRecordBytes sizes the admission counters: about ten per record of this size.
const typicalRecordBytes = 4 << 10

// recordCost approximates the memory of a decoded record.
func recordCost(r *recon.FileRecord) int64 { return int64(128 + termBytes*len(r.Terms)) }

// NewFileCache wraps ix with a cache of decoded records and positive visibility answers.
// Close closes the caches and ix.
func NewFileCache(ix Index, o FileCacheOptions) (*FileCache, error) {
	if o.MaxBytes <= 0 {
		return nil, fmt.Errorf("%w: file cache of %d bytes", ErrInvalid, o.MaxBytes)
	}
	if o.VisibilityTTL < 0 || o.VisibilityEntries < 0 {
		return nil, fmt.Errorf("%w: visibility TTL %v, %d entries", ErrInvalid, o.VisibilityTTL, o.VisibilityEntries)
	}
	if o.VisibilityTTL == 0 {
		o.VisibilityTTL = DefaultVisibilityTTL
	}
	if o.VisibilityEntries == 0 {
		o.VisibilityEntries = 1 << 16
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	recs, err := ristretto.NewCache(&ristretto.Config[string, *recon.FileRecord]{
		NumCounters: max(1024, 10*o.MaxBytes/typicalRecordBytes),
		MaxCost:     o.MaxBytes,
		BufferItems: 64,
		KeyToHash: func(k string) (uint64, uint64) {
			return binary.LittleEndian.Uint64([]byte(k[:8])), binary.LittleEndian.Uint64([]byte(k[8:16]))
		},
		IgnoreInternalCost: true,
	})
	if err != nil {
		return nil, fmt.Errorf("index: file cache: %w", err)
	}
	vis, err := ristretto.NewCache(&ristretto.Config[string, visibleUntil]{
		NumCounters:        max(1024, 10*o.VisibilityEntries),
		MaxCost:            o.VisibilityEntries,
		BufferItems:        64,
		IgnoreInternalCost: true,
	})
	if err != nil {
		recs.Close()
		return nil, fmt.Errorf("index: visibility cache: %w", err)
	}
	return &FileCache{next: ix, ttl: o.VisibilityTTL, now: o.Now,
		recs: recs, vis: vis}, nil
}

// Unwrap returns the wrapped index.
func (c *FileCache) Unwrap() Index { return c.next }

// visKey is the key of (file h, scope) in the visibility cache and the singleflight group.
func visKey(h hash.Hash, scope string) string { return string(h[:]) + scope }

// cached returns the record of h if it is cached and h was seen visible in scope within the
// TTL in the current epoch.
// After Close it answers ErrUnavailable.
func (c *FileCache) cached(h hash.Hash, scope string) (rec *recon.FileRecord, ok bool, err error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil, true, fmt.Errorf("%w: index closed", ErrUnavailable)
	}
	v, ok := c.vis.Get(visKey(h, scope))
	if !ok || v.epoch != c.epoch.Load() || !c.now().Before(v.until) {
		return nil, false, nil
	}
	rec, ok = c.record(h)
	return rec, ok, nil
}

// record returns the cached record of h. The caller holds mu for reading.
func (c *FileCache) record(h hash.Hash) (*recon.FileRecord, bool) {
	rec, ok := c.recs.Get(string(h[:]))
	if !ok || rec == nil || rec.Hash != h {
		return nil, false
	}
	return rec, true
}

// remember caches rec (unless present) and its visibility in scope as of epoch, which was read
// before the wrapped index was asked.
func (c *FileCache) remember(rec *recon.FileRecord, scope string, epoch uint64, fresh bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return
	}
	if fresh {
		c.recs.Set(string(rec.Hash[:]), rec, recordCost(rec))
	}
	if epoch != c.epoch.Load() {
		return // a Hide came in meanwhile: the answer is already invalid, keep any newer one
	}
	c.vis.SetWithTTL(visKey(rec.Hash, scope), visibleUntil{epoch: epoch, until: c.now().Add(c.ttl)}, 1, c.ttl)
}

// File implements Index: from memory when the record is cached and the visibility answer is
// recent, else from the wrapped index (one lookup shared by concurrent callers). When only the
// visibility answer is missing, the wrapped index is asked for the stored bytes (FileBytes,
// visibility checked in the same query) and the cached record is reused without decoding.
func (c *FileCache) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("file %s in %q: %w", h, scope, err)
	}
	if rec, ok, err := c.cached(h, scope); ok {
		return rec, err
	}
	epoch := c.epoch.Load()
	// The epoch is part of the key: a caller arriving after a Hide must not join a lookup
	// that started before it.
	key := visKey(h, scope) + "\x00" + strconv.FormatUint(epoch, 10)
	ch := c.group.DoChan(key, func() (any, error) {
		// Shared by callers with different contexts: it runs to completion and fills the
		// cache even when the caller that started it has gone away.
		return c.lookup(context.WithoutCancel(ctx), h, scope, epoch)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*recon.FileRecord), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("file %s in %q: %w", h, scope, ctx.Err())
	}
}

// lookup asks the wrapped index and remembers the answer.
func (c *FileCache) lookup(ctx context.Context, h hash.Hash, scope string, epoch uint64) (*recon.FileRecord, error) {
	c.mu.RLock()
	rec, ok := c.record(h)
	c.mu.RUnlock()
	if ok {
		if _, err := c.next.FileBytes(ctx, h, scope); err != nil {
			return nil, err
		}
		c.remember(rec, scope, epoch, false)
		return rec, nil
	}
	rec, err := c.next.File(ctx, h, scope)
	if err != nil {
		return nil, err
	}
	c.remember(rec, scope, epoch, true)
	return rec, nil
}

// Hide implements Index. Once the wrapped index has committed (or failed, which may still have
// committed), every visibility answer remembered so far is invalid.
func (c *FileCache) Hide(ctx context.Context, scope string, files []hash.Hash) error {
	err := c.next.Hide(ctx, scope, files)
	c.epoch.Add(1)
	return err
}

// FileBytes implements Index: the stored encoding from the wrapped index, which checks
// visibility in the same query. Nothing is decoded and nothing is cached.
func (c *FileCache) FileBytes(ctx context.Context, h hash.Hash, scope string) ([]byte, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	return c.next.FileBytes(ctx, h, scope)
}

// LayoutBytes implements Index through the wrapped index.
func (c *FileCache) LayoutBytes(ctx context.Context, hs []hash.Hash) (map[hash.Hash][]byte, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	return c.next.LayoutBytes(ctx, hs)
}

// ShardBody implements Index through the wrapped index.
func (c *FileCache) ShardBody(ctx context.Context, h hash.Hash) ([]byte, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	return c.next.ShardBody(ctx, h)
}

// PutXorb implements Index through the wrapped index.
func (c *FileCache) PutXorb(ctx context.Context, l *xorb.Layout, storedSize uint64) (bool, error) {
	return c.next.PutXorb(ctx, l, storedSize)
}

// Layouts implements Index through the wrapped index.
func (c *FileCache) Layouts(ctx context.Context, hs []hash.Hash) (map[hash.Hash]*xorb.Layout, error) {
	return c.next.Layouts(ctx, hs)
}

// XorbSize implements Index through the wrapped index.
func (c *FileCache) XorbSize(ctx context.Context, x hash.Hash) (uint64, error) {
	return c.next.XorbSize(ctx, x)
}

// RegisterShard implements Index through the wrapped index. A registration only adds
// visibility, and negative answers are never cached, so nothing here goes stale.
func (c *FileCache) RegisterShard(ctx context.Context, r *Registration) (bool, error) {
	return c.next.RegisterShard(ctx, r)
}

// DedupXorbs implements Index through the wrapped index.
func (c *FileCache) DedupXorbs(ctx context.Context, chunk hash.Hash) ([]hash.Hash, error) {
	return c.next.DedupXorbs(ctx, chunk)
}

// RecordPossession implements Index through the wrapped index.
func (c *FileCache) RecordPossession(ctx context.Context, scope string, x hash.Hash) error {
	return c.next.RecordPossession(ctx, scope, x)
}

// Possessed implements Index through the wrapped index.
func (c *FileCache) Possessed(ctx context.Context, scope string, hs []hash.Hash) (map[hash.Hash]bool, error) {
	return c.next.Possessed(ctx, scope, hs)
}

// Events implements Index through the wrapped index.
func (c *FileCache) Events(ctx context.Context, after int64, limit int) ([]Event, error) {
	return c.next.Events(ctx, after, limit)
}

// Ping implements Index through the wrapped index.
func (c *FileCache) Ping(ctx context.Context) error { return c.next.Ping(ctx) }

func (c *FileCache) checkOpen() error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return fmt.Errorf("%w: index closed", ErrUnavailable)
	}
	return nil
}

// Wait blocks until the records and answers cached so far are visible to File (cache writes
// are applied asynchronously). For tests and benchmarks.
func (c *FileCache) Wait() {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.closed {
		c.recs.Wait()
		c.vis.Wait()
	}
}

// Close closes the caches and the wrapped Index. It is idempotent.
func (c *FileCache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		c.recs.Close()
		c.vis.Close()
		c.err = c.next.Close()
	}
	return c.err
}

// encodeLayouts encodes decoded layouts for LayoutBytes.
func encodeLayouts(m map[hash.Hash]*xorb.Layout) (map[hash.Hash][]byte, error) {
	out := make(map[hash.Hash][]byte, len(m))
	for h, l := range m {
		b, err := l.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("index: layout of %s: %w", h, err)
		}
		out[h] = b
	}
	return out, nil
}

// Lifecycle (index.Lifecycle).

// Delete implements Index. Like Hide, once the wrapped index has answered (a failure may still
// have committed), every visibility answer remembered so far is invalid.
func (c *FileCache) Delete(ctx context.Context, scope string, files []hash.Hash) (int, error) {
	n, err := c.next.Delete(ctx, scope, files)
	c.epoch.Add(1)
	return n, err
}

// Visible implements Index through the wrapped index; nothing is cached.
func (c *FileCache) Visible(ctx context.Context, after VisibleKey, limit int) ([]VisibleFile, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	return c.next.Visible(ctx, after, limit)
}

// Files implements Index through the wrapped index; nothing is cached.
func (c *FileCache) Files(ctx context.Context, after hash.Hash, limit int) ([]FileEntry, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	return c.next.Files(ctx, after, limit)
}

// Xorbs implements Index through the wrapped index.
func (c *FileCache) Xorbs(ctx context.Context, after hash.Hash, limit int) ([]XorbEntry, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	return c.next.Xorbs(ctx, after, limit)
}

// Condemn implements Index through the wrapped index.
func (c *FileCache) Condemn(ctx context.Context, xs []hash.Hash, at time.Time) error {
	return c.next.Condemn(ctx, xs, at)
}

// Revive implements Index through the wrapped index.
func (c *FileCache) Revive(ctx context.Context, xs []hash.Hash) error { return c.next.Revive(ctx, xs) }

// Sweep implements Index through the wrapped index. The records it deletes are of files no
// scope saw; a cached record is only ever served with a positive visibility answer.
func (c *FileCache) Sweep(ctx context.Context, cands []SweepCandidate, condemnedBefore time.Time) ([]hash.Hash, error) {
	return c.next.Sweep(ctx, cands, condemnedBefore)
}

// Swept implements Index through the wrapped index.
func (c *FileCache) Swept(ctx context.Context, limit int) ([]hash.Hash, error) {
	return c.next.Swept(ctx, limit)
}

// ObjectsDeleted implements Index through the wrapped index.
func (c *FileCache) ObjectsDeleted(ctx context.Context, xs []hash.Hash) error {
	return c.next.ObjectsDeleted(ctx, xs)
}

// LockCollector implements Index through the wrapped index.
func (c *FileCache) LockCollector(ctx context.Context) (func(), error) {
	return c.next.LockCollector(ctx)
}
