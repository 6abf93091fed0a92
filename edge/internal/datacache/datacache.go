// Package datacache is the edge's xorb data cache: serialized chunks of xorbs on local disk,
// bounded in bytes, filled from the origin and verified before any byte is visible.
//
//	ReadBytes(l, start, end) ─► chunk-aligned segments of ~SegmentBytes covering [start, end)
//	      │ each segment
//	      ├─ on disk and verified ─────────────────────────────────────────► copy out (hit)
//	      └─ otherwise ─► singleflight per segment (re-checks the index inside the flight)
//	                        ├─ on disk, not yet verified since Open ─► VerifyRange ─► copy out
//	                        └─ Fetcher, under context.WithoutCancel + FillTimeout
//	                             ─► VerifyRange (every chunk) ─► tmp file, fsync, rename ─► copy out
//
// Fill granularity: segment k of a xorb is the chunks whose first stored byte lies in
// [k·SegmentBytes, (k+1)·SegmentBytes), fetched whole. A ranged read therefore pulls at most
// one partial segment's worth of extra bytes at each end from the origin, once, and neighbours
// reading nearby chunks share it. Segments depend only on the layout and the segment size, so
// concurrent requests with different ranges still collapse onto the same fills.
//
// Trust: the layout passed in is trusted (the caller checked l.Verify()). Origin bytes are
// verified chunk by chunk against it before they are written; a failed or partial fill leaves
// nothing behind (temp file, fsync, rename). After a restart, a segment file whose size matches
// its name is indexed but not trusted until its first read re-verifies it against the layout
// (lazy, so start-up costs one directory scan); a file that fails is removed and refilled.
// Bytes verified by this process are then served from disk without hashing again.
//
// Eviction is LRU over segment files, accounted in their byte lengths; the index lives in
// memory and is rebuilt from the directory at Open (oldest file first).
package datacache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// Fetcher reads raw bytes [start, end) of a stored xorb object from the origin
// (*originapi.Client). The caller closes the reader. Its errors are returned wrapped.
type Fetcher interface {
	FetchXorbRange(ctx context.Context, h hash.Hash, start, end int64) (io.ReadCloser, error)
}

var (
	// ErrBadRange: the requested range is empty, outside the chunk area, or not on chunk
	// boundaries of the layout.
	ErrBadRange = errors.New("datacache: range not on chunk boundaries")
	// ErrCorrupt: the origin sent bytes that failed verification against the layout. Nothing
	// was cached or served; the error also wraps the xorb package's reason.
	ErrCorrupt = errors.New("datacache: origin sent corrupt xorb bytes")
	// ErrClosed: the cache was closed.
	ErrClosed = errors.New("datacache: closed")
)

// Defaults for zero Options fields. The segment size trades read amplification against the
// number of files and origin round trips: a cold read of a 16-128 chunk term pulls ~1.8× its
// bytes at 1 MiB, ~2.5× at 2 MiB and ~3.9× at 4 MiB (BenchmarkColdAmplification); a 1 TB cache
// of 2 MiB segments is ~500k files and ~100 MB of index.
const (
	DefaultSegmentBytes    = 2 << 20
	DefaultFillTimeout     = 60 * time.Second
	DefaultFillParallelism = 8
)

