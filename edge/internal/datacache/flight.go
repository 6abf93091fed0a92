package datacache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// flight is the one fill of a segment that every reader missing it shares (stream-through):
//
//	origin answer ─► receive buffer (pool) ─► complete chunks verified ─► temp file ─► ready += n
//	                                                                        │
//	readers wait for ready > their offset, then ReadAt the file ◄───────────┘
//
// Readers never see a byte before its chunk passed verification, and never read the receive
// buffer, so a slow reader holds a file descriptor, not memory. When the last byte is verified
// the temp file is renamed into the cache; readers keep the descriptor they read
// from, so eviction or a failed rename does not disturb them.
//
// A transfer that fails (connection dropped, short answer, stall past the origin timeout,
// bytes failing verification) is retried from the first unverified chunk, up to fillAttempts
// in all; readers just wait longer. Only when every attempt failed do they get the error.
type flight struct {
	c *Cache
	l *xorb.Layout
	s span
	k key

	mu       sync.Mutex
	progress chan struct{} // closed and replaced whenever ready, err or done change
	file     *os.File      // the file readers read: the temp file (or, found on disk, the segment file)
	files    []*os.File    // every file opened, closed when the last reference goes
	ready    int64         // verified bytes at the front of file
	done     bool
	err      error
	fetched  bool // the bytes came from the origin (a miss), not from disk
	refs     int  // readers holding the flight, plus the fill itself
	joined   int  // Range parts that acquired the flight (counted as hits or misses at its end)
	// demanded: a read joined the flight, or Prefetch started or joined it (the first ranges of
	// an answer: what its client reads next), not only PrefetchIdle; counted in Cache.demanded.
	// Set under c.mu, read by the gate without it.
	demanded atomic.Bool
	doneCh   chan struct{}
	chain    *chain // set when the flight reads a chained origin answer (chain.go); nil: its own

	// waiting counts readers blocked in wait; publish yields the processor to them (see publish),
	// and the gate serves this fill first (gate.go).
	waiting atomic.Int32
	// seq numbers flights in the order they were started (the gate's order among fills nobody
	// waits for).
	seq uint64

	// lent is the file whose offset one reader has borrowed for sendfile (lendOffset); nil:
	// none. Nothing else uses a flight file's offset: the fill writes with WriteAt, readers
	// read with ReadAt.
	lent *os.File
}

// fillAttempts is how many origin transfers one fill may take before it fails.
const fillAttempts = 3

// release drops one reference; the last one closes the flight's files.
func (fl *flight) release() {
	fl.mu.Lock()
	fl.refs--
	var files []*os.File
	if fl.refs == 0 {
		files, fl.files = fl.files, nil
	}
	fl.mu.Unlock()
	for _, f := range files {
		f.Close()
	}
}

// lendOffset lends f, the flight's file, to one reader that needs a descriptor with an offset
// of its own (Range.writeFilling: sendfile reads from the file's offset), sparing it a reopen.
// It returns false when f is not the flight's file or another reader has it; give it back with
// returnOffset.
func (fl *flight) lendOffset(f *os.File) bool {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if f == nil || f != fl.file || fl.lent != nil {
		return false
	}
	fl.lent = f
	return true
}

func (fl *flight) returnOffset(f *os.File) {
	fl.mu.Lock()
	if fl.lent == f {
		fl.lent = nil
	}
	fl.mu.Unlock()
}

// publish updates the flight's state under its lock and wakes the waiting readers. When it
// made the flight's first bytes readable and a reader was waiting for them, the fill then
// yields the processor: it would otherwise go on reading and verifying whatever the origin's
// answer already holds (milliseconds on a busy core, until the socket runs dry or the scheduler
// preempts it) while the woken reader, a client waiting for its first byte, stands in the run
// queue. Later publishes do not yield: a reader that keeps up with the fill loses nothing by
// reading a little later, in larger pieces.
func (fl *flight) publish(update func()) {
	fl.mu.Lock()
	before := fl.ready
	update()
	first := before == 0 && fl.ready > 0
	close(fl.progress)
	fl.progress = make(chan struct{})
	fl.mu.Unlock()
	if first && fl.waiting.Load() > 0 {
		runtime.Gosched()
	}
}

