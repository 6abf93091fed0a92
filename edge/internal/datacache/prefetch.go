package datacache

import (
	"context"

	"golang.org/x/sync/semaphore"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// DefaultPrefetchSegments bounds the read-ahead fills running at once (Options.PrefetchSegments).
const DefaultPrefetchSegments = 32

// prefetcher bounds read-ahead: at most its semaphore's weight of prefetch fills at once.
type prefetcher struct {
	sem *semaphore.Weighted
}

// Prefetch starts fills for the segments of stored bytes [start, end) of l that are not cached
// (read-ahead: a reconstruction the edge answered names the ranges its client asks for next),
// and returns at once with the number of fills it started or joined. start and end must be
// chunk boundaries of l (else an error wrapping ErrBadRange); l.Verify() passed. At most
// Options.PrefetchSegments prefetch fills run at a time; segments beyond that are skipped and
// counted (xet_edge_datacache_prefetch_total{result="skipped"}), so read-ahead never queues;
// so are all segments while more than half of the receive buffers' ceiling is in use
// (Options.BufferMemory), which is left to the fills clients wait for.
// The fills are ordinary ones: a request that arrives meanwhile joins them.
func (c *Cache) Prefetch(l *xorb.Layout, start, end int64) (int, error) {
	r, err := requestSpan(l, start, end)
	if err != nil {
		return 0, err
	}
	started := 0
	todo := c.uncached(l, segments(l, r, c.o.SegmentBytes))
	// Consecutive segments to fill go in chains, one origin request each (chain.go); each
	// segment of a chain takes one read-ahead slot until its fill ends, and a chain is cut where
	// the slots run out. The first chain starts now, the others once it has its first bytes
	// (flight.ramp, as a read's chains).
	var runs [][]span
	for _, ss := range c.chains(todo) {
		n := 0
		for n < len(ss) && c.pool.inUse.Load() <= c.pool.ceiling/2 && c.pre.sem.TryAcquire(1) {
			n++
		}
		if n < len(ss) {
			c.m.prefetch.WithLabelValues("skipped").Add(float64(len(ss) - n))
		}
		if n > 0 {
			runs = append(runs, ss[:n])
			started += n
		}
	}
	if len(runs) == 0 {
		return 0, nil
	}
	first, err := c.prefetchChain(l, runs[0], true)
	if err != nil {
		for _, ss := range runs {
			c.pre.sem.Release(int64(len(ss)))
		}
		return 0, err
	}
	if len(runs) > 1 {
		go func() {
			first.ramp(c.closing, c.rampWait)
			for i, ss := range runs[1:] {
				if _, err := c.prefetchChain(l, ss, true); err != nil {
					for _, ss := range runs[1+i:] {
						c.pre.sem.Release(int64(len(ss)))
					}
					return
				}
			}
		}()
	}
	return started, nil
}

// prefetchChain starts (or joins) the fills of consecutive segments ss as read-ahead, whose
// slots the caller holds; the slots and references go back as the fills end. wanted: Prefetch
// (the bytes a client reads next), not PrefetchIdle (acquireChain). It returns the first flight.
func (c *Cache) prefetchChain(l *xorb.Layout, ss []span, wanted bool) (*flight, error) {
	fls, err := c.acquireChain(l, ss, false, wanted)
	if err != nil {
		return nil, err
	}
	c.m.prefetch.WithLabelValues("started").Add(float64(len(ss)))
	go func() {
		for _, fl := range fls {
			<-fl.doneCh // bounded by the fill's timeout
			fl.release()
			c.pre.sem.Release(1)
		}
	}()
	return fls[0], nil
}

// CachedAt reports whether the chunk of xorb h that starts at stored byte off is cached and
// verified, without the xorb's layout and without touching the LRU order: one map lookup under
// the index lock. Read-ahead asks it before doing any work for an answer whose bytes are
// likely all cached (a warm file). off must be a chunk start for the answer to mean anything;
// false for any other offset is harmless (read-ahead then checks segment by segment).
func (c *Cache) CachedAt(h hash.Hash, off int64) bool {
	return off >= 0 && c.idx.cachedAt(h, off)
}

// uncached returns the segments of ss that are not cached and verified, counting the others
// as read-ahead found cached (xet_edge_datacache_prefetch_total{result="cached"}).
func (c *Cache) uncached(l *xorb.Layout, ss []span) []span {
	var out []span
	for _, s := range ss {
		if present, verified := c.idx.get(key{h: l.Hash, start: s.start, len: s.len()}); present && verified {
			c.m.prefetch.WithLabelValues("cached").Inc()
			continue
		}
		out = append(out, s)
	}
	return out
}

// demand marks fl as joined by a read or read ahead as an answer's first ranges; c.mu is held.
func (c *Cache) demand(fl *flight) {
	if fl.demanded.Load() {
		return
	}
	fl.demanded.Store(true)
	c.demanded++
	if c.demanded == 1 {
		c.idle = make(chan struct{})
	}
}

// undemand counts a demanded flight's end; c.mu is held.
func (c *Cache) undemand() {
	c.demanded--
	if c.demanded == 0 {
		close(c.idle)
	}
}

// waitIdle waits until no demanded fill is running (flight.demanded), or ctx ends, or the cache
// closes.
func (c *Cache) waitIdle(ctx context.Context) error {
	c.mu.Lock()
	closed, idle := c.closed, c.idle
	c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-c.closing.Done():
		return ErrClosed
	}
}

// PrefetchIdle is Prefetch for the bytes a client asks for later, not next (the rest of an
// answered reconstruction beyond its first ranges): it starts each chain of missing segments
// only while no fill of bytes a client reads next is running (one a read joined, or Prefetch's)
// — read-ahead then uses what those fills leave idle, and never competes with them; started
// right after an answer, it would have pulled the origin away from the answer's first ranges
// before the client asked for them — and waits for read-ahead slots
// instead of skipping. It returns once it started (or joined) the fills of every segment of
// [start, end) that was missing when its turn came, with the number of segments started, or
// early with ctx's error (ErrClosed when the cache closes). Same range rules as Prefetch.
//
// Why: clients fetch a file a window at a time (xet: the ranges of the next 256 MiB of output,
// eight requests at once; it asks for the next ones when the first complete), so a cold edge
// saw a burst of misses per window, during which the client, its earlier ranges written, stood
// still, and between bursts the edge had nothing to do (perf/BENCHMARKS.md, 2026-12-04,
// "read-ahead while idle").
func (c *Cache) PrefetchIdle(ctx context.Context, l *xorb.Layout, start, end int64) (int, error) {
	r, err := requestSpan(l, start, end)
	if err != nil {
		return 0, err
	}
	started := 0
	for _, ss := range c.chains(c.uncached(l, segments(l, r, c.o.SegmentBytes))) {
		if err := c.waitIdle(ctx); err != nil {
			return started, err
		}
		// Filled meanwhile (a client's read, or another answer's read-ahead)?
		for _, cs := range c.chains(c.uncached(l, ss)) {
			if err := c.pre.sem.Acquire(ctx, int64(len(cs))); err != nil {
				return started, context.Cause(ctx)
			}
			if _, err := c.prefetchChain(l, cs, false); err != nil {
				c.pre.sem.Release(int64(len(cs)))
				return started, err
			}
			started += len(cs)
		}
	}
	return started, nil
}
