// Package datacache is the edge's xorb data cache: serialized chunks of xorbs on local disk,
// bounded in bytes, filled from the origin and verified before any byte is visible.
//
//	ReadRange(l, start, end) ─► chunk-aligned segments of ~SegmentBytes covering [start, end)
//	      │ each segment
//	      ├─ on disk and verified ─────────────────────────────────► read the file (hit)
//	      └─ otherwise ─► the segment's one flight (flight.go), ≤ FillParallelism per Range,
//	                      the first chain first (flight.ramp)
//	                        ├─ on disk, not yet verified since Open ─► verify ─► read the file
//	                        └─ Fetcher, under context.WithoutCancel + FillTimeout
//	                             ─► pooled receive buffer ─► each chunk verified as it completes
//	                             ─► appended to the temp file ─► readable at once (stream-through)
//	                             ─► rename; a failed transfer resumes at the first
//	                                unverified chunk (fillAttempts in all)
//
// ReadRange returns once the range's first bytes are verified; later bytes are read as their
// fills verify them. Receive buffers come from a pool with a ceiling (Options.BufferMemory) and
// are held only while a fill runs: readers read the fill's file, so xorb bytes never sit in the
// heap for a slow client.
//
// Fill granularity: segment k of a xorb is the chunks whose first stored byte lies in
// [k·SegmentBytes, (k+1)·SegmentBytes), fetched whole. A ranged read therefore pulls at most
// one partial segment's worth of extra bytes at each end from the origin, once, and neighbours
// reading nearby chunks share it. Segments depend only on the layout and the segment size, so
// concurrent requests with different ranges still collapse onto the same fills.
//
// Trust: the layout passed in is trusted (the caller checked l.Verify()). Origin bytes are
// verified chunk by chunk against it before they are written or read; a failed or partial
// fill leaves nothing behind (temp file, removed on failure; renamed on success, without
// fsync: see store.go).
// After a restart, a segment file whose size matches its name is indexed but not trusted until
// its first read re-verifies it against the layout (lazy, so start-up costs one directory
// scan); a file that fails is removed and refilled.
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
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"

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
	// FillParallelism is how many segments one ReadRange has filling at once;
	// DefaultFillParallelism when zero.
	FillParallelism int
	// BufferMemory is the ceiling on the receive buffers of all running fills together (fills
	// wait for a buffer beyond it); DefaultBufferMemory when zero. Readers read verified bytes
	// from the fill's file, not from these buffers.
	BufferMemory int64
	// PrefetchSegments bounds the read-ahead fills (Prefetch) running at once;
	// DefaultPrefetchSegments when zero.
	PrefetchSegments int
	// TimeoutErrors are the Fetcher's errors that mean "the origin was too slow" (counted under
	// reason "timeout"; context.DeadlineExceeded always is).
	TimeoutErrors []error
	// Registerer receives the xet_edge_datacache_* metrics; nil registers nothing.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Cache is the verified on-disk xorb byte cache. It is safe for concurrent use.
type Cache struct {
	o    Options
	log  *slog.Logger
	idx  *index
	m    *metrics
	pool *pool
	pre  prefetcher

	// closing is cancelled by Close and stops running fills; mu guards closed and the
	// start of fills so that Close can wait for all of them.
	closing context.Context
	stop    context.CancelFunc
	mu      sync.Mutex
	closed  bool
	fills   sync.WaitGroup
	flights map[key]*flight // running fills, by segment; guarded by mu
	seq     uint64          // the last flight's number (flight.seq); guarded by mu
	gate    *gate           // orders the fills' verification and writes by need (gate.go)
	// demanded counts the running flights of bytes a client reads next (flight.demanded) and
	// idle is closed while it is 0 (PrefetchIdle waits on it); both guarded by mu.
	demanded int
	idle     chan struct{}
	// chainMax bounds the bytes of one chained origin request (chainBytes; tests lower it).
	chainMax int64
	// rampWait bounds how long a read or read-ahead holds its later chains back for its first
	// chain's first bytes (DefaultRampWait; tests change it).
	rampWait time.Duration
}

