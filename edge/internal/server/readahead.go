package server

import (
	"context"
	"fmt"
	"sort"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// Read-ahead (issue 11): a reconstruction the edge answers names the xorb ranges its client
// fetches next, in term order. answerLayer hands each answer to readAhead, which starts the
// data cache's fills (ReadAhead.Prefetch) for the fetch ranges of the answer's first terms,
// up to Options.ReadAheadBytes of them, so that the origin transfer is under way by the time
// the client's transfer request arrives (which then joins the running fill or hits the cache).
// It is an edge layer: the shared handlers and the origin never prefetch.
//
// Before the answer goes out, readAhead asks the origin, in one request, for the layouts of the
// answer's first warmXorbs xorbs that the edge does not hold (LayoutWarmer), and starts the fill
// of the first fetch range; the other ranges are started in the background. A cold client asks
// for several ranges at once as soon as it has the answer: without this, each transfer request
// asked the origin for its xorb's layout on its own, and the fill of the file's first bytes
// reached the origin only after fills of later ranges had started streaming, behind which a
// busy origin answered it 10-40 ms late (perf/BENCHMARKS.md, 2026-12-04, "a cold answer's
// layouts"). The wait is bounded by Options.ReadAheadWait; a cold answer costs one more origin
// round trip, which its transfer requests no longer pay.
//
// Bounds: at most readAheadRuns answers are being read ahead at once (layouts looked up and
// fills started, under context.WithoutCancel + readAheadTimeout, not the request's context);
// the data cache bounds the prefetch fills running at once and skips when its receive buffers
// are short (xet_edge_datacache_prefetch_total); no read-ahead starts while fewer than a
// quarter of the permits are free (the edge is busy answering, and the client's own requests
// will fill what it needs). An answer whose first fetch range starts in a cached segment is a
// warm file (its client read it before, and read-ahead or the client filled it from the front):
// it is skipped before any of that work, with one index lookup (ReadAhead.CachedAt), so warm
// answers pay nothing for read-ahead. Everything skipped here is counted in
// xet_edge_readahead_total{result}.

// ReadAhead starts background fills of verified xorb bytes (*datacache.Cache): the stored
// bytes [start, end) of l, on chunk boundaries, without waiting for them. It returns how many
// fills it started or joined.
type ReadAhead interface {
	Prefetch(l *xorb.Layout, start, end int64) (int, error)
	// PrefetchIdle starts the fills of [start, end) only while no fill a client waits for is
	// running, waiting for that (bounded by ctx); it returns once they are started.
	PrefetchIdle(ctx context.Context, l *xorb.Layout, start, end int64) (int, error)
	// CachedAt reports, cheaply and without a layout, whether the chunk of xorb h starting at
	// stored byte off is cached: an answer whose first fetch range is cached is taken for warm
	// and not read ahead (no run slot, no goroutine, no layout lookups).
	CachedAt(h hash.Hash, off int64) bool
}

const (
	// DefaultReadAheadBytes is Options.ReadAheadBytes when 0: 8 segments of the data cache's
	// default size, as many as one transfer request fills at once. 64 MiB raised the edge's
	// peak RSS and CPU per cold download without a wall-time gain on loopback (docs/decisions.md).
	DefaultReadAheadBytes = 16 << 20
	// DefaultReadAheadIdleBytes is Options.ReadAheadIdleBytes when 0: the span of one
	// reconstruction request of the xet client (its block), which it fetches a window at a time.
	DefaultReadAheadIdleBytes = 256 << 20
	// readAheadRanges bounds the fetch ranges one answer reads ahead (small terms of many
	// xorbs would otherwise mean many layout lookups for few bytes); idleRanges bounds those
	// read ahead while idle.
	readAheadRanges = 64
	idleRanges      = 256
	// readAheadRuns bounds the answers being read ahead at once; idleRuns those being read
	// ahead while idle (a run waiting for the edge to be idle does not hold up the first ranges
	// of new answers).
	readAheadRuns = 4
	idleRuns      = 4
	// readAheadTimeout bounds one answer's read-ahead (layout lookups and starting fills; the
	// fills themselves are bounded by the data cache's fill timeout).
	readAheadTimeout = 30 * time.Second
	// DefaultReadAheadWait is Options.ReadAheadWait when 0: past it a cold answer goes out
	// without its layouts or first fill, and read-ahead goes on in the background.
	DefaultReadAheadWait = time.Second
	// warmXorbs is how many of a cold answer's xorbs have their layouts fetched before the
	// answer goes out: as many ranges as a client fetches at once (xet and hf_xet: 8).
	warmXorbs = 8
)

// LayoutWarmer is what Options.Meta may also do (*metacache.Cache): fetch the layouts of several
// xorbs in one origin request, so that the transfer requests which follow find them cached.
type LayoutWarmer interface {
	WarmLayouts(ctx context.Context, hs []hash.Hash) error
}

// readAheadRange is a fetch range to read ahead: chunks [start, end) of xorb h.
type readAheadRange struct {
	h          hash.Hash
	start, end uint32
	off        int64 // stored offset of chunk start
}

// readAheader is the state of read-ahead: its bounds on concurrent runs.
type readAheader struct {
	runs, idle *semaphore.Weighted
}

// readAhead starts read-ahead for answer a (see the top of this file); it returns at once.
func (s *Server) readAhead(ctx context.Context, a *recon.Answer) {
	if s.o.ReadAhead == nil || s.o.ReadAheadBytes < 0 || a == nil || a.Len() == 0 {
		return
	}
	if r, ok := firstRange(a); !ok {
		return
	} else if s.o.ReadAhead.CachedAt(r.h, r.off) {
		// Warm, unless its last range is missing: the answer's head was read ahead with an
		// earlier answer's rest (readAheadIdle), or evicted last.
		if r, ok := lastRange(a); !ok || s.o.ReadAhead.CachedAt(r.h, r.off) {
			s.m.readAhead.WithLabelValues("skipped_cached").Inc()
			return
		}
	}
	if s.permits.freeBelow(s.o.Permits / 4) {
		s.m.readAhead.WithLabelValues("skipped_permits").Inc()
		return
	}
	rs := firstRanges(a, s.o.ReadAheadBytes, readAheadRanges)
	if len(rs) == 0 {
		return
	}
	if !s.ra.runs.TryAcquire(1) {
		s.m.readAhead.WithLabelValues("skipped_busy").Inc()
		return
	}
	var rest []readAheadRange // read ahead while idle: the answer's ranges after rs
	if s.o.ReadAheadIdleBytes > 0 {
		// firstRanges with larger bounds lists rs first, then goes on; rest starts at the last of
		// rs (its part past the clip, set once prefetchRange has clipped it).
		all := firstRanges(a, s.o.ReadAheadBytes+s.o.ReadAheadIdleBytes, len(rs)+idleRanges)
		if len(all) >= len(rs) && all[len(rs)-1] == rs[len(rs)-1] {
			rest = all[len(rs)-1:]
		}
	}
	s.m.readAhead.WithLabelValues("started").Inc()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readAheadTimeout)
	left := s.o.ReadAheadBytes
	// Before the answer goes out (top of this file): the layouts, then the first range's fill.
	sctx, scancel := context.WithTimeout(ctx, s.o.ReadAheadWait)
	if w, ok := s.o.Meta.(LayoutWarmer); ok {
		if err := w.WarmLayouts(sctx, answerXorbs(a, warmXorbs)); err != nil {
			s.log.DebugContext(ctx, "read-ahead: layouts", "err", err)
		}
	}
	if sctx.Err() == nil {
		switch next, err := s.prefetchRange(sctx, rs[0], &left); {
		case err == nil:
			if len(rs) == 1 && len(rest) > 0 {
				rest[0].start = next
			}
			rs = rs[1:]
		case sctx.Err() == nil:
			scancel()
			s.readAheadFailed(ctx, rs[0], err)
			cancel()
			s.ra.runs.Release(1)
			return
		} // else slower than ReadAheadWait: the background goes on with it
	}
	scancel()
	go func() {
		defer cancel()
		for i, r := range rs {
			if left <= 0 {
				break
			}
			next, err := s.prefetchRange(ctx, r, &left)
			if err != nil {
				s.ra.runs.Release(1)
				s.readAheadFailed(ctx, r, err)
				return
			}
			if i == len(rs)-1 && len(rest) > 0 {
				rest[0].start = next
			}
		}
		s.ra.runs.Release(1)
		s.readAheadIdle(ctx, rest)
	}()
}

