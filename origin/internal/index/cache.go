package index

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/dgraph-io/ristretto/v2"

	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// LayoutCache is an Index decorator that keeps decoded xorb layouts in memory.
//
// Layouts are immutable (content-addressed), so a cached layout is never stale. A database read
// and decode of a full layout (328 KB for 8,192 chunks) costs milliseconds, while shard
// validation and ranged reconstructions ask for the same few layouts again and again, and a
// shard usually names xorbs that were just put. PutXorb therefore fills the cache too (and waits
// for the write to be visible). LayoutBytes encodes cached layouts (a copy, far cheaper than a
// database read) and reads the others undecoded from the wrapped index, without caching them.
// Every other method goes to the wrapped Index unchanged.
//
// The layouts Layouts returns are shared between callers: treat them as immutable, as
// xorb.Layout asks.
type LayoutCache struct {
	next Index
	c    *ristretto.Cache[string, *xorb.Layout]
	once sync.Once
	err  error
}

// NewLayoutCache wraps ix with a cache of decoded layouts bounded to about maxBytes of memory.
// Close closes the cache and ix.
func NewLayoutCache(ix Index, maxBytes int64) (*LayoutCache, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("%w: layout cache of %d bytes", ErrInvalid, maxBytes)
	}
	c, err := ristretto.NewCache(&ristretto.Config[string, *xorb.Layout]{
		// About ten counters per cached item; a typical layout is tens of KiB.
		NumCounters: max(1024, 10*maxBytes/(16<<10)),
		MaxCost:     maxBytes,
		BufferItems: 64,
		KeyToHash: func(k string) (uint64, uint64) {
			return binary.LittleEndian.Uint64([]byte(k[:8])), binary.LittleEndian.Uint64([]byte(k[8:16]))
		},
		IgnoreInternalCost: true,
	})
	if err != nil {
		return nil, fmt.Errorf("index: layout cache: %w", err)
	}
	return &LayoutCache{next: ix, c: c}, nil
}

// Unwrap returns the wrapped index.
func (c *LayoutCache) Unwrap() Index { return c.next }

// layoutCost approximates the memory of a decoded layout.
func layoutCost(l *xorb.Layout) int64 { return int64(100 + 40*len(l.ChunkHashes)) }

func (c *LayoutCache) get(h hash.Hash) (*xorb.Layout, bool) {
	l, ok := c.c.Get(string(h[:]))
	if !ok || l == nil || l.Hash != h {
		return nil, false
	}
	return l, true
}

func (c *LayoutCache) set(l *xorb.Layout) { c.c.Set(string(l.Hash[:]), l, layoutCost(l)) }

// PutXorb implements Index, and caches l once it is stored as new. l is kept, not copied: the
// caller must not modify it afterwards (xorb.Layout values are immutable once built).
func (c *LayoutCache) PutXorb(ctx context.Context, l *xorb.Layout, storedSize uint64) (bool, error) {
	ins, err := c.next.PutXorb(ctx, l, storedSize)
	if err == nil && ins {
		c.set(l)
		c.c.Wait() // make it visible to the shard registration that usually follows at once
	}
	return ins, err
}

// CachedLayouts implements MemoryLayouts: the layouts of hs when every one is cached.
func (c *LayoutCache) CachedLayouts(hs []hash.Hash) (map[hash.Hash]*xorb.Layout, bool) {
	out := make(map[hash.Hash]*xorb.Layout, len(hs))
	for _, h := range hs {
		l, ok := c.get(h)
		if !ok {
			return nil, false
		}
		out[h] = l
	}
	return out, true
}