// Options configure a Cache. Dir, MaxBytes and Fetcher are required.
type Options struct {
	// Dir holds the cache; it is created if missing and owned by this Cache (one per Dir).
	Dir string
	// MaxBytes bounds the bytes of cached segment files.
	MaxBytes int64
	Fetcher  Fetcher
	// SegmentBytes is the fill granularity; DefaultSegmentBytes when zero.
	SegmentBytes int64
	// FillTimeout bounds one fill (one origin transfer, which may serve many callers); it runs
	// regardless of the callers' contexts. DefaultFillTimeout when zero.
	FillTimeout time.Duration
	// FillParallelism is how many segments one ReadBytes fills at once;
	// DefaultFillParallelism when zero.
	FillParallelism int
	// Registerer receives the xet_edge_datacache_* metrics; nil registers nothing.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Cache is the verified on-disk xorb byte cache. It is safe for concurrent use.
type Cache struct {
	o     Options
	log   *slog.Logger
	idx   *index
	m     *metrics
	group singleflight.Group

	// closing is cancelled by Close and stops running fills; mu guards closed and the
	// start of fills so that Close can wait for all of them.
	closing context.Context
	stop    context.CancelFunc
	mu      sync.Mutex
	closed  bool
	fills   sync.WaitGroup
}

// Open prepares o.Dir (removing unfinished fills) and indexes the segment files a previous run
// left there, evicting down to MaxBytes. ctx bounds nothing yet; it is taken for symmetry with
// the other constructors and future use.
func Open(ctx context.Context, o Options) (*Cache, error) {
	if o.Dir == "" || o.MaxBytes <= 0 || o.Fetcher == nil {
		return nil, errors.New("datacache: Dir, MaxBytes > 0 and Fetcher are required")
	}
	if o.SegmentBytes < 0 || o.FillTimeout < 0 || o.FillParallelism < 0 {
		return nil, errors.New("datacache: SegmentBytes, FillTimeout and FillParallelism must not be negative")
	}
	if o.SegmentBytes == 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.FillTimeout == 0 {
		o.FillTimeout = DefaultFillTimeout
	}
	if o.FillParallelism == 0 {
		o.FillParallelism = DefaultFillParallelism
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cache{o: o, log: o.Logger, idx: newIndex(o.Dir, o.MaxBytes)}
	evicted, removed, err := c.idx.load()
	if err != nil {
		return nil, fmt.Errorf("datacache: open %s: %w", o.Dir, err)
	}
	c.m = newMetrics(o.Registerer, c.idx)
	c.m.evictions.Add(float64(evicted))
	c.closing, c.stop = context.WithCancel(context.WithoutCancel(ctx))
	c.log.InfoContext(ctx, "data cache opened", "dir", o.Dir, "bytes", c.idx.bytes(),
		"max_bytes", o.MaxBytes, "evicted", evicted, "removed_invalid", removed)
	return c, nil
}

// Close stops running fills, waits for them, and makes later reads fail with ErrClosed.
// Cached files stay on disk for the next Open.
func (c *Cache) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.stop()
	c.fills.Wait()
	return nil
}

// ReadBytes returns the serialized chunks covering stored bytes [start, end) of the xorb
// described by l (l.Verify() already passed); start and end must lie on chunk boundaries of l
// (else an error wrapping ErrBadRange). Every byte returned was verified against l's chunk
// hashes. Misses fill from the Fetcher; concurrent misses of a segment collapse into one origin
// transfer, which continues if ctx ends (this call then returns ctx's error). Errors wrap
// ErrBadRange, ErrCorrupt, ErrClosed, the Fetcher's errors or context errors. The returned
// slice is the caller's.
func (c *Cache) ReadBytes(ctx context.Context, l *xorb.Layout, start, end int64) ([]byte, error) {
	rr, err := c.ReadRange(ctx, l, start, end)
	if err != nil {
		return nil, err
	}
	defer rr.Close()
	out := make([]byte, rr.Len())
	if _, err := io.ReadFull(rr, out); err != nil {
		return nil, fmt.Errorf("datacache: read cached xorb %s bytes [%d,%d): %w", l.Hash, start, end, err)
	}
	return out, nil
}

// ReadRange is ReadBytes as a stream, for serving large ranges without buffering them: it
// returns once every segment of [start, end) is on hand and verified (same contract and errors
// as ReadBytes), holding the cached files open so that eviction cannot take them away. The
// caller must Close the Range. Bytes are counted as served when the Range is returned.
func (c *Cache) ReadRange(ctx context.Context, l *xorb.Layout, start, end int64) (*Range, error) {
	r, err := requestSpan(l, start, end)
	if err != nil {
		return nil, err
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	segs := segments(l, r, c.o.SegmentBytes)
	rr := &Range{parts: make([]part, len(segs)), left: r.len()}
	var missing []int
	for i, s := range segs {
		lo, hi := max(r.start, s.start), min(r.end, s.end)
		if f := c.openCached(l.Hash, s); f != nil {
			rr.parts[i] = part{f: f, off: lo - s.start, n: hi - lo}
			c.m.hits.Inc()
		} else {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(c.o.FillParallelism)
		for _, i := range missing {
			s := segs[i]
			g.Go(func() error {
				res, err := c.fill(gctx, l, s)
				if err != nil {
					return err
				}
				if res.fetched {
					c.m.misses.Inc()
				} else {
					c.m.hits.Inc()
				}
				lo, hi := max(r.start, s.start), min(r.end, s.end)
				rr.parts[i] = part{data: res.data[lo-s.start : hi-s.start], n: hi - lo}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			rr.Close()
			return nil, err
		}
	}
	c.m.served.Add(float64(r.len()))
	return rr, nil
}

func (c *Cache) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// openCached opens segment s if it is on disk, verified by this process, and of its full
// length. Nil means: go through a fill (which re-checks).
func (c *Cache) openCached(h hash.Hash, s span) *os.File {
	k := key{h: h, start: s.start, len: s.len()}
	if present, verified := c.idx.get(k); !present || !verified {
		return nil
	}
	f, err := os.Open(c.idx.path(k))
	if err != nil {
		return nil // evicted since the lookup, or removed behind our back
	}
	if info, err := f.Stat(); err != nil || info.Size() != k.len {
		f.Close()
		return nil
	}
	return f
}

// fillResult is a flight's answer: the whole verified segment, and whether it came from the
// origin (a miss) or from disk (found by the re-check).
type fillResult struct {
	data    []byte
	fetched bool
}

// fill returns segment s, from the one flight for it. The flight outlives ctx.
func (c *Cache) fill(ctx context.Context, l *xorb.Layout, s span) (fillResult, error) {
	k := key{h: l.Hash, start: s.start, len: s.len()}
	ch := c.group.DoChan(k.String(), func() (any, error) { return c.runFill(ctx, l, s, k) })
	select {
	case res := <-ch:
		if res.Err != nil {
			return fillResult{}, res.Err
		}
		return res.Val.(fillResult), nil
	case <-ctx.Done():
		return fillResult{}, fmt.Errorf("datacache: xorb %s bytes [%d,%d): %w", l.Hash, s.start, s.end, context.Cause(ctx))
	}
}

// runFill is the body of a flight. It re-checks the index (a fill may have finished between
// the caller's lookup and this flight; a file found at Open needs its first verification),
// then fetches, verifies and stores the segment.
func (c *Cache) runFill(parent context.Context, l *xorb.Layout, s span, k key) (fillResult, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fillResult{}, ErrClosed
	}
	c.fills.Add(1)
	c.mu.Unlock()
	defer c.fills.Done()

	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), c.o.FillTimeout)
	defer cancel()
	defer context.AfterFunc(c.closing, cancel)()

	if data, ok := c.fromDisk(ctx, l, s, k); ok {
		return fillResult{data: data}, nil
	}
	data, err := c.fetch(ctx, l, s)
	if err != nil {
		return fillResult{}, err
	}
	c.m.fills.Inc()
	c.store(ctx, k, data)
	return fillResult{data: data, fetched: true}, nil
}

// fromDisk returns the indexed segment k, verifying it first if this process has not.
// A file that cannot be read or fails verification is dropped.
func (c *Cache) fromDisk(ctx context.Context, l *xorb.Layout, s span, k key) ([]byte, bool) {
	present, verified := c.idx.get(k)
	if !present {
		return nil, false
	}
	data := make([]byte, k.len)
	f, err := os.Open(c.idx.path(k))
	if err == nil {
		_, err = f.ReadAt(data, 0)
		f.Close()
	}
	if err == nil && !verified {
		if err = xorb.VerifyRange(data, l, s.a, s.b); err != nil {
			c.m.diskVerifyFailures.Inc()
		}
	}
	if err != nil {
		c.log.WarnContext(ctx, "cached segment unusable; refilling", "segment", k.String(), "err", err)
		c.idx.drop(k)
		return nil, false
	}
	c.idx.markVerified(k)
	return data, true
}

// fetch reads segment s from the origin and verifies every chunk of it.
func (c *Cache) fetch(ctx context.Context, l *xorb.Layout, s span) ([]byte, error) {
	rc, err := c.o.Fetcher.FetchXorbRange(ctx, l.Hash, s.start, s.end)
	if err != nil {
		return nil, fmt.Errorf("datacache: fetch xorb %s bytes [%d,%d): %w", l.Hash, s.start, s.end, err)
	}
	defer rc.Close()
	data := make([]byte, s.len())
	n, err := io.ReadFull(rc, data)
	c.m.fillBytes.Add(float64(n))
	if err != nil {
		return nil, fmt.Errorf("datacache: read xorb %s bytes [%d,%d): %w", l.Hash, s.start, s.end, err)
	}
	if err := xorb.VerifyRange(data, l, s.a, s.b); err != nil {
		c.m.verifyFailures.Inc()
		return nil, fmt.Errorf("%w: xorb %s bytes [%d,%d): %w", ErrCorrupt, l.Hash, s.start, s.end, err)
	}
	return data, nil
}

// store writes a verified segment: temp file, fsync, rename, index, evict. A failure is logged
// and counted; the bytes are still served from memory, just not cached.
func (c *Cache) store(ctx context.Context, k key, data []byte) {
	evicted, err := c.writeSegment(k, data)
	if err != nil {
		c.m.storeErrors.Inc()
		c.log.WarnContext(ctx, "cannot cache segment", "segment", k.String(), "err", err)
		return
	}
	c.m.evictions.Add(float64(evicted))
}

func (c *Cache) writeSegment(k key, data []byte) (evicted int, err error) {
	f, err := os.CreateTemp(c.idx.tmp(), "fill-*")
	if err != nil {
		return 0, err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return c.idx.commit(k, tmp)
}