// Open prepares o.Dir (removing unfinished fills) and indexes the segment files a previous run
// left there, evicting down to MaxBytes. ctx bounds nothing yet; it is taken for symmetry with
// the other constructors and future use.
func Open(ctx context.Context, o Options) (*Cache, error) {
	if o.Dir == "" || o.MaxBytes <= 0 || o.Fetcher == nil {
		return nil, errors.New("datacache: Dir, MaxBytes > 0 and Fetcher are required")
	}
	if o.SegmentBytes < 0 || o.FillTimeout < 0 || o.FillParallelism < 0 || o.BufferMemory < 0 {
		return nil, errors.New("datacache: SegmentBytes, FillTimeout, FillParallelism and BufferMemory must not be negative")
	}
	if o.PrefetchSegments <= 0 {
		o.PrefetchSegments = DefaultPrefetchSegments
	}
	if o.BufferMemory == 0 {
		o.BufferMemory = DefaultBufferMemory
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
	c := &Cache{o: o, log: o.Logger, idx: newIndex(o.Dir, o.MaxBytes, o.SegmentBytes), pool: newPool(o.BufferMemory),
		flights: make(map[key]*flight), gate: newGate(runtime.GOMAXPROCS(0) - 1), idle: closedChan(), chainMax: chainBytes, rampWait: DefaultRampWait, pre: prefetcher{sem: semaphore.NewWeighted(int64(o.PrefetchSegments))}}
	evicted, removed, err := c.idx.load()
	if err != nil {
		return nil, fmt.Errorf("datacache: open %s: %w", o.Dir, err)
	}
	c.m = newMetrics(o.Registerer, c.idx, c.pool)
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

// ReadRange is ReadBytes as a stream, for serving large ranges without buffering them. Cached
// segments are opened at once (held open, so eviction cannot take them away); missed segments
// are filled in order, at most FillParallelism at a time for this Range, and their bytes are
// readable as soon as their chunks are verified (stream-through). ReadRange returns when the
// first bytes of the range are verified, so that a failure to start (origin unreachable, first
// chunk corrupt) is still an error here; a later fill's failure is returned by Read. Same
// contract and errors as ReadBytes. The caller must Close the Range, which also stops launching
// fills it no longer needs (fills already running go on). Bytes are counted as served when the
// Range is returned.
func (c *Cache) ReadRange(ctx context.Context, l *xorb.Layout, start, end int64) (*Range, error) {
	r, err := requestSpan(l, start, end)
	if err != nil {
		return nil, err
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	began := time.Now()
	segs := segments(l, r, c.o.SegmentBytes)
	rr := &Range{ctx: ctx, parts: make([]part, len(segs)), left: r.len()}
	var missing []int
	for i, s := range segs {
		lo, hi := max(r.start, s.start), min(r.end, s.end)
		if f := c.openCached(l.Hash, s); f != nil {
			rr.parts[i] = part{f: f, off: lo - s.start, n: hi - lo}
			c.m.hits.Inc()
		} else {
			rr.parts[i] = part{off: lo - s.start, n: hi - lo, rdy: make(chan struct{})}
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		var lctx context.Context
		lctx, rr.cancel = context.WithCancel(ctx)
		rr.launched = make(chan struct{})
		c.launch(lctx, l, segs, rr, missing)
		if err := rr.waitFirst(); err != nil {
			rr.Close()
			return nil, err
		}
		c.m.missFirstByte.Observe(time.Since(began).Seconds())
	}
	c.m.served.Add(float64(r.len()))
	return rr, nil
}

// waitFirst waits until the Range's first byte is verified.
func (r *Range) waitFirst() error {
	pt := &r.parts[0]
	_, _, _, err := r.source(pt)
	return err
}

// launch gives the missed parts of rr their flights, in order: consecutive missed segments in
// chains of up to chainBytes (c.chainMax), one origin request each (chain.go), with at most FillParallelism
// chains unfinished at once. The first chain is started (or joined) before launch returns, so
// that the caller waits on its flight directly; the others are started by a goroutine, which
// closes rr.launched when it is done, once the first chain has its first bytes or rampWait has
// passed (flight.ramp). Starting goroutines readies them ahead of the caller on a
// busy processor, and a first byte that waited behind a launcher starting dozens of fills came
// milliseconds late (perf/BENCHMARKS.md, 2026-12-04 first byte over TLS). The launcher stops
// when ctx ends (the Range was closed or its request ended): the parts it did not reach fail
// with ctx's error.
func (c *Cache) launch(ctx context.Context, l *xorb.Layout, segs []span, rr *Range, missing []int) {
	slots := make(chan struct{}, c.o.FillParallelism)
	ss := make([]span, len(missing))
	for g, i := range missing {
		ss[g] = segs[i]
	}
	groups := c.chains(ss)
	k := 0 // the first part of the next chain, in missing
	start := func(cs []span) {
		group := missing[k : k+len(cs)]
		k += len(cs)
		fls, err := c.acquireChain(l, cs, true, true)
		if err != nil {
			for _, i := range group {
				rr.parts[i].err = err
				close(rr.parts[i].rdy)
			}
			<-slots
			return
		}
		for g, i := range group {
			rr.parts[i].fl = fls[g]
			close(rr.parts[i].rdy)
		}
		go func() {
			for _, fl := range fls {
				<-fl.doneCh // bounded by the fill's timeout
			}
			<-slots
		}()
	}
	slots <- struct{}{} // an empty channel of capacity ≥ 1
	start(groups[0])
	first := &rr.parts[missing[0]]
	go func() {
		defer close(rr.launched)
		if len(groups) > 1 && first.err == nil {
			first.fl.ramp(ctx, c.rampWait)
		}
		for _, cs := range groups[1:] {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				for _, j := range missing[k:] {
					rr.parts[j].err = fmt.Errorf("datacache: xorb %s: %w", l.Hash, context.Cause(ctx))
					close(rr.parts[j].rdy)
				}
				return
			}
			start(cs)
		}
	}()
}

func closedChan() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
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
	f, err := openRead(c.idx.path(k))
	if err != nil {
		return nil // evicted since the lookup, or removed behind our back
	}
	if info, err := f.Stat(); err != nil || info.Size() != k.len {
		f.Close()
		return nil
	}
	return f
}