// Layouts implements Index: cached layouts come from memory, the others from the wrapped
// Index in one call.
func (c *LayoutCache) Layouts(ctx context.Context, hs []hash.Hash) (map[hash.Hash]*xorb.Layout, error) {
	out := make(map[hash.Hash]*xorb.Layout, len(hs))
	var miss []hash.Hash
	for _, h := range hs {
		if l, ok := c.get(h); ok {
			out[h] = l
		} else {
			miss = append(miss, h)
		}
	}
	miss = SortedUnique(miss)
	if len(miss) == 0 {
		return out, nil
	}
	got, err := c.next.Layouts(ctx, miss)
	if err != nil {
		return nil, err
	}
	for h, l := range got {
		out[h] = l
		c.set(l)
	}
	return out, nil
}

// LayoutBytes implements Index: the encodings of the cached layouts, and those of the others as
// the wrapped index stores them (not decoded, not cached).
func (c *LayoutCache) LayoutBytes(ctx context.Context, hs []hash.Hash) (map[hash.Hash][]byte, error) {
	hit := make(map[hash.Hash]*xorb.Layout, len(hs))
	var miss []hash.Hash
	for _, h := range hs {
		if l, ok := c.get(h); ok {
			hit[h] = l
		} else {
			miss = append(miss, h)
		}
	}
	out, err := encodeLayouts(hit)
	if err != nil {
		return nil, err
	}
	if miss = SortedUnique(miss); len(miss) == 0 {
		return out, nil
	}
	got, err := c.next.LayoutBytes(ctx, miss)
	if err != nil {
		return nil, err
	}
	for h, b := range got {
		out[h] = b
	}
	return out, nil
}

// XorbSize implements Index through the wrapped index.
func (c *LayoutCache) XorbSize(ctx context.Context, x hash.Hash) (uint64, error) {
	return c.next.XorbSize(ctx, x)
}

// RegisterShard implements Index through the wrapped index.
func (c *LayoutCache) RegisterShard(ctx context.Context, r *Registration) (bool, error) {
	return c.next.RegisterShard(ctx, r)
}

// File implements Index through the wrapped index.
func (c *LayoutCache) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	return c.next.File(ctx, h, scope)
}

// Visible implements Index through the wrapped index.
func (c *LayoutCache) Visible(ctx context.Context, h hash.Hash, scope string) error {
	return c.next.Visible(ctx, h, scope)
}

// DedupXorbs implements Index through the wrapped index.
func (c *LayoutCache) DedupXorbs(ctx context.Context, chunk hash.Hash) ([]hash.Hash, error) {
	return c.next.DedupXorbs(ctx, chunk)
}

// DedupXorbsOf implements Index through the wrapped index.
func (c *LayoutCache) DedupXorbsOf(ctx context.Context, chunks []hash.Hash) ([]hash.Hash, error) {
	return c.next.DedupXorbsOf(ctx, chunks)
}

// RecordPossession implements Index through the wrapped index.
func (c *LayoutCache) RecordPossession(ctx context.Context, scope string, x hash.Hash) error {
	return c.next.RecordPossession(ctx, scope, x)
}

// Possessed implements Index through the wrapped index.
func (c *LayoutCache) Possessed(ctx context.Context, scope string, hs []hash.Hash) (map[hash.Hash]bool, error) {
	return c.next.Possessed(ctx, scope, hs)
}

// Hide implements Index through the wrapped index (layouts are never hidden).
func (c *LayoutCache) Hide(ctx context.Context, scope string, files []hash.Hash) error {
	return c.next.Hide(ctx, scope, files)
}

// Events implements Index through the wrapped index.
func (c *LayoutCache) Events(ctx context.Context, after int64, limit int) ([]Event, error) {
	return c.next.Events(ctx, after, limit)
}

// Ping implements Index through the wrapped index.
func (c *LayoutCache) Ping(ctx context.Context) error { return c.next.Ping(ctx) }

// FileBytes implements Index through the wrapped index.
func (c *LayoutCache) FileBytes(ctx context.Context, h hash.Hash, scope string) ([]byte, error) {
	return c.next.FileBytes(ctx, h, scope)
}

// ShardBody implements Index through the wrapped index.
func (c *LayoutCache) ShardBody(ctx context.Context, h hash.Hash) ([]byte, error) {
	return c.next.ShardBody(ctx, h)
}

