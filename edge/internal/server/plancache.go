package server

import (
	"container/list"
	"sync"

	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// DefaultPlanCacheBytes is the plan cache budget when Options.PlanCacheBytes is 0: about twenty
// 100,000-term worst-case plans (~3 MB each), or thousands of ordinary files.
const DefaultPlanCacheBytes = 64 << 20

// planCache keeps the whole-file recon.Answer of recently asked files, LRU, bounded by the
// answers' approximate size. A plan is a pure function of the file record (recon.Plan without a
// range calls no LayoutFunc), and an Answer is immutable and safe for concurrent reads, so one
// plan serves every whole-file request of a file until evicted. URLs are signed per request by
// the Encoder; nothing time-limited is cached.
//
// Entries are keyed by file hash and remember the record they were planned from: a lookup with
// another record (the metadata cache evicted and refetched the file) misses and replaces the
// entry. Visibility is not cached here: callers look a plan up only after the metadata cache
// returned the record for the request's scope.
type planCache struct {
	max int64

	mu    sync.Mutex
	used  int64
	order *list.List // of *planEntry, most recently used first
	byKey map[hash.Hash]*list.Element
}

type planEntry struct {
	file hash.Hash
	rec  *recon.FileRecord
	a    *recon.Answer
	cost int64
}

// newPlanCache returns a cache of at most max bytes; max <= 0 gives a cache that keeps nothing.
func newPlanCache(max int64) *planCache {
	return &planCache{max: max, order: list.New(), byKey: make(map[hash.Hash]*list.Element)}
}

// get returns the cached whole-file plan of rec, if any.
func (c *planCache) get(rec *recon.FileRecord) (*recon.Answer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[rec.Hash]
	if !ok {
		return nil, false
	}
	pe := e.Value.(*planEntry)
	if pe.rec != rec {
		return nil, false
	}
	c.order.MoveToFront(e)
	return pe.a, true
}

// put stores a, the whole-file plan of rec, evicting the least recently used plans to stay
// within budget. A plan larger than the whole budget is not stored.
func (c *planCache) put(rec *recon.FileRecord, a *recon.Answer) {
	cost := planCost(a)
	if cost > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[rec.Hash]; ok {
		c.removeLocked(e)
	}
	c.byKey[rec.Hash] = c.order.PushFront(&planEntry{file: rec.Hash, rec: rec, a: a, cost: cost})
	c.used += cost
	for c.used > c.max {
		c.removeLocked(c.order.Back())
	}
}

func (c *planCache) removeLocked(e *list.Element) {
	pe := c.order.Remove(e).(*planEntry)
	delete(c.byKey, pe.file)
	c.used -= pe.cost
}

// planCost approximates the memory an Answer holds beyond the record it aliases: a 4-byte
// xorb index per term, 24 bytes per merged range (chunk and byte ranges), 80 per xorb, plus
// the cache's own entry.
func planCost(a *recon.Answer) int64 {
	return 256 + 4*int64(a.Len()) + 24*int64(a.NumRanges()) + 80*int64(len(a.Xorbs))
}