// readAheadIdle reads ahead ranges rs — the rest of an answer, after its first ranges — while
// the data cache has no fill a client waits for (ReadAhead.PrefetchIdle), up to
// Options.ReadAheadIdleBytes, under ctx (the answer's read-ahead timeout). At most idleRuns
// answers are read ahead this way at once; more are skipped (counted).
func (s *Server) readAheadIdle(ctx context.Context, rs []readAheadRange) {
	if len(rs) > 0 && rs[0].start == rs[0].end {
		rs = rs[1:] // the first ranges ended exactly at the end of this one
	}
	if len(rs) == 0 {
		return
	}
	if !s.ra.idle.TryAcquire(1) {
		s.m.readAhead.WithLabelValues("idle_skipped_busy").Inc()
		return
	}
	defer s.ra.idle.Release(1)
	s.m.readAhead.WithLabelValues("idle_started").Inc()
	left := s.o.ReadAheadIdleBytes
	for _, r := range rs {
		if left <= 0 {
			return
		}
		l, cs, ce, _, err := s.clipRange(ctx, r, &left)
		if err == nil {
			_, err = s.o.ReadAhead.PrefetchIdle(ctx, l, cs, ce)
		}
		if ctx.Err() != nil {
			return // the edge was busy with clients' fills for the whole read-ahead timeout: not a failure
		}
		if err != nil {
			s.readAheadFailed(ctx, r, err)
			return
		}
	}
}

