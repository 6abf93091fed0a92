package index

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/dgraph-io/ristretto/v2"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// LayoutCache is an Index decorator that keeps decoded xorb layouts in memory.
//
// Layouts are immutable (content-addressed), so a cached layout is never stale. Decoding one
// costs far more than reading it: xorb.UnmarshalLayout recomputes the merkle hash of up to 8,192
// chunks (milliseconds of CPU), while shard validation and ranged reconstructions ask for the
// same few layouts again and again, and a shard usually names xorbs that were just put. PutXorb
// therefore fills the cache too. Every other method goes to the wrapped Index unchanged.
//
// The layouts Layouts returns are shared between callers: treat them as immutable, as
// xorb.Layout asks. For the undecoded encodings (Raw), keep using the wrapped implementation.
type LayoutCache struct {
	Index
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
	return &LayoutCache{Index: ix, c: c}, nil
}

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
	ins, err := c.Index.PutXorb(ctx, l, storedSize)
	if err == nil && ins {
		c.set(l)
		c.c.Wait() // make it visible to the shard registration that usually follows at once
	}
	return ins, err
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
	got, err := c.Index.Layouts(ctx, miss)
	if err != nil {
		return nil, err
	}
	for h, l := range got {
		out[h] = l
		c.set(l)
	}
	return out, nil
}

// Close closes the cache and the wrapped Index. It is idempotent.
func (c *LayoutCache) Close() error {
	c.once.Do(func() {
		c.c.Close()
		c.err = c.Index.Close()
	})
	return c.err
}
