package server

import (
	"container/list"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// DefaultAnswerCacheBytes is the answer cache budget when Options.AnswerCacheBytes is 0: about
// a dozen 100,000-term files (13 MB of encoded terms each, plus the signed rest of each
// version: a few hundred KB when each xorb's ranges merge, several MB when none do), or tens
// of thousands of ordinary files.
const DefaultAnswerCacheBytes = 192 << 20

// termBytes over-estimates one encoded term, to keep files whose terms would take more than
// half the budget out of the cache (they are encoded on the fly, as without a cache).
const termBytes = 160

// rangedTermsAt is the term count from which a ranged request of a file whose terms are not
// cached encodes the whole file's terms once, for the next ranged requests to copy.
const rangedTermsAt = 2048

// answerCache keeps encoded reconstruction answers of recently asked files, LRU, bounded by
// their bytes. Per file it holds:
//
//   - the encoded terms of the whole-file answer (recon.Terms). They contain no URL, so they
//     stay valid as long as the record: whole-file answers start with them and ranged answers
//     copy all but their first and last term from them;
//   - per version (v1, v2), the rest of the whole-file answer (its xorbs or fetch_info, i.e.
//     the signed URLs) for one URL expiry. URLs are signed with an expiry rounded up to
//     Options.URLExpiryRound, so every request in that interval gets the same bytes; a request
//     in the next interval misses and replaces them.
//
// Entries remember the record they were encoded from: a lookup with another record (the
// metadata cache refetched the file) misses, and a put replaces the entry. Visibility is not
// cached here: callers look answers up only after the metadata cache returned the record for
// the request's scope. Cached slices are never modified, so they are written without a lock.
type answerCache struct {
	max   int64
	m     *metrics
	mu    sync.Mutex
	used  int64
	order *list.List // of *answerEntry, most recently used first
	byKey map[hash.Hash]*list.Element
}

type answerEntry struct {
	file  hash.Hash
	rec   *recon.FileRecord
	terms *recon.Terms
	rest  [2]signedRest // by version: 0 v1, 1 v2
	cost  int64
}

// signedRest is the part of a whole-file answer after its terms, signed for expiry exp (Unix).
type signedRest struct {
	exp int64
	b   []byte
}

// entryOverhead approximates the cache's own memory per entry.
const entryOverhead = 256

func newAnswerCache(max int64, m *metrics) *answerCache {
	return &answerCache{max: max, m: m, order: list.New(), byKey: make(map[hash.Hash]*list.Element)}
}

// usable reports whether the cache is on and a file of n terms may be cached.
func (c *answerCache) usable(n int) bool { return c.max > 0 && int64(n)*termBytes <= c.max/2 }

func version(v2 bool) int {
	if v2 {
		return 1
	}
	return 0
}

// lookup returns the cached terms of rec (nil if none) and, if terms are cached, the rest of
// its whole-file answer in version v2 signed for expiry exp (nil if none).
func (c *answerCache) lookup(rec *recon.FileRecord, v2 bool, exp int64) (*recon.Terms, []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[rec.Hash]
	if !ok {
		return nil, nil
	}
	ae := e.Value.(*answerEntry)
	if ae.rec != rec {
		return nil, nil
	}
	c.order.MoveToFront(e)
	r := ae.rest[version(v2)]
	if r.b == nil || r.exp != exp {
		return ae.terms, nil
	}
	return ae.terms, r.b
}

// putTerms stores the encoded terms of rec, replacing an entry of another record or without
// terms, and returns what is cached for rec afterwards (t, or terms another request stored
// first). Entries larger than the whole budget are not stored.
func (c *answerCache) putTerms(rec *recon.FileRecord, t *recon.Terms) *recon.Terms {
	cost := entryOverhead + t.Size()
	if cost > c.max {
		return t
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[rec.Hash]; ok {
		if ae := e.Value.(*answerEntry); ae.rec == rec {
			c.order.MoveToFront(e)
			return ae.terms
		}
		c.removeLocked(e)
	}
	c.byKey[rec.Hash] = c.order.PushFront(&answerEntry{file: rec.Hash, rec: rec, terms: t, cost: cost})
	c.used += cost
	c.evictLocked()
	return t
}

// putRest stores b, the rest of rec's whole-file answer in version v2 for expiry exp, in rec's
// entry (which putTerms made); nothing is stored when the entry is gone or is of another record.
func (c *answerCache) putRest(rec *recon.FileRecord, v2 bool, exp int64, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[rec.Hash]
	if !ok {
		return
	}
	ae := e.Value.(*answerEntry)
	if ae.rec != rec {
		return
	}
	r := &ae.rest[version(v2)]
	if r.b != nil && r.exp > exp {
		return // a request signed later already stored a newer one
	}
	delta := int64(cap(b)) - int64(cap(r.b))
	if ae.cost+delta > c.max {
		return
	}
	*r = signedRest{exp: exp, b: b}
	ae.cost += delta
	c.used += delta
	c.order.MoveToFront(e)
	c.evictLocked()
}

func (c *answerCache) evictLocked() {
	for c.used > c.max && c.order.Len() > 1 {
		c.removeLocked(c.order.Back())
	}
	c.m.answerBytes.Set(float64(c.used))
}

func (c *answerCache) removeLocked(e *list.Element) {
	ae := c.order.Remove(e).(*answerEntry)
	delete(c.byKey, ae.file)
	c.used -= ae.cost
}

// countAnswer records a lookup result: part is "answer" (a whole-file answer) or "terms" (the terms
// of a ranged answer).
func (m *metrics) countAnswer(part string, hit bool) {
	result := "miss"
	if hit {
		result = "hit"
	}
	m.answerCache.With(prometheus.Labels{"part": part, "result": result}).Inc()
}