// Wait blocks until the layouts cached so far are visible to Layouts (ristretto applies
// writes asynchronously; PutXorb already waits). For tests and benchmarks.
func (c *LayoutCache) Wait() { c.c.Wait() }

// Close closes the cache and the wrapped Index. It is idempotent.
func (c *LayoutCache) Close() error {
	c.once.Do(func() {
		c.c.Close()
		c.err = c.next.Close()
	})
	return c.err
}

// Lifecycle (index.Lifecycle).

// Delete implements Index through the wrapped index (layouts are immutable; a deleted xorb's
// layout leaves the cache by eviction only).
func (c *LayoutCache) Delete(ctx context.Context, scope string, files []hash.Hash) (int, error) {
	return c.next.Delete(ctx, scope, files)
}

// VisibleFiles implements Index through the wrapped index.
func (c *LayoutCache) VisibleFiles(ctx context.Context, after VisibleKey, limit int) ([]VisibleFile, error) {
	return c.next.VisibleFiles(ctx, after, limit)
}

// Files implements Index through the wrapped index.
func (c *LayoutCache) Files(ctx context.Context, after hash.Hash, limit int) ([]FileEntry, error) {
	return c.next.Files(ctx, after, limit)
}

// Xorbs implements Index through the wrapped index.
func (c *LayoutCache) Xorbs(ctx context.Context, after hash.Hash, limit int) ([]XorbEntry, error) {
	return c.next.Xorbs(ctx, after, limit)
}

// Condemn implements Index through the wrapped index.
func (c *LayoutCache) Condemn(ctx context.Context, xs []hash.Hash, at time.Time) error {
	return c.next.Condemn(ctx, xs, at)
}

// Revive implements Index through the wrapped index.
func (c *LayoutCache) Revive(ctx context.Context, xs []hash.Hash) error {
	return c.next.Revive(ctx, xs)
}

// Sweep implements Index and drops the swept xorbs' layouts, so that a shard check in this
// process does not find them here (the registration's own check in the index is the
// authority; this only makes the refusal early and clear).
func (c *LayoutCache) Sweep(ctx context.Context, cands []SweepCandidate, condemnedBefore time.Time) ([]hash.Hash, error) {
	swept, err := c.next.Sweep(ctx, cands, condemnedBefore)
	for _, x := range cands { // a failed Sweep may still have committed
		c.c.Del(string(x.Xorb[:]))
	}
	return swept, err
}

// Swept implements Index through the wrapped index.
func (c *LayoutCache) Swept(ctx context.Context, limit int) ([]hash.Hash, error) {
	return c.next.Swept(ctx, limit)
}

// ObjectsDeleted implements Index through the wrapped index.
func (c *LayoutCache) ObjectsDeleted(ctx context.Context, xs []hash.Hash) error {
	return c.next.ObjectsDeleted(ctx, xs)
}

// LockCollector implements Index through the wrapped index.
func (c *LayoutCache) LockCollector(ctx context.Context) (func(), error) {
	return c.next.LockCollector(ctx)
}

// Dead shards (ShardLifecycle): layouts are not affected.

// Shards implements Index through the wrapped index.
func (c *LayoutCache) Shards(ctx context.Context, after hash.Hash, limit int) ([]ShardEntry, error) {
	return c.next.Shards(ctx, after, limit)
}

// CondemnShards implements Index through the wrapped index.
func (c *LayoutCache) CondemnShards(ctx context.Context, condemn, revive []hash.Hash, at time.Time) error {
	return c.next.CondemnShards(ctx, condemn, revive, at)
}

// SweepShards implements Index through the wrapped index.
func (c *LayoutCache) SweepShards(ctx context.Context, cands []ShardCandidate, condemnedBefore time.Time) ([]hash.Hash, error) {
	return c.next.SweepShards(ctx, cands, condemnedBefore)
}
