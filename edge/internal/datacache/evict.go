package datacache

import "github.com/xetcdn/xetcdn/shared/xet/hash"

// Evict removes every cached segment of the xorbs xs (the origin's garbage collection deleted
// them) and returns how many segment files it removed. A fill of one of them already running
// may still commit a segment; the origin no longer serves the xorb, so no later fill does.
func (c *Cache) Evict(xs []hash.Hash) int {
	if len(xs) == 0 {
		return 0
	}
	n := c.idx.evictXorbs(xs)
	c.m.evictions.Add(float64(n))
	return n
}

// evictXorbs drops every entry of the xorbs xs (one pass over the index).
func (x *index) evictXorbs(xs []hash.Hash) int {
	set := make(map[hash.Hash]struct{}, len(xs))
	for _, h := range xs {
		set[h] = struct{}{}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for k, e := range x.entries {
		if _, ok := set[k.h]; ok {
			x.removeLocked(e)
			n++
		}
	}
	return n
}
