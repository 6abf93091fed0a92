package server

import (
	"container/list"
	"sync"

	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// DefaultPlanCacheBytes is Options.PlanCacheBytes when 0: the part of the answer cache's budget
// meant for plans, about twenty 100,000-term worst-case plans (~3 MB each), or thousands of
// ordinary files.
const DefaultPlanCacheBytes = 64 << 20

// DefaultAnswerCacheBytes is Options.AnswerCacheBytes when 0: the part of the budget meant for
// encoded answers, about a dozen 100,000-term files (13 MB of encoded terms each, plus the
// signed rest of each version: a few hundred KB when each xorb's ranges merge, several MB when
// none do), or tens of thousands of ordinary files.
const DefaultAnswerCacheBytes = 192 << 20

// termBytes over-estimates one encoded term, to keep files whose terms would take more than
// half the budget out of the cache (they are encoded on the fly, as without a cache).
const termBytes = 160

// rangedTermsAt is the term count from which a ranged request of a file whose terms are not
// cached encodes the whole file's terms once, for the next ranged requests to copy.
const rangedTermsAt = 2048

// answerCache keeps, per recently asked file, what its whole-file answer is made of, in one
// LRU bounded by approximate bytes:
//
//   - the plan (recon.Answer). A whole-file plan is a pure function of the record (recon.Plan
//     without a range calls no LayoutFunc), and an Answer is immutable and safe for
//     concurrent reads, so one plan serves every whole-file request of the file;
//   - the encoded terms of the whole-file answer (recon.Terms). They contain no URL, so they
//     stay valid as long as the record: whole-file answers start with them and ranged answers
//     copy all but their first and last term from them;
//   - per version (v1, v2), the rest of the whole-file answer (its xorbs or fetch_info, i.e.
//     the signed URLs) for one scope and one URL expiry. URLs are bound to the token's scope
//     and signed with an expiry rounded up to Options.URLExpiryRound, so every request of that
//     scope in that interval gets the same bytes; a request in the next interval, or of another
//     scope (a file registered in several repositories), misses and replaces them.
//
// Entries are keyed by file hash and remember the record they were made from: a lookup with
// another record (the metadata cache refetched the file) misses, and a put replaces the entry.
// Visibility is not cached here: callers look entries up only after the metadata cache
// returned the record for the request's scope. Cached values are never modified, so they are
// used without a lock.
type answerCache struct {
	max     int64 // the budget: the sum of the plan and answer budgets that are not negative
	plans   bool  // plans are kept
	answers bool  // encoded terms and rests are kept
	m       *metrics

	mu        sync.Mutex
	used      int64
	planBytes int64      // the part of used that is plans (the rest is what answerBytes shows)
	order     *list.List // of *answerEntry, most recently used first
	byKey     map[hash.Hash]*list.Element
}

type answerEntry struct {
	file     hash.Hash
	rec      *recon.FileRecord
	plan     *recon.Answer
	planCost int64
	terms    *recon.Terms
	rest     [2]signedRest // by version: 0 v1, 1 v2
	cost     int64         // everything above, with entryOverhead
}

// signedRest is the part of a whole-file answer after its terms, signed for scope and expiry
// exp (Unix).
type signedRest struct {
	scope string
	exp   int64
	b     []byte
}

// entryOverhead approximates the cache's own memory per entry.
const entryOverhead = 256

// newAnswerCache returns a cache of planMax + answerMax bytes; a negative budget keeps nothing
// of its kind and adds nothing to the sum.
func newAnswerCache(planMax, answerMax int64, m *metrics) *answerCache {
	return &answerCache{max: max(planMax, 0) + max(answerMax, 0), plans: planMax >= 0, answers: answerMax >= 0,
		m: m, order: list.New(), byKey: make(map[hash.Hash]*list.Element)}
}

// usable reports whether encoded answers are kept and a file of n terms may be cached.
func (c *answerCache) usable(n int) bool {
	return c.answers && c.max > 0 && int64(n)*termBytes <= c.max/2
}

func version(v2 bool) int {
	if v2 {
		return 1
	}
	return 0
}

// entryLocked returns rec's entry, moved to the front; nil if there is none for rec.
func (c *answerCache) entryLocked(rec *recon.FileRecord) *answerEntry {
	e, ok := c.byKey[rec.Hash]
	if !ok {
		return nil
	}
	ae := e.Value.(*answerEntry)
	if ae.rec != rec {
		return nil
	}
	c.order.MoveToFront(e)
	return ae
}

// entryForLocked returns rec's entry, replacing one of another record or making a new one.
func (c *answerCache) entryForLocked(rec *recon.FileRecord) *answerEntry {
	if ae := c.entryLocked(rec); ae != nil {
		return ae
	}
	if e, ok := c.byKey[rec.Hash]; ok {
		c.removeLocked(e)
	}
	ae := &answerEntry{file: rec.Hash, rec: rec, cost: entryOverhead}
	c.byKey[rec.Hash] = c.order.PushFront(ae)
	c.used += ae.cost
	return ae
}

// plan returns the cached whole-file plan of rec, if any.
func (c *answerCache) plan(rec *recon.FileRecord) (*recon.Answer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ae := c.entryLocked(rec); ae != nil && ae.plan != nil {
		return ae.plan, true
	}
	return nil, false
}

// putPlan stores a, the whole-file plan of rec, evicting the least recently used entries to
// stay within budget. Nothing is stored when plans are off or the entry would exceed the
// whole budget.
func (c *answerCache) putPlan(rec *recon.FileRecord, a *recon.Answer) {
	cost := planCost(a)
	if !c.plans || entryOverhead+cost > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ae := c.entryForLocked(rec)
	if ae.plan != nil || ae.cost+cost > c.max {
		return
	}
	ae.plan, ae.planCost = a, cost
	c.grow(ae, cost)
	c.planBytes += cost
	c.evictLocked()
}

// lookup returns the cached terms of rec (nil if none) and, if terms are cached, the rest of
// its whole-file answer in version v2 signed for scope and expiry exp (nil if none).
func (c *answerCache) lookup(rec *recon.FileRecord, v2 bool, scope string, exp int64) (*recon.Terms, []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ae := c.entryLocked(rec)
	if ae == nil {
		return nil, nil
	}
	r := ae.rest[version(v2)]
	if r.b == nil || r.exp != exp || r.scope != scope {
		return ae.terms, nil
	}
	return ae.terms, r.b
}

// putTerms stores the encoded terms of rec and returns what is cached for rec afterwards (t,
// or terms another request stored first). Nothing is stored when encoded answers are off or
// the entry would exceed the whole budget.
func (c *answerCache) putTerms(rec *recon.FileRecord, t *recon.Terms) *recon.Terms {
	if !c.answers || entryOverhead+t.Size() > c.max {
		return t
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ae := c.entryForLocked(rec)
	if ae.terms != nil {
		return ae.terms
	}
	if ae.cost+t.Size() > c.max {
		return t
	}
	ae.terms = t
	c.grow(ae, t.Size())
	c.evictLocked()
	return t
}

// putRest stores b, the rest of rec's whole-file answer in version v2 for scope and expiry exp,
// in rec's entry (which putTerms made); nothing is stored when the entry is gone, is of another
// record or holds no terms. One rest per version is kept: another scope's replaces it.
func (c *answerCache) putRest(rec *recon.FileRecord, v2 bool, scope string, exp int64, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ae := c.entryLocked(rec)
	if ae == nil || ae.terms == nil {
		return
	}
	r := &ae.rest[version(v2)]
	if r.b != nil && r.scope == scope && r.exp > exp {
		return // a request signed later already stored a newer one
	}
	delta := int64(cap(b)) - int64(cap(r.b))
	if ae.cost+delta > c.max {
		return
	}
	*r = signedRest{scope: scope, exp: exp, b: b}
	c.grow(ae, delta)
	c.evictLocked()
}

func (c *answerCache) grow(ae *answerEntry, delta int64) {
	ae.cost += delta
	c.used += delta
}

// evictLocked drops least recently used entries until the cache is within budget; the front
// entry, the one just stored to, is within budget on its own.
func (c *answerCache) evictLocked() {
	for c.used > c.max && c.order.Len() > 1 {
		c.removeLocked(c.order.Back())
	}
	c.m.answerBytes.Set(float64(c.used - c.planBytes))
}

func (c *answerCache) removeLocked(e *list.Element) {
	ae := c.order.Remove(e).(*answerEntry)
	delete(c.byKey, ae.file)
	c.used -= ae.cost
	c.planBytes -= ae.planCost
}

// planCost approximates the memory an Answer holds beyond the record it aliases: a 4-byte
// xorb index per term, 24 bytes per merged range (chunk and byte ranges), 80 per xorb.
func planCost(a *recon.Answer) int64 {
	return 4*int64(a.Len()) + 24*int64(a.NumRanges()) + 80*int64(len(a.Xorbs))
}

// countAnswer records a lookup result: part is "answer" (a whole-file answer) or "terms" (the terms
// of a ranged answer).
// It runs on every answer: WithLabelValues looks the counter up without the map With builds.
func (m *metrics) countAnswer(part string, hit bool) {
	result := "miss"
	if hit {
		result = "hit"
	}
	m.answerCache.WithLabelValues(part, result).Inc()
}
