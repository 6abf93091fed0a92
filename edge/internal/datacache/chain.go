package datacache

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// Chained fills (issue 11, a far origin): consecutive missing segments of one read or
// read-ahead are filled by one origin request instead of one request per segment.
//
//	origin answer [seg k start, seg k+n end) ─► flight k (limited to its bytes) ─► flight k+1 ─► …
//
// Each segment is still its own flight: its own temp file, receive buffer (taken in turn, so a
// chain holds one buffer at a time), chunk-by-chunk verification, readers, timeout and retries;
// the flights of a chain run one after another on the same answer, which is positioned at the
// next flight's first byte when one ends. Per segment this saves the request's round trip and
// keeps the connection's congestion window busy instead of idling between small requests, which
// over a 100 ms path is what made a cold edge slower than the origin (perf/BENCHMARKS.md). A
// failed transfer drops the answer; the flight retries from its first unverified chunk with a new
// request to the chain's end, which the following flights then go on reading.

// chainBytes bounds the stored bytes one chained origin request asks for: 8 MiB, four default
// segments, so that a request's segments still spread over several connections and a reader of
// its last segment does not wait long for the others (docs/decisions.md, "Why 8 MiB").
const chainBytes = 8 << 20

// DefaultRampWait bounds how long the later chains of one read or read-ahead wait for the
// first chain's first verified bytes before they are requested (flight.ramp).
const DefaultRampWait = 10 * time.Millisecond

// ramp waits until the flight has its first verified bytes, has ended, ctx ends, or d passed.
//
// A read or read-ahead starts its first chain at once and the others after ramp: a cold
// download's first byte is in the first chain, and the origin answers a burst of requests in no
// particular order (its runtime readies the newest connection first), so one client's eight
// ranges of eight chains each, all asked at once, kept the first chain's answer behind up to
// sixty others for up to a quarter of a second (perf/BENCHMARKS.md, 2026-12-04 first byte over
// TLS). d caps what the ramp costs a far origin, whose first bytes take a round trip: the later
// chains then start d late, not a round trip late.
func (fl *flight) ramp(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		fl.mu.Lock()
		ch, ok := fl.progress, fl.ready > 0 || fl.done || fl.err != nil
		fl.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// chain is the origin answer the flights of one chain share. Its flights run in one goroutine,
// one at a time, so it needs no lock.
type chain struct {
	c      *Cache
	l      *xorb.Layout
	end    int64 // stored end of the chain's last segment
	rc     io.ReadCloser
	cancel context.CancelFunc
	at     int64 // stored offset rc delivers next
	// buf is the receive buffer the chain's flights pass on (one taken from the pool for the
	// whole chain): a flight must not wait for a buffer while the answer it reads stands still.
	buf []byte
}

// getBuffer is the flight's receive buffer: the chain's, if it is large enough, else a new
// one from the pool.
func (fl *flight) getBuffer(ctx context.Context) ([]byte, error) {
	if ch := fl.chain; ch != nil && ch.buf != nil {
		b := ch.buf
		ch.buf = nil
		if len(b) >= fl.bufferSize() {
			return b, nil
		}
		fl.c.pool.put(b)
	}
	return fl.c.pool.get(ctx, fl.bufferSize())
}

// putBuffer gives the buffer back: to the chain for its next flight, or to the pool.
func (fl *flight) putBuffer(b []byte) {
	if ch := fl.chain; ch != nil {
		ch.buf = b
		return
	}
	fl.c.pool.put(b)
}

// open returns the answer positioned at stored offset from, requesting [from, end) anew when
// there is none or it is elsewhere. ctx (the flight's) bounds the request: when it ends, the
// request is cancelled.
func (ch *chain) open(ctx context.Context, from int64) error {
	if ch.rc != nil && ch.at == from {
		return nil
	}
	ch.drop()
	rctx, cancel := context.WithCancel(ch.c.closing)
	stop := context.AfterFunc(ctx, cancel)
	rc, err := ch.c.o.Fetcher.FetchXorbRange(rctx, ch.l.Hash, from, ch.end)
	stop()
	if err == nil && ctx.Err() != nil {
		rc.Close()
		err = context.Cause(ctx)
	}
	if err != nil {
		cancel()
		return fmt.Errorf("datacache: fetch xorb %s bytes [%d,%d): %w", ch.l.Hash, from, ch.end, err)
	}
	ch.rc, ch.cancel, ch.at = rc, cancel, from
	return nil
}

// done ends the chain: closes its answer and returns its buffer. Idempotent.
func (ch *chain) done() {
	ch.drop()
	if ch.buf != nil {
		ch.c.pool.put(ch.buf)
		ch.buf = nil
	}
}

// drop closes the answer (after a failure, or at the chain's end).
func (ch *chain) drop() {
	if ch.rc != nil {
		ch.rc.Close()
		ch.cancel()
		ch.rc, ch.cancel = nil, nil
	}
}

// transfer is flight fl's part of the chain's answer: its unverified rest, from the shared
// answer (or a new request to the chain's end). ctx (the flight's) bounds the reads: when it
// ends, the answer is cancelled.
func (ch *chain) transfer(ctx context.Context, fl *flight, v *verifier) error {
	from := fl.s.start + v.pos
	if err := ch.open(ctx, from); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, ch.cancel)
	defer stop()
	v.resetBuffer()
	err := v.copyFrom(ctx, io.LimitReader(ch.rc, fl.s.end-from))
	if err == nil && !v.done() {
		err = fmt.Errorf("datacache: read xorb %s bytes [%d,%d): %w", fl.l.Hash, from, fl.s.end, io.ErrUnexpectedEOF)
	}
	if err == nil && fl.s.end == ch.end {
		// The chain's last bytes: anything more is a misbehaving origin.
		var one [1]byte
		if n, _ := io.ReadFull(ch.rc, one[:]); n > 0 {
			err = fmt.Errorf("%w: xorb %s: bytes past the requested range", ErrCorrupt, fl.l.Hash)
		}
	}
	if err != nil {
		ch.drop()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return err
	}
	ch.at = fl.s.end
	return nil
}