// wait blocks until more than off bytes are ready, the flight failed, or ctx ends. It returns
// the bytes ready past off and the file to read them from.
func (fl *flight) wait(ctx context.Context, off int64) (*os.File, int64, error) {
	for {
		fl.mu.Lock()
		f, ready, err, ch := fl.file, fl.ready, fl.err, fl.progress
		fl.mu.Unlock()
		if ready > off {
			return f, ready - off, nil
		}
		if err != nil {
			return nil, 0, err
		}
		fl.waiting.Add(1)
		select {
		case <-ch:
		case <-ctx.Done():
			fl.waiting.Add(-1)
			return nil, 0, fmt.Errorf("datacache: xorb %s bytes [%d,%d): %w", fl.l.Hash, fl.s.start, fl.s.end, context.Cause(ctx))
		}
		fl.waiting.Add(-1)
	}
}

// run is the fill. It outlives every reader: it runs under FillTimeout on the cache's own
// context (detached from requests), which Close cancels.
func (fl *flight) run() {
	c := fl.c
	start := time.Now()
	// c.closing is already detached from every request; Close cancels it.
	ctx, cancel := context.WithTimeout(c.closing, c.o.FillTimeout)
	defer cancel()
	err := fl.fill(ctx)
	if fl.chain != nil && fl.s.end == fl.chain.end {
		fl.chain.done() // the chain's last flight: its buffer and answer go before the fill counts as ended
	}
	c.mu.Lock()
	delete(c.flights, fl.k) // no part joins after this
	if fl.demanded.Load() {
		c.undemand()
	}
	c.mu.Unlock()
	fl.mu.Lock()
	joined := fl.joined
	fl.mu.Unlock()
	if fl.fetched {
		c.m.misses.Add(float64(joined))
	} else {
		c.m.hits.Add(float64(joined))
	}
	fl.publish(func() {
		if err != nil && fl.ready < fl.s.len() {
			fl.err = err
		}
		fl.done = true
	})
	close(fl.doneCh)
	c.m.inFlight.Dec()
	if fl.fetched {
		c.m.fillSeconds.Observe(time.Since(start).Seconds())
	}
	fl.release()
	c.fills.Done()
}

// fill re-checks the index (a fill may have finished between the caller's lookup and this
// flight; a file found at Open needs its first verification), then fetches, verifies and stores.
func (fl *flight) fill(ctx context.Context) error {
	c := fl.c
	if present, _ := c.idx.get(fl.k); present {
		if err := fl.fromDisk(ctx); err == nil {
			return nil
		}
	}
	return fl.fetch(ctx)
}