// prefetchRange starts read-ahead of range r, at most *left bytes of it (clipped to a chunk
// boundary), and takes what it started off *left. It returns the chunk it stopped at (r.end
// when it took all of r).
func (s *Server) prefetchRange(ctx context.Context, r readAheadRange, left *int64) (uint32, error) {
	l, cs, ce, next, err := s.clipRange(ctx, r, left)
	if err != nil {
		return 0, err
	}
	if _, err := s.o.ReadAhead.Prefetch(l, cs, ce); err != nil {
		return 0, err
	}
	return next, nil
}

// clipRange looks up r's layout and returns it with r's stored bytes [cs, ce), at most *left of
// them (clipped to a chunk boundary), taken off *left, and the chunk after them (r.end when it
// took all of r).
func (s *Server) clipRange(ctx context.Context, r readAheadRange, left *int64) (l *xorb.Layout, cs, ce int64, next uint32, err error) {
	if l, err = s.o.Meta.Layout(ctx, r.h); err != nil {
		return nil, 0, 0, 0, err
	}
	if int(r.end) > l.NumChunks() || r.start >= r.end {
		return nil, 0, 0, 0, fmt.Errorf("chunks [%d,%d) outside the layout's %d", r.start, r.end, l.NumChunks())
	}
	next = r.end
	s32, e32 := l.ByteRange(r.start, r.end)
	if int64(e32-s32) > *left {
		// Clip to the chunk holding byte cs+left: a chunk boundary, as Prefetch needs.
		next = uint32(firstEndAbove(l, int64(s32)+*left-1)) + 1
		_, e32 = l.ByteRange(r.start, next)
	}
	*left -= int64(e32 - s32)
	return l, int64(s32), int64(e32), next, nil
}

// readAheadFailed counts and logs a read-ahead that stops at range r.
func (s *Server) readAheadFailed(ctx context.Context, r readAheadRange, err error) {
	s.m.readAhead.WithLabelValues("error").Inc()
	s.log.DebugContext(ctx, "read-ahead stopped", "xorb", r.h.String(), "err", err)
}

// answerXorbs lists the first n distinct xorbs of a in term order (a.Xorbs is in that order).
func answerXorbs(a *recon.Answer, n int) []hash.Hash {
	out := make([]hash.Hash, min(n, len(a.Xorbs)))
	for i := range out {
		out[i] = a.Xorbs[i].Hash
	}
	return out
}

// firstRanges lists the fetch ranges (merged chunk ranges of the answer's Xorbs) of a's terms
// in term order, each once, until they hold at least maxBytes stored bytes or number maxRanges;
// it looks at no more than 4·maxRanges terms (a file repeating a few ranges many times).
func firstRanges(a *recon.Answer, maxBytes int64, maxRanges int) []readAheadRange {
	var out []readAheadRange
	type at struct{ x, k int }
	seen := map[at]bool{}
	var n int64
	for i := 0; i < a.Len() && i < 4*maxRanges && n < maxBytes && len(out) < maxRanges; i++ {
		x, k, ok := termRange(a, i)
		if !ok || seen[at{x, k}] {
			continue
		}
		seen[at{x, k}] = true
		xf := &a.Xorbs[x]
		out = append(out, readAheadRange{h: xf.Hash, start: xf.Chunks[k].Start, end: xf.Chunks[k].End,
			off: int64(xf.Bytes[k].Start)})
		n += int64(xf.Bytes[k].Len())
	}
	return out
}

// termRange finds the fetch range holding term i of a: a.Xorbs[x].Chunks[k].
func termRange(a *recon.Answer, i int) (x, k int, ok bool) {
	t := a.Term(i)
	x = a.FetchIndex(i)
	xf := &a.Xorbs[x]
	// The ranges are sorted and disjoint: the one holding t is the last starting at or before it.
	k = sort.Search(len(xf.Chunks), func(k int) bool { return xf.Chunks[k].Start > t.Start }) - 1
	return x, k, k >= 0 && t.Start < xf.Chunks[k].End
}

// firstRange is firstRanges(a, ·, 1)[0] without its allocations: the fetch range of a's first
// term (false when there is none, which a valid answer always has).
func firstRange(a *recon.Answer) (readAheadRange, bool) {
	for i := 0; i < a.Len() && i < 4; i++ {
		if r, ok := rangeOf(a, i); ok {
			return r, true
		}
	}
	return readAheadRange{}, false
}

// lastRange is the fetch range of a's last term, like firstRange.
func lastRange(a *recon.Answer) (readAheadRange, bool) {
	for i := a.Len() - 1; i >= 0 && i >= a.Len()-4; i-- {
		if r, ok := rangeOf(a, i); ok {
			return r, true
		}
	}
	return readAheadRange{}, false
}

// rangeOf is the fetch range holding term i of a.
func rangeOf(a *recon.Answer, i int) (readAheadRange, bool) {
	x, k, ok := termRange(a, i)
	if !ok {
		return readAheadRange{}, false
	}
	xf := &a.Xorbs[x]
	return readAheadRange{h: xf.Hash, start: xf.Chunks[k].Start, end: xf.Chunks[k].End,
		off: int64(xf.Bytes[k].Start)}, true
}