// runChain runs the new flights fls (consecutive segments, none started) one after another on
// one origin answer.
func (c *Cache) runChain(l *xorb.Layout, fls []*flight) {
	ch := &chain{c: c, l: l, end: fls[len(fls)-1].s.end}
	defer ch.done()
	for _, fl := range fls {
		fl.chain = ch
		fl.run()
	}
}

// acquireChain returns the flights of consecutive segments ss of l: it joins the running ones
// and starts the missing ones, one chain (one origin request) per run of consecutive new
// flights. The caller holds one reference to each returned flight and releases it with release.
// read: the caller is a read (counted as a hit or a miss when the flight ends), not read-ahead.
// wanted: the bytes are what a client reads next (a read, or read-ahead of an answer's first
// ranges): the flights count as demanded (PrefetchIdle waits for them; the gate serves them
// before idle read-ahead).
func (c *Cache) acquireChain(l *xorb.Layout, ss []span, read, wanted bool) ([]*flight, error) {
	joined := 0
	if read {
		joined = 1
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	out := make([]*flight, len(ss))
	var runs [][]*flight
	var run []*flight
	for i, s := range ss {
		k := key{h: l.Hash, start: s.start, len: s.len()}
		if fl := c.flights[k]; fl != nil {
			if wanted {
				c.demand(fl)
			}
			fl.mu.Lock()
			fl.refs++
			fl.joined += joined
			fl.mu.Unlock()
			out[i] = fl
			if run != nil {
				runs, run = append(runs, run), nil
			}
			continue
		}
		c.seq++
		fl := &flight{c: c, l: l, s: s, k: k, progress: make(chan struct{}), doneCh: make(chan struct{}), refs: 2, joined: joined, seq: c.seq}
		c.flights[k] = fl
		if wanted {
			c.demand(fl)
		}
		c.fills.Add(1)
		c.m.inFlight.Inc()
		out[i] = fl
		run = append(run, fl)
	}
	if run != nil {
		runs = append(runs, run)
	}
	c.mu.Unlock()
	for _, r := range runs {
		if len(r) == 1 {
			go r[0].run()
		} else {
			go c.runChain(l, r)
		}
	}
	return out, nil
}

// chains splits consecutive segments into groups of at most c.chainMax bytes (at least one
// segment each), in order.
func (c *Cache) chains(ss []span) [][]span {
	var out [][]span
	for len(ss) > 0 {
		n, size := 1, ss[0].len()
		for n < len(ss) && size+ss[n].len() <= c.chainMax && ss[n].start == ss[n-1].end {
			size += ss[n].len()
			n++
		}
		out = append(out, ss[:n])
		ss = ss[n:]
	}
	return out
}