// fromDisk serves the indexed segment file, verifying it first if this process has not. A file
// that cannot be read or fails verification is dropped (the caller then fetches).
func (fl *flight) fromDisk(ctx context.Context) error {
	c := fl.c
	f, err := openRead(c.idx.path(fl.k))
	if err != nil {
		c.idx.drop(fl.k)
		return err
	}
	fl.mu.Lock()
	fl.files = append(fl.files, f)
	fl.mu.Unlock()
	if _, verified := c.idx.get(fl.k); verified {
		if info, err := f.Stat(); err == nil && info.Size() == fl.k.len {
			fl.publish(func() { fl.file, fl.ready = f, fl.k.len })
			return nil
		}
	}
	fl.publish(func() { fl.file, fl.ready = f, 0 })
	buf, err := c.pool.get(ctx, fl.bufferSize())
	if err != nil {
		return err
	}
	v := fl.newVerifier(nil, buf)
	err = v.copyFrom(ctx, io.NewSectionReader(f, 0, fl.k.len))
	c.pool.put(buf)
	if err == nil && v.done() {
		c.idx.markVerified(fl.k)
		return nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	if errors.Is(err, ErrCorrupt) {
		c.m.diskVerifyFailures.Inc()
	}
	c.log.WarnContext(ctx, "cached segment unusable; refilling", "segment", fl.k.String(), "err", err)
	c.idx.drop(fl.k)
	fl.publish(func() { fl.file, fl.ready = nil, 0 }) // the origin's bytes go to a new file
	return err
}

// fetch reads the segment from the origin into a temp file, verifying each chunk before
// readers may see it, retrying a failed transfer from the first unverified chunk; then it
// renames the file into the cache.
func (fl *flight) fetch(ctx context.Context) error {
	c := fl.c
	tmp, err := createTemp(c.idx.tmp())
	if err != nil {
		c.m.fillFailures.WithLabelValues("disk").Inc()
		return fmt.Errorf("datacache: fill xorb %s bytes [%d,%d): %w", fl.l.Hash, fl.s.start, fl.s.end, err)
	}
	keep := false
	defer func() {
		if !keep {
			_ = os.Remove(tmp.Name())
		}
	}()
	preallocate(tmp, fl.s.len())
	fl.mu.Lock()
	fl.files = append(fl.files, tmp)
	fl.fetched = true
	fl.mu.Unlock()
	fl.publish(func() { fl.file, fl.ready = tmp, 0 })

	buf, err := fl.getBuffer(ctx)
	if err != nil {
		c.m.fillFailures.WithLabelValues("timeout").Inc()
		return fmt.Errorf("datacache: fill xorb %s bytes [%d,%d): wait for a buffer: %w", fl.l.Hash, fl.s.start, fl.s.end, err)
	}
	v := fl.newVerifier(tmp, buf)
	for attempt := 1; ; attempt++ {
		err = fl.transfer(ctx, v)
		if err == nil {
			break
		}
		reason := c.failureReason(err)
		if attempt == fillAttempts || ctx.Err() != nil {
			fl.putBuffer(buf)
			c.m.fillFailures.WithLabelValues(reason).Inc()
			c.log.WarnContext(ctx, "fill failed", "segment", fl.k.String(), "verified", v.pos, "attempts", attempt, "err", err)
			return err
		}
		c.m.fillRetries.WithLabelValues(reason).Inc()
		c.log.WarnContext(ctx, "origin transfer failed; retrying", "segment", fl.k.String(),
			"verified", v.pos, "attempt", attempt, "err", err)
	}
	fl.putBuffer(buf)
	c.m.fills.Inc()
	// Store: rename into the cache. No fsync: a segment file is a cache entry that this process
	// verified; after a crash every file found at Open is re-verified before its first use (and
	// one that lost its bytes is dropped and refilled), so syncing would buy nothing but CPU and
	// latency (~10 % of a cold fill's CPU). A failure is counted and logged; readers keep reading
	// the temp file's verified bytes, the segment is just not cached.
	evicted, err := c.idx.commit(fl.k, tmp.Name())
	c.m.evictions.Add(float64(evicted))
	if err != nil {
		c.m.storeErrors.Inc()
		c.log.WarnContext(ctx, "cannot cache segment", "segment", fl.k.String(), "err", err)
		return nil
	}
	keep = true
	return nil
}

// transfer is one origin request for the segment's unverified rest (or, chained, the
// segment's part of the chain's request).
func (fl *flight) transfer(ctx context.Context, v *verifier) error {
	c := fl.c
	if fl.chain != nil {
		return fl.chain.transfer(ctx, fl, v)
	}
	from := fl.s.start + v.pos
	rc, err := c.o.Fetcher.FetchXorbRange(ctx, fl.l.Hash, from, fl.s.end)
	if err != nil {
		return fmt.Errorf("datacache: fetch xorb %s bytes [%d,%d): %w", fl.l.Hash, from, fl.s.end, err)
	}
	defer rc.Close()
	v.resetBuffer()
	if err := v.copyFrom(ctx, rc); err != nil {
		return err
	}
	if !v.done() {
		return fmt.Errorf("datacache: read xorb %s bytes [%d,%d): %w", fl.l.Hash, from, fl.s.end, io.ErrUnexpectedEOF)
	}
	return nil
}

// bufferSize is the receive buffer the segment needs: its largest chunk twice, at least
// bufferBytes.
func (fl *flight) bufferSize() int {
	biggest := int64(0)
	for i := fl.s.a; i < fl.s.b; i++ {
		a, b := fl.l.ByteRange(i, i+1)
		biggest = max(biggest, int64(b-a))
	}
	return max(bufferBytes, int(2*biggest))
}

// failureReason is the metrics label of a failed transfer.
func (c *Cache) failureReason(err error) string {
	switch {
	case errors.Is(err, ErrCorrupt):
		return "corrupt"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "short"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	for _, t := range c.o.TimeoutErrors {
		if errors.Is(err, t) {
			return "timeout"
		}
	}
	return "error"
}

// verifier turns a stream of the segment's stored bytes into verified bytes in a file: it
// verifies every chunk that is complete in buf, appends it to out (nil: the bytes are already
// there, as when re-verifying a cached file) and publishes the new ready length.
type verifier struct {
	fl    *flight
	out   *os.File
	buf   []byte
	off   int    // start of the unverified bytes in buf, at stored offset s.start+pos
	n     int    // end of the bytes in buf
	pos   int64  // verified bytes so far, relative to the segment start
	chunk uint32 // first unverified chunk
}

func (fl *flight) newVerifier(out *os.File, buf []byte) *verifier {
	return &verifier{fl: fl, out: out, buf: buf, chunk: fl.s.a}
}

func (v *verifier) done() bool { return v.chunk == v.fl.s.b }

// resetBuffer forgets unverified bytes of an earlier attempt.
func (v *verifier) resetBuffer() { v.off, v.n = 0, 0 }

// copyFrom reads r until the segment is complete, EOF or an error, verifying and publishing as
// chunks complete. Bytes past the segment's end are an error (a misbehaving origin).
func (v *verifier) copyFrom(ctx context.Context, r io.Reader) error {
	fl := v.fl
	for !v.done() {
		if len(v.buf)-v.n < len(v.buf)/2 && v.off > 0 {
			// Move the incomplete chunk to the front only when half the buffer is used up,
			// not after every read (the buffer holds twice the largest chunk).
			v.n = copy(v.buf, v.buf[v.off:v.n])
			v.off = 0
		}
		if v.n == len(v.buf) {
			return fmt.Errorf("%w: xorb %s chunk %d does not fit the receive buffer", ErrCorrupt, fl.l.Hash, v.chunk)
		}
		m, err := r.Read(v.buf[v.n:])
		v.n += m
		if m > 0 {
			if v.out != nil {
				fl.c.m.fillBytes.Add(float64(m))
			}
			if verr := v.verifyComplete(ctx); verr != nil {
				return verr
			}
		}
		if err == io.EOF {
			if !v.done() {
				return fmt.Errorf("datacache: xorb %s: answer ended %d bytes short: %w", fl.l.Hash, fl.s.len()-v.pos-int64(v.n-v.off), io.ErrUnexpectedEOF)
			}
			break
		}
		if err != nil {
			return fmt.Errorf("datacache: read xorb %s bytes [%d,%d): %w", fl.l.Hash, fl.s.start+v.pos, fl.s.end, err)
		}
		if !v.done() && ctx.Err() != nil {
			// A segment verified to its end is kept even when the fill's context ends now
			// (the cache closing right after its last reader returned): it is complete.
			return context.Cause(ctx)
		}
	}
	if v.n > v.off {
		return fmt.Errorf("%w: xorb %s: %d bytes past the requested range", ErrCorrupt, fl.l.Hash, v.n-v.off)
	}
	return nil
}

// chunkVerifiers are the keyed BLAKE3 hashers (and decode buffers) of verifyComplete, shared by
// all fills: one per call of verifyComplete would allocate ~10 KB per read of an origin answer
// (perf/BENCHMARKS.md, 2026-12-02 edge CPU per cold GiB, second pass).
var chunkVerifiers = sync.Pool{New: func() any { return new(xorb.Verifier) }}

// verifyComplete verifies the chunks complete in buf, writes them out and publishes them. The
// work is done holding the cache's gate (gate.go).
func (v *verifier) verifyComplete(ctx context.Context) error {
	fl := v.fl
	base := fl.s.start + v.pos // stored offset of buf[off]
	end := v.chunk
	for end < fl.s.b && int64(fl.l.StoredEnds[end]) <= base+int64(v.n-v.off) {
		end++
	}
	if end == v.chunk {
		return nil
	}
	cs, ce := fl.l.ByteRange(v.chunk, end)
	m := int(ce - cs)
	data := v.buf[v.off : v.off+m]
	g := fl.c.gate
	if err := g.acquire(ctx, fl); err != nil {
		return err
	}
	xv := chunkVerifiers.Get().(*xorb.Verifier)
	err := xv.VerifyRange(data, fl.l, v.chunk, end)
	chunkVerifiers.Put(xv)
	if err != nil {
		g.release()
		if v.out != nil {
			fl.c.m.verifyFailures.Inc()
		}
		return fmt.Errorf("%w: xorb %s chunks [%d,%d): %w", ErrCorrupt, fl.l.Hash, v.chunk, end, err)
	}
	if v.out != nil {
		if _, err := v.out.WriteAt(data, v.pos); err != nil {
			g.release()
			return fmt.Errorf("datacache: write fill of xorb %s: %w", fl.l.Hash, err)
		}
	}
	g.release()
	v.off += m
	if v.off == v.n {
		v.off, v.n = 0, 0
	}
	v.pos += int64(m)
	v.chunk = end
	pos := v.pos
	fl.publish(func() { fl.ready = pos })
	return nil
}
